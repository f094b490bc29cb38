"""deploy/: every manifest loads into the official Kubernetes client's models,
loses nothing on the way (a misspelt field would be dropped silently), and carries what the
node needs: the commands, NODE_NAME from the downward API, the hostPath mounts and the RBAC;
and the reconcile DaemonSet's loop writes the metrics textfile after every pass, failed or not,
kills a hung command by its timeout and goes on, and removes the textfile at once on SIGTERM.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hamimig.cli.app import app

kubernetes = pytest.importorskip("kubernetes")

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
IMAGE = "localhost/hamimig:0.1.0"
"""The one image every manifest runs: what deploy/README.md builds from the Containerfile."""
PATCH = "device-plugin-recover-patch.yaml"
MODELS = {
    "DaemonSet": "V1DaemonSet",
    "CronJob": "V1CronJob",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
}
HOST_PATHS = {
    "/var/run/hami/dynamic-mig-state": ("/var/run/hami/dynamic-mig-state", False),
    "/var/run/cdi": ("/var/run/cdi", False),
    "/etc/cdi": ("/etc/cdi", True),
    "/dev": ("/dev", False),
    "/proc/driver/nvidia": ("/host/proc/driver/nvidia", True),
}
"""host path -> (mount path in the container, read-only)."""
TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"
TEXTFILE = "/host/textfile/hamimig.prom"
EXTRA_HOST_PATHS = {"reconcile-daemonset.yaml": {TEXTFILE_DIR: ("/host/textfile", False)}}
"""Mounts one manifest has beyond HOST_PATHS: the DaemonSet writes node-exporter's textfile."""


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append((path.name, doc))
    return out


def by_file(name: str) -> list[dict[str, Any]]:
    return [doc for file, doc in documents() if file == name]


def deserialize(doc: dict[str, Any], model: str) -> Any:
    """The client's own deserializer (what `kubectl`-like tools built on it would load)."""
    api = kubernetes.client.ApiClient()
    obj = api._ApiClient__deserialize(copy.deepcopy(doc), model)
    # Unknown or misspelt fields are dropped silently: a lossless round trip proves none.
    assert api.sanitize_for_serialization(obj) == doc, f"{model}: fields lost in the round trip"
    return obj


# A minimal stand-in for HAMi's device-plugin DaemonSet, enough to apply the patch onto.
HAMI_DEVICE_PLUGIN: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "hami-device-plugin", "namespace": "kube-system"},
    "spec": {
        "selector": {"matchLabels": {"app.kubernetes.io/component": "hami-device-plugin"}},
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/component": "hami-device-plugin"}},
            "spec": {
                "serviceAccountName": "hami-device-plugin",
                "containers": [
                    {
                        "name": "device-plugin",
                        "image": "projecthami/hami:latest",
                        "volumeMounts": [
                            {
                                "name": "device-plugin",
                                "mountPath": "/var/lib/kubelet/device-plugins",
                            }
                        ],
                    }
                ],
                "volumes": [
                    {
                        "name": "device-plugin",
                        "hostPath": {"path": "/var/lib/kubelet/device-plugins"},
                    }
                ],
            },
        },
    },
}


def strategic_merge(base: Any, patch: Any) -> Any:
    """The subset of a strategic merge patch these manifests use: maps merge recursively, lists
    of named objects (containers, volumes, env, mounts) merge by name, anything else replaces."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = strategic_merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    named = isinstance(base, list) and isinstance(patch, list)
    if named and all(isinstance(i, dict) and "name" in i for i in [*base, *patch]):
        merged = {i["name"]: i for i in base}
        for item in patch:
            name = item["name"]
            merged[name] = strategic_merge(merged[name], item) if name in merged else item
        return list(merged.values())
    return copy.deepcopy(patch)


def pod_specs() -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(file, pod spec, the containers that run hamimig) of every workload manifest."""
    out = []
    for file, doc in documents():
        if doc["kind"] == "DaemonSet" and file == PATCH:
            spec = doc["spec"]["template"]["spec"]
            out.append((file, spec, spec["initContainers"]))
        elif doc["kind"] == "DaemonSet":
            spec = doc["spec"]["template"]["spec"]
            out.append((file, spec, spec["containers"]))
        elif doc["kind"] == "CronJob":
            spec = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            out.append((file, spec, spec["containers"]))
    return out


