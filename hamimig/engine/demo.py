"""`hamimig demo`: the whole lifecycle on a temporary simulated H100 node, step by step.

Each step runs the real engine (and, for the crash, a real `hamimig` process killed by an
injected fault) and reports what happened with the NVML calls it cost, so the transcript shows
the point of the lifecycle: reuse makes no creations at all.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hamimig.engine import allocate as allocation
from hamimig.engine import maintenance, recovery
from hamimig.engine.inventory import list_instances
from hamimig.engine.node import Node
from hamimig.engine.simulator import sim_busy, sim_fault_add, sim_init
from hamimig.engine.views import InstanceView, Json
from hamimig.errors import HamimigError
from hamimig.hw.sim_state import SimStore
from hamimig.pods.model import Pod
from hamimig.pods.sources import PodSnapshot

MODEL = "H100-SXM5-80GB"
_NOT_COUNTED = ("nvmlInit", "nvmlShutdown")


@dataclass(frozen=True)
class DemoStep:
    """One narrated step: what we did, the equivalent command, and what came of it."""

    number: int
    title: str
    narration: str
    command: str
    outcome: str
    exit_code: int
    nvml_calls: int
    creations: int
    destructions: int
    instances: tuple[InstanceView, ...] = ()

    def to_json(self) -> Json:
        return {
            "step": self.number,
            "title": self.title,
            "narration": self.narration,
            "command": self.command,
            "outcome": self.outcome,
            "exitCode": self.exit_code,
            "nvmlCalls": self.nvml_calls,
            "creations": self.creations,
            "destructions": self.destructions,
            "instances": [i.to_json() for i in self.instances],
        }


@dataclass(frozen=True)
class DemoTranscript:
    kind: ClassVar[str] = "DemoTranscript"
    node: str
    steps: tuple[DemoStep, ...] = field(default_factory=tuple)

    def to_json(self) -> Json:
        return {"kind": self.kind, "node": self.node, "steps": [s.to_json() for s in self.steps]}


class _Counter:
    def __init__(self, store: SimStore) -> None:
        self.store = store
        self.before = self._calls()

    def _calls(self) -> dict[str, int]:
        calls: dict[str, int] = self.store.read()["calls"]
        return calls

    def delta(self) -> tuple[int, int, int]:
        after = self._calls()
        diff = {k: v - self.before.get(k, 0) for k, v in after.items()}
        self.before = after
        total = sum(v for k, v in diff.items() if k not in _NOT_COUNTED)
        creations = sum(v for k, v in diff.items() if "Create" in k)
        destructions = sum(v for k, v in diff.items() if "Destroy" in k)
        return total, creations, destructions


def run_demo(workdir: Path) -> Iterator[DemoStep]:
    """Yield the steps one by one, so a caller can pause between them."""
    sim = workdir / "node.json"
    sim_init(sim, MODEL, 1)
    node = Node(
        state_dir=workdir / "state",
        cdi_dir=workdir / "cdi",
        config_path=workdir / "config.yaml",
        sim=sim,
    )
    counter = _Counter(SimStore(sim))
    base = f"hamimig --sim {sim} --state-dir {node.state_dir} --cdi-dir {node.cdi_dir}"
    number = 0

    def step(title: str, narration: str, command: str, action: Callable[[], str]) -> DemoStep:
        nonlocal number
        number += 1
        exit_code = 0
        try:
            outcome = action()
        except HamimigError as err:
            outcome, exit_code = err.message, err.exit_code
        finally:
            node.close()
        calls, creations, destructions = counter.delta()
        shown = list_instances(node).instances
        node.close()
        counter.delta()  # the listing itself is not part of the step
        return DemoStep(
            number,
            title,
            narration,
            f"{base} {command}",
            outcome,
            exit_code,
            calls,
            creations,
            destructions,
            shown,
        )

    def alloc(pod: str, profile: str, placement: str) -> str:
        request = allocation.make_request(pod, None, 0, 0, "0", profile, placement)
        result = allocation.allocate(node, request)
        how = "created" if result.created else ("reused" if result.reused else "already held")
        extra = f"; reclaimed {', '.join(result.reclaimed)}" if result.reclaimed else ""
        return f"{how} {result.instance.mig_uuid} ({profile} at {result.instance.placement}){extra}"

    first: dict[str, str] = {}

    def allocate_first() -> str:
        text = alloc("team-a/train-1", "1g.10gb", "0")
        first["uuid"] = text.split()[1]
        return text

    yield step(
        "Allocate",
        "A pod asks for a 1g.10gb slice at memory slice 0. Nothing exists yet, so hamimig "
        "journals an intent, creates the GPU instance and its compute instance, writes the "
        "instance's CDI spec and an ownership record (Active).",
        "allocate --pod team-a/train-1 --gpu 0 --profile 1g.10gb --placement 0",
        allocate_first,
    )
    yield step(
        "Release to Idle",
        "The pod finishes. A confirmed release keeps the GI/CI and its CDI spec: the instance "
        "is Idle, cached for the next matching request. No NVML mutation.",
        "release --pod team-a/train-1",
        lambda: (
            f"released {first['uuid']} (now Idle)"
            if maintenance.release(node, ("team-a", "train-1"), None).released
            else "nothing released"
        ),
    )
    yield step(
        "Exact reuse",
        "Another pod asks for the same GPU, profile and placement. hamimig verifies the Idle "
        "instance directly by its MIG UUID (no scan of the node) and hands it out: same MIG "
        "UUID, zero creations.",
        "allocate --pod team-b/infer-1 --gpu 0 --profile 1g.10gb --placement 0",
        lambda: alloc("team-b/infer-1", "1g.10gb", "0"),
    )

    def two_idle() -> str:
        made = [alloc("team-c/etl-1", "1g.10gb", "2"), alloc("team-c/etl-2", "1g.10gb", "4")]
        released = maintenance.release(node, ("team-c", "etl-1"), None).released
        released += maintenance.release(node, ("team-c", "etl-2"), None).released
        return "; ".join(made) + f"; released {len(released)} (now Idle)"

    yield step(
        "Two Idle instances",
        "Two more pods use 1g.10gb slices at 2 and 4, then finish: both instances stay Idle.",
        "allocate --pod team-c/etl-1 ... --placement 2 && allocate --pod team-c/etl-2 ... "
        "--placement 4 && release --pod team-c/etl-1 && release --pod team-c/etl-2",
        two_idle,
    )
    yield step(
        "Placement pressure",
        "The scheduler places a 2g.20gb at slices 2-3. The Idle instance at slice 2 is in the "
        "way: hamimig destroys only that one, then creates the new layout. The Idle instance at "
        "slice 4 stays cached.",
        "allocate --pod team-d/big-1 --gpu 0 --profile 2g.20gb --placement 2",
        lambda: alloc("team-d/big-1", "2g.20gb", "2"),
    )
    yield step(
        "Active is protected",
        "An operator tries to reclaim the instance team-b/infer-1 is using. Active instances "
        "are never reclaimed: exit 3, nothing changed.",
        f"reclaim --mig-uuid {first['uuid']}",
        lambda: _reclaim(node, first["uuid"]),
    )

    error_target: dict[str, str] = {}

    def make_error() -> str:
        text = alloc("team-e/job-1", "1g.10gb", "6")
        uuid = text.split()[1]
        error_target["uuid"] = uuid
        maintenance.release(node, ("team-e", "job-1"), None)
        sim_busy(sim, uuid, gi_only=False, clear=False)
        return _reclaim(node, uuid)

    yield step(
        "NVML failure -> Error",
        "An Idle instance at slice 6 still has a stray process on it. Reclaiming it fails with "
        "IN_USE: hamimig keeps it in state Error with its record and CDI spec, and will never "
        "hand it out again.",
        "sim busy --mig-uuid MIG-... && reclaim --mig-uuid MIG-...",
        make_error,
    )

    def clear_error() -> str:
        sim_busy(sim, error_target["uuid"], gi_only=False, clear=True)
        report = maintenance.reconcile(node)
        return "; ".join(f"{a.action} {a.mig_uuid}: {a.reason}" for a in report.actions)

    yield step(
        "reconcile clears it",
        "The process is gone. The reconciler retries the destruction of Error instances; this "
        "time it succeeds, and only then is the CDI spec removed.",
        "reconcile",
        clear_error,
    )

    def crash() -> str:
        sim_fault_add(sim, "nvmlGpuInstanceCreateComputeInstance", None, "crash-before", 1, 0, None)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "hamimig",
                "--sim",
                str(sim),
                "--state-dir",
                str(node.state_dir),
                "--cdi-dir",
                str(node.cdi_dir),
                "--config",
                str(node.config_path),
                "allocate",
                "--pod",
                "team-f/crashy",
                "--gpu",
                "0",
                "--profile",
                "1g.10gb",
                "--placement",
                "5",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        return (
            f"the allocating process died with exit status {done.returncode} after creating "
            "the GPU instance; its intent is on disk"
        )

    yield step(
        "Crash mid-allocation",
        "A process is killed (kill -9, OOM, power loss) between creating the GI and the CI. "
        "The intent journal written before the first hardware change says what was underway.",
        "sim fault add --op nvmlGpuInstanceCreateComputeInstance --action crash-before && "
        "allocate --pod team-f/crashy --gpu 0 --profile 1g.10gb --placement 5",
        crash,
    )

    def recover() -> str:
        running = tuple(
            Pod(ns, name, None, None, "Running", None, (), None)
            for ns, name in (("team-b", "infer-1"), ("team-d", "big-1"))
        )
        pods = PodSnapshot(pods=running, source="the demo's pod list")
        report = recovery.recover(node, pods, adopt=False, dry_run=False)
        return "; ".join(f"{a.action}: {a.reason}" for a in report.actions)

    yield step(
        "recover rolls it back",
        "Startup recovery (as the device plugin's init container runs it) reads the pods on "
        "the node, finds the intent and destroys what that request created. The other "
        "instances are verified against their records: those the running pods hold stay "
        "Active, the rest are Idle.",
        "recover --pods pods.json   # team-b/infer-1 and team-d/big-1 are Running",
        recover,
    )


def _reclaim(node: Node, uuid: str) -> str:
    result = maintenance.reclaim(node, uuid, None, None, False, False)
    return f"reclaimed {len(result.reclaimed)}"


def transcript(workdir: Path, on_step: Callable[[DemoStep], Any] | None = None) -> DemoTranscript:
    steps = []
    for s in run_demo(workdir):
        steps.append(s)
        if on_step is not None:
            on_step(s)
    return DemoTranscript(node=str(workdir / "node.json"), steps=tuple(steps))
