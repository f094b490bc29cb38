"""Pod-list parsing benchmark: a 10,000-pod `kubectl get pods -o json|yaml` list, as recovery and
reconcile read it. Pods are shaped like kubectl's output (managedFields, status, conditions,
container statuses) with HAMi's allocation annotation on every third pod.

    python bench/pods.py [--pods 10000] [--yaml]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from hamimig.pods.annotation import ANNOTATION
from hamimig.pods.sources import read_pods_text


def pod(i: int, node: str) -> dict[str, Any]:
    name = f"worker-{i:05d}"
    stamp = "2026-11-29T10:00:00Z"
    annotations = {"kubectl.kubernetes.io/restartedAt": stamp}
    if i % 3 == 0:
        annotations[ANNOTATION] = json.dumps(
            [
                {
                    "containerIndex": 0,
                    "deviceIndex": 0,
                    "gpuUUID": f"GPU-{i % 8:08x}-0000-4000-8000-000000000000",
                    "profile": "1g.10gb",
                    "placement": {"start": i % 7, "size": 1},
                    "migUUID": f"MIG-{i:08x}-1111-4222-8333-444444444444",
                    "gpuInstanceID": 7 + i % 7,
                    "computeInstanceID": 0,
                }
            ]
        )
    condition = {"lastProbeTime": None, "lastTransitionTime": stamp, "status": "True"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "annotations": annotations,
            "creationTimestamp": stamp,
            "generateName": "worker-",
            "labels": {"app": "inference", "pod-template-hash": "5d8f9c7b6"},
            "managedFields": [
                {
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "time": stamp,
                }
            ],
            "name": name,
            "namespace": f"team-{i % 20}",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "worker-5d8f9c7b6",
                    "uid": f"{i:08x}-aaaa-4bbb-8ccc-dddddddddddd",
                    "controller": True,
                }
            ],
            "resourceVersion": str(100000 + i),
            "uid": f"{i:08x}-0000-4000-8000-000000000000",
        },
        "spec": {
            "containers": [
                {
                    "image": "registry.example/inference:1.2.3",
                    "name": "main",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "nodeName": node,
            "schedulerName": "hami-scheduler",
        },
        "status": {
            "conditions": [
                dict(condition, type=t)
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp}},
                }
            ],
            "hostIP": "10.0.0.1",
            "phase": "Running",
            "podIP": f"10.1.{i // 250}.{i % 250}",
            "startTime": stamp,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--yaml", action="store_true", help="also time the YAML form")
    args = parser.parse_args()
    doc = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [pod(i, ("gpu-1", "gpu-2")[i % 2]) for i in range(args.pods)],
    }
    text = json.dumps(doc, indent=4)
    walls = []
    for _ in range(5):
        began = time.perf_counter()
        snapshot = read_pods_text(text, "bench", "gpu-1")
        walls.append(time.perf_counter() - began)
    print(
        f"kubectl JSON list, {args.pods} pods, {len(text) / 1e6:.1f} MB: best of 5 "
        f"{min(walls):.3f} s, median {sorted(walls)[2]:.3f} s ({len(snapshot.pods)} on the node)"
    )
    if args.yaml:
        import yaml

        loader = "CSafeLoader" if hasattr(yaml, "CSafeLoader") else "SafeLoader (pure Python)"
        ytext = yaml.safe_dump(doc)
        began = time.perf_counter()
        read_pods_text(ytext, "bench", "gpu-1")
        print(
            f"kubectl YAML list, {args.pods} pods, {len(ytext) / 1e6:.1f} MB, {loader}: "
            f"{time.perf_counter() - began:.1f} s"
        )


if __name__ == "__main__":
    main()
