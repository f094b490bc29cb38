"""Churn benchmark: a scheduler-driven trace of allocate/release requests through the engine.

Replays the same trace twice on 8 simulated H100s (in-memory simulator, durable records on
tmpfs): once with hamimig's lifecycle (release keeps the instance Idle for reuse) and once with
a destroy-on-release baseline (release, then reclaim at once, as HAMi v2.10 did). Prints GI/CI
creations and destructions, the share of allocations served by reuse, NVML calls per
allocation and allocate+release pairs per second. Then times the CLI (`hamimig allocate` on a
file-backed simulator, reuse and create paths).

    python bench/churn.py [--requests 12000] [--seed 7] [--cli-runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hamimig.engine import allocate as allocation
from hamimig.engine import maintenance
from hamimig.engine.node import Node
from hamimig.engine.requests import AllocateRequest, ByPod, ByUuid, Owner, PlacementSpec
from hamimig.hw.nvml import NvmlHardware
from hamimig.reports.simulator import sim_init
from hamimig.sim.models import MODELS
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore, mig_minors_text, new_state

GPUS = 8
MODEL = "H100-SXM5-80GB"
# Request mix by profile (name: weight): small slices dominate, as on shared inference nodes.
MIX = {"1g.10gb": 40, "2g.20gb": 25, "3g.40gb": 12, "1g.20gb": 10, "4g.40gb": 6, "7g.80gb": 7}
NOT_COUNTED = ("nvmlInit", "nvmlShutdown")
CREATES = ("nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceCreateComputeInstance")
DESTROYS = ("nvmlGpuInstanceDestroy", "nvmlComputeInstanceDestroy")


@dataclass(frozen=True)
class Event:
    kind: str  # "allocate" or "release"
    pod: str
    gpu: int = 0
    profile: str = ""
    start: int = 0


def make_trace(requests: int, seed: int) -> list[Event]:
    """First-fit scheduler over active allocations only: Idle instances are free capacity to
    it, so its placements sometimes land on them (reuse) and sometimes across them (pressure)."""
    rng = random.Random(seed)
    spec = MODELS[MODEL]
    placements = {p.name: [(s, p.size) for s in p.starts] for p in spec.profiles}
    active: dict[str, tuple[int, int, int]] = {}
    events: list[Event] = []
    counter = 0
    while len(events) < requests:
        arrive = rng.random() < 0.5 or not active
        if arrive:
            profile = rng.choices(list(MIX), weights=list(MIX.values()))[0]
            fit = _first_fit(active, placements[profile], rng)
            if fit is not None:
                counter += 1
                pod = f"pod-{counter}"
                active[pod] = (fit[0], fit[1], placements[profile][0][1])
                events.append(Event("allocate", pod, fit[0], profile, fit[1]))
                continue
        if active:
            pod = rng.choice(sorted(active))
            del active[pod]
            events.append(Event("release", pod))
    return events


def _first_fit(
    active: dict[str, tuple[int, int, int]], options: list[tuple[int, int]], rng: random.Random
) -> tuple[int, int] | None:
    gpus = list(range(GPUS))
    rng.shuffle(gpus)  # spread pods over GPUs as a scheduler scoring by load would
    for gpu in gpus:
        taken = [(s, n) for g, s, n in active.values() if g == gpu]
        for start, size in options:
            if all(start + size <= s or s + n <= start for s, n in taken):
                return gpu, start
    return None


@dataclass
class Outcome:
    allocations: int
    reused: int
    created: int
    gi_ci_creations: int
    gi_ci_destructions: int
    calls: int
    seconds: float


def replay(events: list[Event], destroy_on_release: bool, tmp: Path) -> Outcome:
    state = new_state(MODELS[MODEL], GPUS)
    store = SimStore(None, state)
    minors = tmp / "mig-minors"
    minors.write_text(mig_minors_text())
    hw = NvmlHardware(SimNvml(store), minors)
    hw.open()
    # Device-nodes-only specs: an in-memory node has no NVIDIA CDI spec or /proc beside it, and
    # the host's must not decide what this benchmark measures.
    config = tmp / "config.yaml"
    config.write_text("cdi:\n  baseSpec: none\n")
    node = Node(state_dir=tmp / "state", cdi_dir=tmp / "cdi", config_path=config)
    node.attach(hw)
    held: dict[str, str] = {}
    reused = created = 0
    began = time.perf_counter()
    for ev in events:
        if ev.kind == "allocate":
            request = AllocateRequest(
                Owner("bench", ev.pod), ev.gpu, ev.profile, PlacementSpec(ev.start)
            )
            result = allocation.allocate(node, request)
            held[ev.pod] = result.instance.mig_uuid or ""
            reused += result.reused
            created += result.created
        else:
            maintenance.release(node, ByPod("bench", ev.pod))
            mig = held.pop(ev.pod)
            if destroy_on_release:
                maintenance.reclaim(node, ByUuid(mig), dry_run=False)
    seconds = time.perf_counter() - began
    calls = store.read().calls
    hw.close()
    allocations = sum(1 for e in events if e.kind == "allocate")
    return Outcome(
        allocations=allocations,
        reused=reused,
        created=created,
        gi_ci_creations=sum(calls.get(c, 0) for c in CREATES),
        gi_ci_destructions=sum(calls.get(c, 0) for c in DESTROYS),
        calls=sum(v for k, v in calls.items() if k not in NOT_COUNTED),
        seconds=seconds,
    )


def time_cli(runs: int, tmp: Path) -> tuple[float, float]:
    """Median wall time of `hamimig allocate` through a fresh process: (reuse, create)."""
    sim = tmp / "cli" / "node.json"
    sim_init(sim, MODEL, 1)
    env = dict(os.environ)
    env.update(
        HAMIMIG_SIM=str(sim),
        HAMIMIG_STATE_DIR=str(tmp / "cli" / "state"),
        HAMIMIG_CDI_DIR=str(tmp / "cli" / "cdi"),
        HAMIMIG_CONFIG=str(tmp / "cli" / "none.yaml"),
        HAMIMIG_OUTPUT="json",
    )

    def hamimig(*args: str) -> float:
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "hamimig", *args], env=env, capture_output=True, text=True
        )
        elapsed = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"hamimig {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return elapsed

    reuse: list[float] = []
    create: list[float] = []
    ask = ("--gpu", "0", "--profile", "1g.10gb", "--placement", "0")
    for i in range(runs):
        pod = f"bench/cli-{i}"
        create.append(hamimig("allocate", "--pod", pod, *ask))
        hamimig("release", "--pod", pod)
        reuse.append(hamimig("allocate", "--pod", pod + "-again", *ask))
        hamimig("release", "--pod", pod + "-again")
        mig = json.loads(
            subprocess.run(
                [sys.executable, "-m", "hamimig", "list", "--state", "Idle"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )["instances"][0]["migUUID"]
        hamimig("reclaim", "--mig-uuid", mig)
    return statistics.median(reuse), statistics.median(create)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=12000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cli-runs", type=int, default=15)
    args = parser.parse_args()
    events = make_trace(args.requests, args.seed)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    rows = []
    for label, destroy in (("hamimig (reuse)", False), ("destroy-on-release", True)):
        with tempfile.TemporaryDirectory(dir=shm) as tmp:
            out = replay(events, destroy, Path(tmp))
        pairs = out.allocations / out.seconds
        rows.append(
            (
                label,
                out.gi_ci_creations,
                out.gi_ci_destructions,
                f"{100 * out.reused / out.allocations:.1f}%",
                f"{out.calls / out.allocations:.1f}",
                f"{pairs:.0f}",
            )
        )
    allocs = sum(1 for e in events if e.kind == "allocate")
    print(
        f"trace: {len(events)} requests ({allocs} allocations) over {GPUS} x {MODEL}, "
        f"seed {args.seed}"
    )
    header = (
        "lifecycle",
        "GI+CI creations",
        "GI+CI destructions",
        "served by reuse",
        "NVML calls / allocation",
        "allocate+release pairs / s",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    if args.cli_runs > 0:
        with tempfile.TemporaryDirectory(dir=shm) as tmp:
            reuse, create = time_cli(args.cli_runs, Path(tmp))
        print(
            f"CLI `hamimig allocate` (fresh process, median of {args.cli_runs}): "
            f"reuse {reuse * 1000:.0f} ms, create {create * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
