# bash completion for hamimig, generated from the CLI by scripts/gen-docs.py: do not edit
_hamimig_records() {
    # One value a line from the ownership records (hamimig __complete: no NVML, no lock);
    # the state directory is the one the command line names (or its --sim node's), else
    # HAMIMIG_STATE_DIR's.
    local i v statedir=()
    for ((i=1; i<COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            --state-dir|--sim)
                v="${COMP_WORDS[i+1]}"
                [[ "$v" == "=" ]] && v="${COMP_WORDS[i+2]}"
                statedir+=("${COMP_WORDS[i]}" "${v/#\~/$HOME}");;
            --state-dir=*|--sim=*) statedir+=("${COMP_WORDS[i]}");;
        esac
    done
    "${COMP_WORDS[0]}" "${statedir[@]}" __complete "$1" 2>/dev/null
}
_hamimig() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    local path="" w i
    case "$prev" in
        --action) COMPREPLY=($(compgen -W "raise crash-before crash-after" -- "$cur")); return;;
        --kind) COMPREPLY=($(compgen -W "compute graphics mps" -- "$cur")); return;;
        --model) COMPREPLY=($(compgen -W "A100-SXM4-40GB A100-SXM4-80GB H100-SXM5-80GB H200-SXM5-141GB B200-180GB" -- "$cur")); return;;
        --op) COMPREPLY=($(compgen -W "nvmlInit nvmlShutdown nvmlSystemGetDriverVersion nvmlDeviceGetCount nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByUUID nvmlDeviceGetIndex nvmlDeviceGetUUID nvmlDeviceGetName nvmlDeviceGetMinorNumber nvmlDeviceGetMigMode nvmlDeviceGetAttributes nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetGraphicsRunningProcesses nvmlDeviceGetMPSComputeRunningProcesses nvmlDeviceGetGpuInstanceProfileInfo nvmlDeviceGetGpuInstanceProfileInfoById nvmlDeviceGetGpuInstancePossiblePlacements nvmlDeviceGetGpuInstanceRemainingCapacity nvmlDeviceCreateGpuInstanceWithPlacement nvmlDeviceGetGpuInstances nvmlDeviceGetGpuInstanceById nvmlGpuInstanceGetInfo nvmlGpuInstanceDestroy nvmlGpuInstanceGetComputeInstanceProfileInfo nvmlGpuInstanceCreateComputeInstance nvmlGpuInstanceGetComputeInstances nvmlGpuInstanceGetComputeInstanceById nvmlComputeInstanceGetInfo nvmlComputeInstanceDestroy nvmlDeviceGetMaxMigDeviceCount nvmlDeviceGetMigDeviceHandleByIndex nvmlDeviceIsMigDeviceHandle nvmlDeviceGetGpuInstanceId nvmlDeviceGetComputeInstanceId nvmlDeviceGetDeviceHandleFromMigDeviceHandle record.write record.remove cdi.write cdi.remove intent.write intent.remove queue.write events.write" -- "$cur")); return;;
        --output) COMPREPLY=($(compgen -W "table wide json yaml name" -- "$cur")); return;;
        --state) COMPREPLY=($(compgen -W "Creating Active Idle Reclaiming Error Unmanaged OrphanGI Missing Unreadable" -- "$cur")); return;;
        -o) COMPREPLY=($(compgen -W "table wide json yaml name" -- "$cur")); return;;
        --mig-uuid) COMPREPLY=($(compgen -W "$(_hamimig_records mig-uuids)" -- "$cur")); return;;
        --profile) COMPREPLY=($(compgen -W "1g.10gb 1g.10gb+me 1g.18gb 1g.18gb+me 1g.20gb 1g.23gb 1g.23gb+me 1g.35gb 1g.45gb 1g.5gb 1g.5gb+me 2g.10gb 2g.20gb 2g.35gb 2g.45gb 3g.20gb 3g.40gb 3g.71gb 3g.90gb 4g.20gb 4g.40gb 4g.71gb 4g.90gb 7g.141gb 7g.180gb 7g.40gb 7g.80gb $(_hamimig_records profiles)" -- "$cur")); return;;
        --action|--advance|--cdi-dir|--ci-count|--ci-slices|--config|--container-index|--count|--device-index|--driver-version|--error|--gpu|--idle-older-than|--intent|--keep|--kind|--limit|--lock-timeout|--mig-uuid|--model|--node|--op|--output|--placement|--pod|--pod-uid|--pods|--profile|--set|--sim|--since|--skip|--state|--state-dir|--textfile|--times|-o) COMPREPLY=(); return;;
    esac
    for ((i=1; i<COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        case "$path:$w" in
            ":adopt"|":allocate"|":config"|":demo"|":doctor"|":events"|":forget"|":list"|":metrics"|":profiles"|":reclaim"|":reconcile"|":recover"|":release"|":show"|":sim"|"config:show"|"sim fault:add"|"sim fault:clear"|"sim:busy"|"sim:clock"|"sim:create"|"sim:fault"|"sim:init"|"sim:mig-mode"|"sim:reset"|"sim:show") path="${path:+$path }$w";;
        esac
    done
    local words
    case "$path" in
        "") words="--state-dir --cdi-dir --config --sim --node --output -o --version -h --help adopt allocate config demo doctor events forget list metrics profiles reclaim reconcile recover release show sim";;
        "adopt") words="--pods --kube --assume-no-pods --gpu --exclusive-owner --dry-run --lock-timeout -h --help";;
        "allocate") words="--pod --gpu --profile --placement --pod-uid --container-index --device-index --pods --kube --assume-no-pods --dry-run --lock-timeout -h --help";;
        "config") words="-h --help show";;
        "config show") words="-h --help";;
        "demo") words="--step --keep -h --help";;
        "doctor") words="--pods --kube -h --help";;
        "events") words="--mig-uuid --pod --gpu --since --limit -h --help";;
        "forget") words="--intent --dry-run --lock-timeout -h --help";;
        "list") words="--gpu --state --pod --profile --no-headers -h --help";;
        "metrics") words="--textfile -h --help";;
        "profiles") words="--gpu -h --help";;
        "reclaim") words="--mig-uuid --gpu --placement --all-idle --idle-older-than --pods --kube --assume-no-pods --dry-run --lock-timeout -h --help";;
        "reconcile") words="--pods --kube --dry-run --lock-timeout -h --help";;
        "recover") words="--pods --kube --assume-no-pods --adopt --dry-run --lock-timeout -h --help";;
        "release") words="--pod --pod-uid --mig-uuid --dry-run --lock-timeout -h --help";;
        "show") words="-h --help";;
        "sim") words="-h --help busy clock create fault init mig-mode reset show";;
        "sim busy") words="--mig-uuid --kind --gi-only --clear -h --help";;
        "sim clock") words="--advance --set -h --help";;
        "sim create") words="--gpu --profile --placement --no-ci --ci-slices --ci-count -h --help";;
        "sim fault") words="-h --help add clear";;
        "sim fault add") words="--op --error --action --times --skip --gpu -h --help";;
        "sim fault clear") words="-h --help";;
        "sim init") words="--model --count --driver-version -h --help";;
        "sim mig-mode") words="--gpu --enable --disable --pending -h --help";;
        "sim reset") words="--gpu -h --help";;
        "sim show") words="-h --help";;
    esac
    case "$path" in
        "forget"|"show")
            [[ "$cur" == -* ]] || words="$words $(_hamimig_records mig-uuids)";;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _hamimig hamimig
