"""Regenerate the examples of docs/runbook.md from real runs.

Builds the runbook's simulated node (two H100s: team-a/train-1 holding a 2g.20gb that reclaimed
team-e/tmp-1's Idle 1g.10gb, team-b/infer-1 a 1g.10gb, one Idle 1g.10gb, an unmanaged 3g.40gb on
GPU 1), runs every command the Runbook
shows, in its order, at `COLUMNS=100` unless the command sets another width (`COLUMNS=80 hamimig
list`: what an 80- or 120-column terminal shows), and writes what each printed, with its exit
status, into the runbook's text blocks. A second node shows a record that no longer matches its
hardware, for "When recovery refuses".

    python scripts/runbook.py          # rewrites docs/runbook.md in place
    python scripts/runbook.py --check  # exit 1 if the block commands differ from the runbook's

Each block is found by its place in the Runbook section and checked by its first command, so a
runbook edit that moves blocks fails loudly instead of pasting output under the wrong prose.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNBOOK = ROOT / "docs" / "runbook.md"
WORK = Path("/tmp/hamimig-runbook")
WIDTH = "100"


class Node:
    """A simulated node in its own directory, with the global options in the environment so
    that the commands read exactly as the runbook prints them."""

    def __init__(self, name: str) -> None:
        self.dir = WORK / name
        self.env = dict(
            os.environ,
            HAMIMIG_SIM=str(self.dir / "sim" / "node.json"),
            HAMIMIG_STATE_DIR=str(self.dir / "state"),
            HAMIMIG_CDI_DIR=str(self.dir / "cdi"),
            HAMIMIG_CONFIG=str(self.dir / "config.yaml"),
            COLUMNS=WIDTH,
            NO_COLOR="1",
        )
        self.env.pop("HAMIMIG_OUTPUT", None)
        self.env.pop("NODE_NAME", None)

    def quiet(self, *args: str) -> str:
        """Run `hamimig ARGS` as setup: it must succeed; returns its JSON output."""
        done = subprocess.run(
            [sys.executable, "-m", "hamimig", "-o", "json", *args],
            env=self.env,
            cwd=self.dir,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"setup failed: hamimig {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def allocate(self, pod: str, profile: str, placement: str, *extra: str) -> None:
        self.quiet(
            "allocate", "--pod", pod, "--gpu", "0", "--profile", profile,
            "--placement", placement, "--assume-no-pods", *extra,
        )  # fmt: skip

    def shown(self, *commands: str) -> str:
        """`$ command`, what it printed (stdout, then stderr) and `[exit N]`, per command."""
        out: list[str] = []
        for command in commands:
            line = command.replace("hamimig ", f"{sys.executable} -m hamimig ")
            done = subprocess.run(
                ["bash", "-c", line], env=self.env, cwd=self.dir, capture_output=True, text=True
            )
            out.append(f"$ {command}")
            text = (done.stdout + done.stderr).rstrip("\n")
            out += [row.rstrip() for row in text.splitlines()] if text else []
            out.append(f"[exit {done.returncode}]")
        return "\n".join(out) + "\n"


def uuid_of(node: Node, pod: str) -> str:
    listed = json.loads(node.quiet("list"))["instances"]
    found: str = next(
        i["migUUID"]
        for i in listed
        if i["owner"] and f"{i['owner']['namespace']}/{i['owner']['name']}" == pod
    )
    return found


def pod(
    key: str, phase: str, gpu_uuid: str | None = None, entry: dict[str, object] | None = None
) -> dict[str, object]:
    namespace, name = key.split("/")
    annotations = {}
    if entry is not None:
        annotations["hami.io/vgpu-mig-allocations"] = json.dumps([entry])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"nodeName": "gpu-1"},
        "status": {"phase": phase},
    }


def main_node() -> list[str]:
    node = Node("node")
    (node.dir / "sim").mkdir(parents=True)
    node.quiet("sim", "init", "--model", "H100-SXM5-80GB", "--count", "2")
    # A short job whose Idle slice team-a/train-1's request reclaims: `events` tells why it went.
    node.allocate("team-e/tmp-1", "1g.10gb", "0")
    node.quiet("release", "--pod", "team-e/tmp-1")
    node.allocate("team-a/train-1", "2g.20gb", "0")
    node.allocate("team-a/train-1", "1g.10gb", "6", "--device-index", "1")
    node.allocate("team-b/infer-1", "1g.10gb", "2")
    node.allocate("team-c/old-1", "1g.10gb", "3")
    node.quiet("release", "--pod", "team-c/old-1")
    node.quiet("sim", "create", "--gpu", "1", "--profile", "3g.40gb", "--placement", "4")
    node.quiet("sim", "clock", "--advance", "25m")
    train = uuid_of(node, "team-a/train-1")
    pods = {
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [pod("team-a/train-1", "Running"), pod("team-b/infer-1", "Succeeded")],
    }
    (node.dir / "pods.json").write_text(json.dumps(pods, indent=1))
    blocks = [
        node.shown("hamimig list"),
        node.shown("COLUMNS=80 hamimig list", "COLUMNS=80 hamimig -o wide list"),
        node.shown("COLUMNS=120 hamimig list", "COLUMNS=120 hamimig -o wide list"),
        node.shown(
            "hamimig list --no-headers --state Active --state Idle",
            "hamimig list --no-headers --pod team-a/train-1 | awk '{print $2, $7, $8}'",
        ),
        node.shown(f"hamimig show {train}"),
        node.shown("hamimig profiles --gpu 0"),
        node.shown("hamimig events --pod team-e/tmp-1", "hamimig events --limit 3"),
        node.shown("COLUMNS=80 hamimig config show", "COLUMNS=120 hamimig config show"),
        node.shown("hamimig --node gpu-1 recover --pods pods.json --dry-run"),
        node.shown("hamimig --node gpu-1 recover --pods pods.json"),
        node.shown("hamimig --node gpu-1 recover --pods pods.json"),
        node.shown(
            "hamimig -o json --node gpu-1 reclaim --gpu 0 --all-idle --pods pods.json --dry-run"
            " | head -30"
        ),
        node.shown(
            "hamimig reclaim --gpu 0 --all-idle",
            "hamimig --node gpu-1 reclaim --gpu 0 --all-idle --pods pods.json",
        ),
        node.shown("hamimig reconcile"),
        node.shown(
            f"hamimig metrics --textfile {node.dir}/metrics.prom",
            f"head -5 {node.dir}/metrics.prom",
        ),
        node.shown(
            "hamimig --node gpu-1 allocate --pod team-c/infer-2 --gpu 0 --profile 1g.10gb"
            " --pods pods.json --dry-run",
            "hamimig --node gpu-1 allocate --pod team-d/big-1 --gpu 0 --profile 7g.80gb"
            " --pods pods.json",
        ),
    ]
    return blocks


def refusing_node() -> list[str]:
    """An Idle instance whose compute instance was replaced behind hamimig's back."""
    node = Node("refusing")
    (node.dir / "sim").mkdir(parents=True)
    node.quiet("sim", "init", "--model", "H100-SXM5-80GB", "--count", "2")
    node.allocate("team-c/old-1", "1g.10gb", "3")
    old = uuid_of(node, "team-c/old-1")
    node.quiet("release", "--pod", "team-c/old-1")
    state = node.dir / "sim" / "node.json"
    doc = json.loads(state.read_text())
    replaced = "MIG-" + "bc2daec8-2442-4cb9-9d0b-fc399d0da596"
    for gpu in doc["gpus"]:
        for gi in gpu["gpuInstances"]:
            for ci in gi["computeInstances"]:
                if ci["migUUID"] == old:
                    ci["migUUID"] = replaced
    state.write_text(json.dumps(doc))
    return [
        node.shown("COLUMNS=80 hamimig doctor", "COLUMNS=120 hamimig doctor"),
        node.shown(
            "hamimig --node gpu-1 recover --assume-no-pods",
            f"hamimig forget {old} --dry-run",
            f"hamimig forget {old}",
        ),
    ]