TIMED = re.compile(r'timeout "\$\{(\w+):-(\d+)\}" (hamimig [^&|]+) & pid=\$!$')
"""A loop line running hamimig under `timeout "${VAR:-default}"`, in the background."""


def hamimig_argvs(container: dict[str, Any]) -> list[list[str]]:
    """The hamimig command lines a container runs, in order (directly, or each line of its shell
    loop that runs one: `timeout "${VAR:-N}" hamimig ... & pid=$!`)."""
    argv = [*container.get("command", []), *container.get("args", [])]
    if argv[:2] == ["/bin/sh", "-c"]:
        lines = [ln.strip() for ln in argv[2].splitlines()]
        assert not [ln for ln in lines if ln.startswith("hamimig ")], "hamimig without a timeout"
        return [shlex.split(m.group(3)) for ln in lines if (m := TIMED.match(ln))]
    return [argv]


def reconcile_loop() -> str:
    """The shell script the reconcile DaemonSet's container runs."""
    [daemonset] = by_file("reconcile-daemonset.yaml")
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "-c"]
    [script] = container["args"]
    return str(script)


# ---------------------------------------------------------------------------------------------


def test_every_manifest_deserializes_into_the_client_models() -> None:
    docs = documents()
    assert {file for file, _ in docs} == {
        "rbac.yaml",
        PATCH,
        "reconcile-daemonset.yaml",
        "reconcile-cronjob.yaml",
    }
    kinds = sorted(doc["kind"] for _, doc in docs)
    assert kinds == sorted(
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "DaemonSet", "CronJob"]
    )
    for file, doc in docs:
        if file == PATCH:
            continue  # a partial object: checked applied onto a DaemonSet below
        deserialize(doc, MODELS[doc["kind"]])


def test_the_patch_only_adds_the_init_container_and_its_volumes() -> None:
    [patch] = by_file(PATCH)
    assert (patch["apiVersion"], patch["kind"]) == ("apps/v1", "DaemonSet")
    assert patch["metadata"] == {"name": "hami-device-plugin", "namespace": "kube-system"}
    assert list(patch["spec"]) == ["template"]
    assert list(patch["spec"]["template"]) == ["spec"]
    assert sorted(patch["spec"]["template"]["spec"]) == ["initContainers", "volumes"]
    for container in patch["spec"]["template"]["spec"]["initContainers"]:
        deserialize(container, "V1Container")
    for volume in patch["spec"]["template"]["spec"]["volumes"]:
        deserialize(volume, "V1Volume")
    # Applied onto HAMi's DaemonSet it is a valid DaemonSet that keeps HAMi's own parts.
    merged = strategic_merge(HAMI_DEVICE_PLUGIN, patch)
    ds = deserialize(merged, "V1DaemonSet")
    spec = ds.spec.template.spec
    assert [c.name for c in spec.containers] == ["device-plugin"]
    assert [c.name for c in spec.init_containers] == ["hamimig-recover"]
    assert {v.name for v in spec.volumes} == {
        "device-plugin",
        "hamimig-state",
        "hamimig-cdi",
        "hamimig-etc-cdi",
        "hamimig-dev",
        "hamimig-proc-driver-nvidia",
    }


def test_commands_node_name_host_paths_and_privileges() -> None:
    found = {}
    for file, spec, containers in pod_specs():
        [container] = containers
        argvs = hamimig_argvs(container)
        assert all(argv[0] == "hamimig" for argv in argvs), file
        found[file] = [argv[1:] for argv in argvs]
        assert container["image"] == IMAGE, file
        env = {e["name"]: e for e in container["env"]}
        assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        assert env["HAMIMIG_STATE_DIR"]["value"] == "/var/run/hami/dynamic-mig-state"
        assert env["HAMIMIG_CDI_DIR"]["value"] == "/var/run/cdi"
        assert env["NVIDIA_MIG_CONFIG_DEVICES"]["value"] == "all"
        assert container["securityContext"]["privileged"] is True
        volumes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
        mounts = {
            volumes[m["name"]]: (m["mountPath"], m.get("readOnly", False))
            for m in container["volumeMounts"]
        }
        assert mounts == {**HOST_PATHS, **EXTRA_HOST_PATHS.get(file, {})}, file
        # runc refuses mount points inside /proc.
        assert not any(path.startswith("/proc/") for path, _ in mounts.values())
    assert found == {
        PATCH: [["recover", "--kube"]],
        "reconcile-daemonset.yaml": [["reconcile", "--kube"], ["metrics", "--textfile", TEXTFILE]],
        "reconcile-cronjob.yaml": [["reconcile", "--kube"]],
    }


