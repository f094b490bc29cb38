"""Recovery benchmark: `hamimig recover` on a simulated node with 8 H100s, 7 Active 1g.10gb
instances on each, given a 10,000-pod `kubectl get pods -o json` list in which 56 pods hold those
instances (the others run on another node). Each command runs as its own process, as an init
container would run it, and is compared with `hamimig --help` (interpreter and CLI start-up).

    python bench/recover.py [--pods 10000] [--runs 5] [--profile FILE]

`--profile FILE` also writes a cProfile of one recover run to FILE.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.pods import pod
from hamimig.pods.annotation import ANNOTATION

GPUS, PER_GPU, NODE = 8, 7, "gpu-1"


def hamimig(base: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hamimig", *base, *args], capture_output=True, text=True, check=False
    )


def setup(root: Path, pods: int) -> tuple[list[str], Path]:
    """The node, its 56 Active instances and the pod list; the global options to reach them."""
    sim, config = root / "sim" / "node.json", root / "config.yaml"
    config.write_text("cdi:\n  baseSpec: none\n", encoding="utf-8")
    base = [
        "--sim",
        str(sim),
        "--state-dir",
        str(root / "state"),
        "--cdi-dir",
        str(root / "cdi"),
        "--config",
        str(config),
        "--node",
        NODE,
    ]
    (root / "state").mkdir(mode=0o700)
    (root / "cdi").mkdir()
    ran = hamimig(base, "sim", "init", "--model", "H100-SXM5-80GB", "--count", str(GPUS))
    assert ran.returncode == 0, ran.stderr
    items: list[dict[str, Any]] = [pod(i, "gpu-2") for i in range(pods)]
    for gpu in range(GPUS):
        for start in range(PER_GPU):
            name = f"holder-{gpu}-{start}"
            ran = hamimig(
                base,
                *("-o", "json", "allocate", "--pod", f"bench/{name}", "--gpu", str(gpu)),
                *("--profile", "1g.10gb", "--placement", str(start)),
                "--assume-no-pods",  # the node is being built: no pod holds anything yet
            )
            assert ran.returncode == 0, ran.stdout + ran.stderr
            inst = json.loads(ran.stdout)["instance"]
            holder = items[gpu * PER_GPU + start]
            holder["metadata"].update(name=name, namespace="bench")
            holder["spec"]["nodeName"] = NODE
            holder["metadata"]["annotations"][ANNOTATION] = json.dumps(
                [
                    {
                        "containerIndex": 0,
                        "deviceIndex": 0,
                        "gpuUUID": inst["gpuUUID"],
                        "profile": "1g.10gb",
                        "placement": {"start": start, "size": 1},
                        "migUUID": inst["migUUID"],
                        "gpuInstanceID": inst["gpuInstanceID"],
                        "computeInstanceID": inst["computeInstanceID"],
                    }
                ]
            )
    pod_file = root / "pods.json"
    doc = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
    pod_file.write_text(json.dumps(doc, indent=4), encoding="utf-8")
    return base, pod_file


def timed(command: list[str]) -> float:
    began = time.perf_counter()
    ran = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hamimig-bench-") as tmp:
        base, pod_file = setup(Path(tmp), args.pods)
        recover = [sys.executable, "-m", "hamimig", *base, "recover", "--pods", str(pod_file)]
        help_ = [sys.executable, "-m", "hamimig", "--help"]
        timed(recover)  # the first run restores; later ones find everything in place
        helps, recovers = [], []
        for _ in range(args.runs):
            helps.append(timed(help_))
            recovers.append(timed(recover))
        if args.profile is not None:
            profile = [sys.executable, "-m", "cProfile", "-o", str(args.profile), *recover[1:]]
            timed(profile)
    h, r = statistics.median(helps), statistics.median(recovers)
    print(
        f"{GPUS} x H100, {GPUS * PER_GPU} instances, {args.pods} pods: median of {args.runs}: "
        f"hamimig --help {h:.2f} s, recover {r:.2f} s, recover - help {r - h:.2f} s"
    )


if __name__ == "__main__":
    main()