FIRST = [
    r"hamimig list$",
    r"COLUMNS=80 hamimig list$",
    r"COLUMNS=120 hamimig list$",
    r"hamimig list --no-headers --state Active --state Idle$",
    r"hamimig show MIG-",
    r"hamimig profiles --gpu 0$",
    r"hamimig events --pod team-e/tmp-1$",
    r"COLUMNS=80 hamimig config show$",
    r"hamimig --node gpu-1 recover --pods pods.json --dry-run$",
    r"hamimig --node gpu-1 recover --pods pods.json$",
    r"hamimig --node gpu-1 recover --pods pods.json$",
    r"hamimig -o json --node gpu-1 reclaim --gpu 0 --all-idle --pods pods.json --dry-run",
    r"hamimig reclaim --gpu 0 --all-idle$",
    r"hamimig reconcile$",
    r"hamimig metrics --textfile ",
    r"hamimig --node gpu-1 allocate --pod team-c/infer-2",
    r"COLUMNS=80 hamimig doctor$",
    r"hamimig --node gpu-1 recover --assume-no-pods$",
]
"""The first command of each text block of the Runbook, in order."""


def blocks_of(text: str) -> list[tuple[int, int]]:
    return [(m.start(1), m.end(1)) for m in re.finditer(r"```text\n(.*?)```\n", text, re.S)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the block commands")
    args = parser.parse_args()
    text = RUNBOOK.read_text(encoding="utf-8")
    spans = blocks_of(text)
    if len(spans) != len(FIRST):
        raise SystemExit(
            f"the Runbook has {len(spans)} text blocks, this script makes {len(FIRST)}"
        )
    for (a, b), pattern in zip(spans, FIRST, strict=True):
        first = text[a:b].splitlines()[0].removeprefix("$ ")
        if not re.match(pattern, first):
            raise SystemExit(f"Runbook block starting {first!r} is not the expected {pattern!r}")
    if args.check:
        return
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    fresh = main_node() + refusing_node()
    for (a, b), block in reversed(list(zip(spans, fresh, strict=True))):
        text = text[:a] + block + text[b:]
    RUNBOOK.write_text(text, encoding="utf-8")
    sys.stdout.write(f"rewrote {len(fresh)} blocks in docs/{RUNBOOK.name} from runs in {WORK}\n")


if __name__ == "__main__":
    main()
