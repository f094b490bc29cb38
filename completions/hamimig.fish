# fish completion for hamimig, generated from the CLI by scripts/gen-docs.py: do not edit
function __hamimig_path
    set -l tokens (commandline -opc)
    set -l path
    for t in $tokens[2..-1]
        if contains -- (string join -- ' ' $path $t) $__hamimig_commands
            set path $path $t
        end
    end
    string join ' ' $path
end
function __hamimig_at
    # An empty path must still be one word for test: quote it.
    set -l path (__hamimig_path)
    test "$path" = "$argv[1]"
end
function __hamimig_records
    # One value a line from the ownership records (hamimig __complete: no NVML, no lock);
    # the state directory is the one the command line names, else HAMIMIG_STATE_DIR's.
    set -l tokens (commandline -opc)
    set -l statedir
    for i in (seq 2 (count $tokens))
        switch $tokens[$i]
            case --state-dir
                set -l next (math $i + 1)
                if test $next -le (count $tokens)
                    set statedir --state-dir $tokens[$next]
                end
            case '--state-dir=*'
                set statedir $tokens[$i]
        end
    end
    $tokens[1] $statedir __complete $argv[1] 2>/dev/null
end
set -g __hamimig_commands 'adopt' 'allocate' 'config' 'config show' 'demo' 'doctor' 'forget' 'list' 'metrics' 'profiles' 'reclaim' 'reconcile' 'recover' 'release' 'show' 'sim' 'sim busy' 'sim clock' 'sim create' 'sim fault' 'sim fault add' 'sim fault clear' 'sim init' 'sim mig-mode' 'sim reset' 'sim show'
complete -c hamimig -f
complete -c hamimig -n "__hamimig_at ''" -a adopt -d 'Claim unmarked complete GI/CI pairs as Idle (needs opt-in).'
complete -c hamimig -n "__hamimig_at ''" -a allocate -d 'Reuse an exact Idle match, else make room and create one.'
complete -c hamimig -n "__hamimig_at ''" -a config -d 'Inspect the configuration.'
complete -c hamimig -n "__hamimig_at ''" -a demo -d 'Narrate the whole lifecycle on a temporary simulated node.'
complete -c hamimig -n "__hamimig_at ''" -a doctor -d 'Health checks: NVML, MIG modes, directories, records, specs.'
complete -c hamimig -n "__hamimig_at ''" -a forget -d 'Drop one record (and its CDI spec) or one intent.'
complete -c hamimig -n "__hamimig_at ''" -a list -d 'Every MIG instance: records joined with the live layout.'
complete -c hamimig -n "__hamimig_at ''" -a metrics -d 'Prometheus metrics, for node-exporter\'s textfile collector.'
complete -c hamimig -n "__hamimig_at ''" -a profiles -d 'GI profiles and legal placements per GPU.'
complete -c hamimig -n "__hamimig_at ''" -a reclaim -d 'Destroy Idle or Error instances; never Active or unmanaged.'
complete -c hamimig -n "__hamimig_at ''" -a reconcile -d 'One maintenance pass: releases, retries, the idle policy.'
complete -c hamimig -n "__hamimig_at ''" -a recover -d 'Startup recovery: restore what pods hold, reconcile records.'
complete -c hamimig -n "__hamimig_at ''" -a release -d 'Confirmed release: Active -> Idle, kept for reuse.'
complete -c hamimig -n "__hamimig_at ''" -a show -d 'One instance: record, live identity, CDI spec and owner.'
complete -c hamimig -n "__hamimig_at ''" -a sim -d 'Manage a simulated MIG node (needs --sim PATH).'
complete -c hamimig -n "__hamimig_at ''" -l state-dir -r -d 'Ownership records, intents, queues and the node lock.'
complete -c hamimig -n "__hamimig_at ''" -l cdi-dir -r -d 'Where per-instance CDI specs live.'
complete -c hamimig -n "__hamimig_at ''" -l config -r -d 'YAML config (a missing file means defaults).'
complete -c hamimig -n "__hamimig_at ''" -l sim -r -d 'Use the simulated node stored in PATH instead of NVML.'
complete -c hamimig -n "__hamimig_at ''" -l node -r -d 'This node\'s Kubernetes name; filters pod lists.'
complete -c hamimig -n "__hamimig_at ''" -l output -s o -x -a 'table wide json yaml' -d 'How results are printed: table, wide, json, yaml.'
complete -c hamimig -n "__hamimig_at ''" -l version -d 'Print the version.'
complete -c hamimig -n "__hamimig_at ''" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'adopt'" -l pods -r -d 'Pods as \'kubectl get pods -o json|yaml\' prints them; \'-\' reads stdin.'
complete -c hamimig -n "__hamimig_at 'adopt'" -l kube -d 'List this node\'s pods through the Kubernetes API.'
complete -c hamimig -n "__hamimig_at 'adopt'" -l assume-no-pods -d 'Assert that no pod on this node holds a MIG instance.'
complete -c hamimig -n "__hamimig_at 'adopt'" -l gpu -r -d 'Only this GPU: NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'adopt'" -l exclusive-owner -d 'HAMi exclusively owns the complete MIG layout on this node (the opt-in).'
complete -c hamimig -n "__hamimig_at 'adopt'" -l dry-run -d 'Print the plan; change nothing.'
complete -c hamimig -n "__hamimig_at 'adopt'" -l lock-timeout -r -d 'How long to wait for the node lock (exit 7).'
complete -c hamimig -n "__hamimig_at 'adopt'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l pod -r -d 'The requesting pod: namespace/name.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l gpu -r -d 'NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l profile -x -a '1g.10gb 1g.10gb+me 1g.18gb 1g.18gb+me 1g.20gb 1g.23gb 1g.23gb+me 1g.35gb 1g.45gb 1g.5gb 1g.5gb+me 2g.10gb 2g.20gb 2g.35gb 2g.45gb 3g.20gb 3g.40gb 3g.71gb 3g.90gb 4g.20gb 4g.40gb 4g.71gb 4g.90gb 7g.141gb 7g.180gb 7g.40gb 7g.80gb (__hamimig_records profiles)' -d 'GI profile, e.g. 1g.10gb.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l placement -r -d 'Memory slices: START or START:SIZE; chosen when omitted.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l pod-uid -r -d 'The pod\'s UID.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l container-index -r -d 'Container index in the pod.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l device-index -r -d 'Device index in the container.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l dry-run -d 'Print the plan; change nothing.'
complete -c hamimig -n "__hamimig_at 'allocate'" -l lock-timeout -r -d 'How long to wait for the node lock (exit 7).'
complete -c hamimig -n "__hamimig_at 'allocate'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'config'" -a show -d 'Every setting\'s effective value and where it came from.'
complete -c hamimig -n "__hamimig_at 'config'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'config show'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'demo'" -l step -d 'Wait for Enter between steps.'
complete -c hamimig -n "__hamimig_at 'demo'" -l keep -r -d 'Build the demo node in this (empty) directory and keep it.'
complete -c hamimig -n "__hamimig_at 'demo'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'doctor'" -l pods -r -d 'Pods as \'kubectl get pods -o json|yaml\' prints them; \'-\' reads stdin.'
complete -c hamimig -n "__hamimig_at 'doctor'" -l kube -d 'List this node\'s pods through the Kubernetes API.'
complete -c hamimig -n "__hamimig_at 'doctor'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'forget'" -a '(__hamimig_records mig-uuids)'
complete -c hamimig -n "__hamimig_at 'forget'" -l intent -r -d 'Drop the intent <state-dir>/intent-ID.json.'
complete -c hamimig -n "__hamimig_at 'forget'" -l dry-run -d 'Print the plan; change nothing.'
complete -c hamimig -n "__hamimig_at 'forget'" -l lock-timeout -r -d 'How long to wait for the node lock (exit 7).'
complete -c hamimig -n "__hamimig_at 'forget'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'list'" -l gpu -r -d 'Only this GPU: NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'list'" -l state -x -a 'Creating Active Idle Reclaiming Error Unmanaged OrphanGI Missing' -d 'Only instances in this state (repeat for any of several): Creating, Active, Idle, Reclaiming, Error, Unmanaged, OrphanGI, Missing.'
complete -c hamimig -n "__hamimig_at 'list'" -l pod -r -d 'Only the instances this pod holds.'
complete -c hamimig -n "__hamimig_at 'list'" -l profile -x -a '1g.10gb 1g.10gb+me 1g.18gb 1g.18gb+me 1g.20gb 1g.23gb 1g.23gb+me 1g.35gb 1g.45gb 1g.5gb 1g.5gb+me 2g.10gb 2g.20gb 2g.35gb 2g.45gb 3g.20gb 3g.40gb 3g.71gb 3g.90gb 4g.20gb 4g.40gb 4g.71gb 4g.90gb 7g.141gb 7g.180gb 7g.40gb 7g.80gb (__hamimig_records profiles)' -d 'Only this GI profile (1g.10gb).'
complete -c hamimig -n "__hamimig_at 'list'" -l no-headers -d 'Tables without title, header row or borders: one instance a line.'
complete -c hamimig -n "__hamimig_at 'list'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'metrics'" -l textfile -r -d 'Replace PATH atomically (mode 0644) instead of printing; for node-exporter\'s textfile collector PATH is <--collector.textfile.directory>/hamimig.prom.'
complete -c hamimig -n "__hamimig_at 'metrics'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'profiles'" -l gpu -r -d 'Only this GPU: NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'profiles'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'reclaim'" -l mig-uuid -x -a '(__hamimig_records mig-uuids)' -d 'One instance: its MIG UUID, a unique prefix of it (MIG- and at least 8 hex digits) or its CDI device name (mig-<sha256> or KIND=mig-<sha256>).'
complete -c hamimig -n "__hamimig_at 'reclaim'" -l gpu -r -d 'NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'reclaim'" -l placement -r -d 'Memory slices on --gpu: START or START:SIZE.'
complete -c hamimig -n "__hamimig_at 'reclaim'" -l all-idle -d 'Every Idle (and Error) instance on --gpu.'
complete -c hamimig -n "__hamimig_at 'reclaim'" -l idle-older-than -r -d 'The Idle instances on --gpu idle longer than this: 90s, 30m, 2h, 1h30m.'
complete -c hamimig -n "__hamimig_at 'reclaim'" -l dry-run -d 'Print the plan; change nothing.'
complete -c hamimig -n "__hamimig_at 'reclaim'" -l lock-timeout -r -d 'How long to wait for the node lock (exit 7).'
complete -c hamimig -n "__hamimig_at 'reclaim'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'reconcile'" -l pods -r -d 'Pods as \'kubectl get pods -o json|yaml\' prints them; \'-\' reads stdin.'
complete -c hamimig -n "__hamimig_at 'reconcile'" -l kube -d 'List this node\'s pods through the Kubernetes API.'
complete -c hamimig -n "__hamimig_at 'reconcile'" -l dry-run -d 'Print the plan; change nothing.'
complete -c hamimig -n "__hamimig_at 'reconcile'" -l lock-timeout -r -d 'How long to wait for the node lock (exit 7).'
complete -c hamimig -n "__hamimig_at 'reconcile'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'recover'" -l pods -r -d 'Pods as \'kubectl get pods -o json|yaml\' prints them; \'-\' reads stdin.'
complete -c hamimig -n "__hamimig_at 'recover'" -l kube -d 'List this node\'s pods through the Kubernetes API.'
complete -c hamimig -n "__hamimig_at 'recover'" -l assume-no-pods -d 'Assert that no pod on this node holds a MIG instance.'
complete -c hamimig -n "__hamimig_at 'recover'" -l adopt -d 'HAMi exclusively owns the complete MIG layout: claim unmarked instances.'
complete -c hamimig -n "__hamimig_at 'recover'" -l dry-run -d 'Print the plan; change nothing.'
complete -c hamimig -n "__hamimig_at 'recover'" -l lock-timeout -r -d 'How long to wait for the node lock (exit 7).'
complete -c hamimig -n "__hamimig_at 'recover'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'release'" -l pod -r -d 'Release every instance of this pod.'
complete -c hamimig -n "__hamimig_at 'release'" -l mig-uuid -x -a '(__hamimig_records mig-uuids)' -d 'One instance: its MIG UUID, a unique prefix of it (MIG- and at least 8 hex digits) or its CDI device name (mig-<sha256> or KIND=mig-<sha256>).'
complete -c hamimig -n "__hamimig_at 'release'" -l dry-run -d 'Print the plan; change nothing.'
complete -c hamimig -n "__hamimig_at 'release'" -l lock-timeout -r -d 'How long to wait for the node lock (exit 7).'
complete -c hamimig -n "__hamimig_at 'release'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'show'" -a '(__hamimig_records mig-uuids)'
complete -c hamimig -n "__hamimig_at 'show'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim'" -a busy -d 'A process holds the instance: destroying it fails with IN_USE.'
complete -c hamimig -n "__hamimig_at 'sim'" -a clock -d 'Read or move the node\'s clock without waiting.'
complete -c hamimig -n "__hamimig_at 'sim'" -a create -d 'Make an instance behind hamimig\'s back.'
complete -c hamimig -n "__hamimig_at 'sim'" -a fault -d 'Inject or clear NVML and file-operation faults.'
complete -c hamimig -n "__hamimig_at 'sim'" -a init -d 'Create the simulated node: N GPUs of MODEL, MIG enabled.'
complete -c hamimig -n "__hamimig_at 'sim'" -a mig-mode -d 'Set MIG mode.'
complete -c hamimig -n "__hamimig_at 'sim'" -a reset -d 'Every instance on the GPU vanishes, as after a GPU reset.'
complete -c hamimig -n "__hamimig_at 'sim'" -a show -d 'GPUs, GI/CI layout, busy marks, faults and NVML call counts.'
complete -c hamimig -n "__hamimig_at 'sim'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim busy'" -l mig-uuid -x -a '(__hamimig_records mig-uuids)' -d 'The instance\'s full MIG UUID.'
complete -c hamimig -n "__hamimig_at 'sim busy'" -l gi-only -d 'Only the GI is held (a monitoring client).'
complete -c hamimig -n "__hamimig_at 'sim busy'" -l clear -d 'Remove the busy marks.'
complete -c hamimig -n "__hamimig_at 'sim busy'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim clock'" -l advance -r -d 'Move the clock forward: 90s, 30m, 2h, 1h30m.'
complete -c hamimig -n "__hamimig_at 'sim clock'" -l set -r -d 'Set the clock: 2026-12-01T10:00:00Z.'
complete -c hamimig -n "__hamimig_at 'sim clock'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim create'" -l gpu -r -d 'NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'sim create'" -l profile -x -a '1g.10gb 1g.10gb+me 1g.18gb 1g.18gb+me 1g.20gb 1g.23gb 1g.23gb+me 1g.35gb 1g.45gb 1g.5gb 1g.5gb+me 2g.10gb 2g.20gb 2g.35gb 2g.45gb 3g.20gb 3g.40gb 3g.71gb 3g.90gb 4g.20gb 4g.40gb 4g.71gb 4g.90gb 7g.141gb 7g.180gb 7g.40gb 7g.80gb (__hamimig_records profiles)' -d 'Profile, e.g. 1g.10gb.'
complete -c hamimig -n "__hamimig_at 'sim create'" -l placement -r -d 'Memory slices: START or START:SIZE.'
complete -c hamimig -n "__hamimig_at 'sim create'" -l no-ci -d 'Create only the GI.'
complete -c hamimig -n "__hamimig_at 'sim create'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim fault'" -a add -d 'Inject a fault: a matching call fails or the process dies.'
complete -c hamimig -n "__hamimig_at 'sim fault'" -a clear -d 'Remove all faults.'
complete -c hamimig -n "__hamimig_at 'sim fault'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim fault add'" -l op -x -a 'nvmlInit nvmlShutdown nvmlSystemGetDriverVersion nvmlDeviceGetCount nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByUUID nvmlDeviceGetIndex nvmlDeviceGetUUID nvmlDeviceGetName nvmlDeviceGetMinorNumber nvmlDeviceGetMigMode nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetGpuInstanceProfileInfo nvmlDeviceGetGpuInstanceProfileInfoById nvmlDeviceGetGpuInstancePossiblePlacements nvmlDeviceGetGpuInstanceRemainingCapacity nvmlDeviceCreateGpuInstanceWithPlacement nvmlDeviceGetGpuInstances nvmlDeviceGetGpuInstanceById nvmlGpuInstanceGetInfo nvmlGpuInstanceDestroy nvmlGpuInstanceGetComputeInstanceProfileInfo nvmlGpuInstanceCreateComputeInstance nvmlGpuInstanceGetComputeInstances nvmlGpuInstanceGetComputeInstanceById nvmlComputeInstanceGetInfo nvmlComputeInstanceDestroy nvmlDeviceGetMaxMigDeviceCount nvmlDeviceGetMigDeviceHandleByIndex nvmlDeviceIsMigDeviceHandle nvmlDeviceGetGpuInstanceId nvmlDeviceGetComputeInstanceId nvmlDeviceGetDeviceHandleFromMigDeviceHandle record.write record.remove cdi.write cdi.remove intent.write intent.remove queue.write' -d 'A file operation (record.write, record.remove, cdi.write, cdi.remove, intent.write, intent.remove, queue.write) or an NVML function the simulator implements (listed below).'
complete -c hamimig -n "__hamimig_at 'sim fault add'" -l error -r -d 'An NVML error name (IN_USE, UNKNOWN and the like) or an errno name (EIO).'
complete -c hamimig -n "__hamimig_at 'sim fault add'" -l action -x -a 'raise crash-before crash-after' -d 'What the fault does when it fires: raise, crash-before, crash-after.'
complete -c hamimig -n "__hamimig_at 'sim fault add'" -l times -r -d 'Fire on this many matching calls.'
complete -c hamimig -n "__hamimig_at 'sim fault add'" -l skip -r -d 'Let this many matching calls pass first.'
complete -c hamimig -n "__hamimig_at 'sim fault add'" -l gpu -r -d 'Only this GPU: NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'sim fault add'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim fault clear'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim init'" -l model -x -a 'A100-SXM4-40GB A100-SXM4-80GB H100-SXM5-80GB H200-SXM5-141GB B200-180GB' -d 'The GPU board: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, H200-SXM5-141GB, B200-180GB.'
complete -c hamimig -n "__hamimig_at 'sim init'" -l count -r -d 'Number of GPUs (1 to 32).'
complete -c hamimig -n "__hamimig_at 'sim init'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim mig-mode'" -l gpu -r -d 'NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'sim mig-mode'" -l enable -l disable -d 'Turn MIG on or off.'
complete -c hamimig -n "__hamimig_at 'sim mig-mode'" -l pending -d 'Only request the change (it waits for a GPU reset).'
complete -c hamimig -n "__hamimig_at 'sim mig-mode'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim reset'" -l gpu -r -d 'NVML index or GPU UUID.'
complete -c hamimig -n "__hamimig_at 'sim reset'" -s h -l help -d 'Show the help and exit.'
complete -c hamimig -n "__hamimig_at 'sim show'" -s h -l help -d 'Show the help and exit.'