def test_the_textfile_volume_is_node_exporters_directory_created_if_missing() -> None:
    [daemonset] = by_file("reconcile-daemonset.yaml")
    spec = daemonset["spec"]["template"]["spec"]
    [volume] = [v for v in spec["volumes"] if v["name"] == "hamimig-textfile"]
    assert volume == {
        "name": "hamimig-textfile",
        "hostPath": {"path": TEXTFILE_DIR, "type": "DirectoryOrCreate"},
    }
    [mount] = [
        m for c in spec["containers"] for m in c["volumeMounts"] if m["name"] == volume["name"]
    ]
    assert mount["mountPath"] + "/hamimig.prom" == TEXTFILE
    # The operator must point it at node-exporter's directory: the manifest says so.
    text = (DEPLOY / "reconcile-daemonset.yaml").read_text()
    assert "--collector.textfile.directory" in text


@pytest.mark.parametrize(
    "argv",
    [["recover", "--kube"], ["reconcile", "--kube"], ["metrics", "--textfile", TEXTFILE]],
)
def test_the_manifest_command_lines_are_valid_hamimig_invocations(argv: list[str]) -> None:
    # Click parses every option before it honours --help: an unknown option would exit 2.
    ran = CliRunner().invoke(app, [*argv, "--help"], catch_exceptions=False)
    assert ran.exit_code == 0, ran.stdout


def test_workloads_are_pinned_to_their_node() -> None:
    [cronjob] = [d for f, d in documents() if d["kind"] == "CronJob"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": ["REPLACE-WITH-GPU-NODE-NAME"]}
    ]
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "hamimig"
    [daemonset] = by_file("reconcile-daemonset.yaml")
    template = daemonset["spec"]["template"]
    assert template["spec"]["serviceAccountName"] == "hamimig"
    assert (
        daemonset["spec"]["selector"]["matchLabels"].items()
        <= template["metadata"]["labels"].items()
    )
    assert template["spec"]["nodeSelector"]["hamimig.io/reconcile"] == "enabled"


def test_rbac_grants_exactly_get_and_list_on_pods_and_get_on_nodes() -> None:
    """`--kube` reads its Node object (to verify NODE_NAME) and lists its pods; nothing more."""
    docs = {d["kind"]: d for d in by_file("rbac.yaml")}
    account = deserialize(docs["ServiceAccount"], "V1ServiceAccount")
    role = deserialize(docs["ClusterRole"], "V1ClusterRole")
    binding = deserialize(docs["ClusterRoleBinding"], "V1ClusterRoleBinding")
    rules = sorted(
        (rule.api_groups, rule.resources, sorted(rule.verbs), rule.resource_names)
        for rule in role.rules
    )
    assert rules == [([""], ["nodes"], ["get"], None), ([""], ["pods"], ["get", "list"], None)]
    assert (binding.role_ref.kind, binding.role_ref.name) == ("ClusterRole", role.metadata.name)
    subjects = {(s.kind, s.name, s.namespace) for s in binding.subjects}
    assert ("ServiceAccount", account.metadata.name, account.metadata.namespace) in subjects
    # The init container runs with the device plugin pod's account: bound as well.
    assert ("ServiceAccount", "hami-device-plugin", "kube-system") in subjects


