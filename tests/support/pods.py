"""Pods as `kubectl get pods -o json` prints them (managedFields, status and all), for the
`--pods FILE` and `--pods -` sources: one pod, HAMi's allocation annotation entries naming an
instance, and the list around them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

NODE = "gpu-node-1"
ANNOTATION = "hami.io/vgpu-mig-allocations"

PodsFile = Callable[..., str]
"""The `pods_file` fixture: writes a pod list and returns its path for `--pods`."""


def entry(
    inst: dict[str, Any], container: int = 0, device: int = 0, **change: Any
) -> dict[str, Any]:
    """One `hami.io/vgpu-mig-allocations` entry naming `inst`; a change to None drops the key."""
    doc: dict[str, Any] = {
        "containerIndex": container,
        "deviceIndex": device,
        "gpuUUID": inst["gpuUUID"],
        "profile": inst["profile"],
        "placement": dict(inst["placement"]),
        "migUUID": inst["migUUID"],
        "gpuInstanceID": inst["gpuInstanceID"],
        "computeInstanceID": inst["computeInstanceID"],
    }
    doc.update(change)
    return {k: v for k, v in doc.items() if v is not None}


def pod_uid(ns: str, name: str) -> str:
    """The UID `kube_pod` gives pod `ns/name` unless told another."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{ns}/{name}"))


def kube_pod(
    key: str,
    entries: list[dict[str, Any]] | None = None,
    *,
    raw: str | None = None,
    uid: str | None = None,
    phase: str = "Running",
    deleting: bool = False,
    node: str = NODE,
) -> dict[str, Any]:
    """A pod as `kubectl get pods -o json` prints it (managedFields, status and all)."""
    ns, name = key.split("/")
    annotations = {
        "cni.projectcalico.org/podIP": "10.244.3.17/32",
        "hami.io/bind-phase": "success",
        "hami.io/vgpu-node": node,
    }
    if entries is not None:
        annotations[ANNOTATION] = json.dumps(entries, separators=(",", ":"))
    if raw is not None:
        annotations[ANNOTATION] = raw
    ready = "True" if phase == "Running" else "False"
    metadata: dict[str, Any] = {
        "annotations": annotations,
        "creationTimestamp": "2024-05-02T08:11:09Z",
        "generateName": f"{name}-",
        "labels": {"app.kubernetes.io/name": name},
        "managedFields": [
            {
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{ANNOTATION}": {}}}},
                "manager": "vgpu-scheduler",
                "operation": "Update",
                "time": "2024-05-02T08:11:09Z",
            }
        ],
        "name": name,
        "namespace": ns,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "ReplicaSet",
                "name": f"{name}-rs",
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"rs/{key}")),
            }
        ],
        "resourceVersion": "48213",
        "uid": uid or pod_uid(ns, name),
    }
    if deleting:
        metadata["deletionGracePeriodSeconds"] = 30
        metadata["deletionTimestamp"] = "2024-05-02T09:00:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "imagePullPolicy": "IfNotPresent",
                    "name": "main",
                    "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}},
                }
            ],
            "nodeName": node,
            "restartPolicy": "Always",
            "schedulerName": "hami-scheduler",
        },
        "status": {
            "conditions": [
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": "2024-05-02T08:11:12Z",
                    "status": ready,
                    "type": "Ready",
                }
            ],
            "hostIP": "10.0.0.7",
            "phase": phase,
            "podIP": "10.244.3.17",
            "qosClass": "BestEffort",
            "startTime": "2024-05-02T08:11:09Z",
        },
    }


def pod_list(*pods: dict[str, Any], kind: str = "List", more: bool = False) -> dict[str, Any]:
    """`kubectl get pods -o json` output (kind List; an API PodList with kind="PodList")."""
    meta: dict[str, Any] = {"resourceVersion": ""}
    if more:
        meta["continue"] = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDgyMTN9"
    return {"apiVersion": "v1", "items": list(pods), "kind": kind, "metadata": meta}


def write_pod_list(path: Path, *pods: dict[str, Any], fmt: str = "json", **kw: Any) -> str:
    """Write `pod_list(*pods, **kw)` to `path` as JSON, or YAML with fmt="yaml"; returns the path
    for `--pods`."""
    doc = pod_list(*pods, **kw)
    if fmt == "yaml":
        path.write_text(yaml.safe_dump(doc, default_flow_style=False))
    else:
        path.write_text(json.dumps(doc, indent=4))
    return str(path)
