"""deploy/: every manifest loads into the official Kubernetes client's models,
loses nothing on the way (a misspelt field would be dropped silently), and carries what the
node needs: the commands, NODE_NAME from the downward API, the hostPath mounts and the RBAC.
"""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hamimig.cli.app import app

kubernetes = pytest.importorskip("kubernetes")

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
IMAGE = "ghcr.io/example/hamimig:0.1.0"
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


def hamimig_argv(container: dict[str, Any]) -> list[str]:
    """The hamimig command line a container runs (directly, or inside its shell loop)."""
    argv = [*container.get("command", []), *container.get("args", [])]
    if argv[:2] == ["/bin/sh", "-c"]:
        line = next(ln for ln in argv[2].splitlines() if "hamimig " in ln)
        words = shlex.split(line.split("||")[0])
        return words
    return argv


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
        argv = hamimig_argv(container)
        found[file] = argv[1:]
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
        assert mounts == HOST_PATHS, file
        # runc refuses mount points inside /proc.
        assert not any(path.startswith("/proc/") for path, _ in mounts.values())
    assert found == {
        PATCH: ["recover", "--kube"],
        "reconcile-daemonset.yaml": ["reconcile", "--kube"],
        "reconcile-cronjob.yaml": ["reconcile", "--kube"],
    }


@pytest.mark.parametrize("argv", [["recover", "--kube"], ["reconcile", "--kube"]])
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