def test_the_loops_timeouts_are_set_in_the_manifest_and_default_to_the_same() -> None:
    [daemonset] = by_file("reconcile-daemonset.yaml")
    spec = daemonset["spec"]["template"]["spec"]
    [container] = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    timed = [TIMED.match(ln.strip()) for ln in reconcile_loop().splitlines()]
    defaults = {m.group(1): m.group(2) for m in timed if m}
    assert defaults == {"RECONCILE_TIMEOUT_SECONDS": "150", "METRICS_TIMEOUT_SECONDS": "60"}
    for name, default in defaults.items():
        assert env[name] == default, name
    # A pass may wait 60 s for the node lock and 30 s for the pod list: its timeout leaves room.
    assert int(env["RECONCILE_TIMEOUT_SECONDS"]) > 60 + 30
    # Where the alerts' thresholds come from is said next to the interval.
    text = (DEPLOY / "reconcile-daemonset.yaml").read_text()
    before = text.split("- name: RECONCILE_INTERVAL_SECONDS", 1)[0].rsplit("env:", 1)[1]
    assert "deploy/monitoring/hamimig-rules.yaml" in before


# --- the reconcile loop, run by /bin/sh with a stand-in hamimig --------------------------------

FAKE_HAMIMIG = """#!/bin/sh
# Stand-in for hamimig: logs its arguments. Call number $HANG_RECONCILE of reconcile and number
# $HANG_METRICS of metrics hang; other reconciles fail (exit 5); metrics call number
# $FAIL_METRICS fails (exit 1), the others write the file, and after write number $STOP_AFTER
# it sends the loop ($LOOP_PID) SIGTERM.
echo "$*" >> "$CALLS"
n=$(grep -c "^$1" "$CALLS")
case "$1" in
  reconcile)
    [ "$n" -eq "${HANG_RECONCILE:-0}" ] && exec sleep 30
    exit 5 ;;
  metrics)
    [ "$n" -eq "${HANG_METRICS:-0}" ] && exec sleep 30
    [ "$n" -eq "${FAIL_METRICS:-0}" ] && exit 1
    echo 'hamimig_pending_intents 0' > "$3"
    echo wrote >> "$CALLS"
    [ "$n" -eq "${STOP_AFTER:-0}" ] && kill -TERM "$LOOP_PID"
    exit 0 ;;
esac
exit 2
"""


def _loop(
    tmp_path: Path, interval: int, stop_after: int, **fake: int
) -> tuple[list[str], Path, dict[str, str]]:
    """The DaemonSet's loop with its textfile under tmp_path and a stand-in hamimig on PATH;
    `fake` sets the stand-in's HANG_RECONCILE, HANG_METRICS, FAIL_METRICS (default 1) and the
    loop's RECONCILE_TIMEOUT_SECONDS and METRICS_TIMEOUT_SECONDS (default 10)."""
    script = reconcile_loop()
    # The metrics write and the trap's two removals name the same file.
    assert script.count(TEXTFILE) == 3
    textfile = tmp_path / "textfile" / "hamimig.prom"
    textfile.parent.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "hamimig"
    stub.write_text(FAKE_HAMIMIG)
    stub.chmod(0o755)
    settings = {
        "FAIL_METRICS": 1,
        "RECONCILE_TIMEOUT_SECONDS": 10,
        "METRICS_TIMEOUT_SECONDS": 10,
        **fake,
    }
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "CALLS": str(tmp_path / "calls"),
        "RECONCILE_INTERVAL_SECONDS": str(interval),
        "STOP_AFTER": str(stop_after),
        **{name: str(value) for name, value in settings.items()},
    }
    # The stand-in runs under `timeout`, so the loop is not its parent: tell it the loop's pid.
    script = "LOOP_PID=$$; export LOOP_PID\n" + script.replace(TEXTFILE, str(textfile))
    return ["/bin/sh", "-c", script], textfile, env


def _calls(tmp_path: Path) -> str:
    calls = tmp_path / "calls"
    return calls.read_text() if calls.exists() else ""


needs_sh = pytest.mark.skipif(
    not Path("/bin/sh").exists() or shutil.which("timeout") is None,
    reason="needs a POSIX /bin/sh and timeout",
)


@needs_sh
def test_the_loop_writes_metrics_after_every_pass_and_survives_failures(tmp_path: Path) -> None:
    argv, textfile, env = _loop(tmp_path, interval=0, stop_after=2)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr  # SIGTERM: the trap exits 0
    calls = (tmp_path / "calls").read_text().splitlines()
    metrics = f"metrics --textfile {textfile}"
    # Reconcile failed both times; metrics was written anyway, and its first failure did not
    # stop the loop.
    assert calls == ["reconcile --kube", metrics, "reconcile --kube", metrics, "wrote"]
    assert done.stderr.count("hamimig reconcile exited 5; next pass in 0s") == 2
    assert done.stderr.count("hamimig metrics exited 1; hamimig.prom not updated") == 1
    # Stopping removes the file: a node switched off on purpose exports no stale metrics.
    assert not textfile.exists()


@needs_sh
def test_the_loop_stops_at_once_during_its_sleep(tmp_path: Path) -> None:
    argv, textfile, env = _loop(tmp_path, interval=600, stop_after=0)
    loop = subprocess.Popen(argv, env=env, start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        calls = tmp_path / "calls"
        while "metrics" not in (calls.read_text() if calls.exists() else ""):
            assert time.monotonic() < deadline, "the loop never ran a pass"
            assert loop.poll() is None, "the loop exited"
            time.sleep(0.05)
        loop.send_signal(signal.SIGTERM)
        assert loop.wait(timeout=20) == 0  # not the 600 s sleep
        assert not textfile.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(loop.pid, signal.SIGKILL)  # the orphaned sleep, if any
        loop.wait()


@needs_sh
def test_a_hung_command_is_killed_by_its_timeout_and_the_loop_goes_on(tmp_path: Path) -> None:
    """The first reconcile and the second metrics write hang (NVML on a lost GPU): each is
    killed after its timeout, logged, and the loop goes on to the next step."""
    argv, textfile, env = _loop(
        tmp_path,
        interval=0,
        stop_after=3,
        HANG_RECONCILE=1,
        HANG_METRICS=2,
        FAIL_METRICS=0,
        RECONCILE_TIMEOUT_SECONDS=1,
        METRICS_TIMEOUT_SECONDS=1,
    )
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20  # the timeouts, not the stand-in's 30 s hang
    metrics = f"metrics --textfile {textfile}"
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [
        *["reconcile --kube", metrics, "wrote"],  # reconcile hung, then metrics wrote anyway
        *["reconcile --kube", metrics],  # metrics hung
        *["reconcile --kube", metrics, "wrote"],  # and the loop still runs
    ]
    # Killed by timeout: 124 (coreutils) or 143 (BusyBox: SIGTERM).
    timed_out = r"exited (124|143)"
    assert len(re.findall(f"hamimig reconcile {timed_out}; next pass in 0s", done.stderr)) == 1
    assert done.stderr.count("hamimig reconcile exited 5; next pass in 0s") == 2
    assert len(re.findall(f"hamimig metrics {timed_out}; hamimig.prom not updated", done.stderr))
    assert not textfile.exists()


@needs_sh
def test_sigterm_during_a_hung_pass_removes_the_textfile_at_once(tmp_path: Path) -> None:
    """The trap does not wait for a hung command before removing hamimig.prom: were the pod
    SIGKILLed at the end of its grace period, no stale metrics stay behind."""
    argv, textfile, env = _loop(
        tmp_path, interval=0, stop_after=0, HANG_RECONCILE=3, RECONCILE_TIMEOUT_SECONDS=3
    )
    loop = subprocess.Popen(argv, env=env, start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        # Pass 1's metrics write fails, pass 2's writes the file, pass 3's reconcile hangs.
        while _calls(tmp_path).count("reconcile") < 3:
            assert time.monotonic() < deadline, _calls(tmp_path)
            assert loop.poll() is None, "the loop exited"
            time.sleep(0.05)
        assert textfile.exists()
        loop.send_signal(signal.SIGTERM)
        removed = time.monotonic() + 2
        while textfile.exists():
            assert time.monotonic() < removed, "hamimig.prom not removed at SIGTERM"
            time.sleep(0.02)
        assert loop.poll() is None  # still waiting for the pass, which is not cut short
        assert loop.wait(timeout=20) == 0  # once its timeout ends it
        assert not textfile.exists()
        assert _calls(tmp_path).count("metrics") == 2  # no write after the SIGTERM
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()
