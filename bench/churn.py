"""Churn benchmark: a scheduler-driven trace of allocate/release requests through the engine.

Replays the same trace twice on 8 simulated H100s (in-memory simulator, durable records on
tmpfs): once with hamimig's lifecycle (release keeps the instance Idle for reuse) and once with
a destroy-on-release baseline (release, then reclaim at once, as HAMi v2.10 did). Prints GI/CI
creations and destructions, the share of allocations served by reuse, NVML calls per
allocation and allocate+release pairs per second. Then times the CLI (`hamimig allocate` on a
file-backed simulator, reuse and create paths).

    python bench/churn.py [--requests 12000] [--seed 7] [--cli-runs 15]

`--policy-sweep` measures the idle cache policy instead (`idleTTL`, `maxIdleInstancesPerGPU`)
on a timed trace: requests arrive as a Poisson process (`--rate` per minute) with exponential
pod lifetimes (`--lifetime` minutes on average), placed by the same first-fit scheduler, which
sees only Active allocations and knows nothing of the policy; a pod that does not fit is turned
away (another node takes it). The node's clock is virtual, and `reconcile` runs with the policy
and a pod list of the running pods every `--reconcile-every` minutes. One trace (one seed) is
replayed for every sweep point: TTL off, 1h, 10m, 1m (no cap); caps 4, 2, 1, 0 per GPU (no
TTL); destroy-on-release. Prints GI+CI mutations, the share of allocations served by reuse,
idle memory-slice-hours (the memory slices Idle instances hold, integrated over virtual
time), Idle instances the policy evicted, and the allocations that had to reclaim Idle
instances in the way of their placement.

    python bench/churn.py --policy-sweep [--sweep-requests 2000] [--rate 1] [--lifetime 15]
        [--reconcile-every 5] [--seed 7] [--jobs 2]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import heapq
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hamimig.config import load_config
from hamimig.engine import allocate as allocation
from hamimig.engine.node import Node
from hamimig.engine.podsource import PodSource
from hamimig.engine.reclaim import reclaim
from hamimig.engine.reconcile import reconcile
from hamimig.engine.release import release
from hamimig.engine.requests import AllocateRequest, ByPod, ByUuid, Owner, PlacementSpec
from hamimig.hw.nvml import NvmlHardware
from hamimig.hw.types import MEMORY_SLICES
from hamimig.pods.model import Pod, PodSnapshot
from hamimig.rehearsal.simulator import sim_init
from hamimig.sim.files import mig_minors_text
from hamimig.sim.models import MODELS
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore, new_node
from hamimig.vocabulary import ActionKind, State

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
    state = new_node(MODELS[MODEL], GPUS).to_json()
    store = SimStore(None, state)
    minors = tmp / "mig-minors"
    minors.write_text(mig_minors_text())
    hw = NvmlHardware(SimNvml(store), minors)
    hw.open()
    # Device-nodes-only specs: an in-memory node has no NVIDIA CDI spec or /proc beside it, and
    # the host's must not decide what this benchmark measures.
    config = tmp / "config.yaml"
    config.write_text("cdi:\n  baseSpec: none\n")
    node = Node(state_dir=tmp / "state", cdi_dir=tmp / "cdi", config_path=config, opened=hw)
    held: dict[str, str] = {}
    reused = created = 0
    began = time.perf_counter()
    for ev in events:
        if ev.kind == "allocate":
            request = AllocateRequest(
                Owner("bench", ev.pod), ev.gpu, ev.profile, PlacementSpec(ev.start)
            )
            # No device plugin runs here: no pod holds an instance the records call Idle.
            result = allocation.allocate(node, request, PodSource.no_pods())
            held[ev.pod] = result.instance.mig_uuid or ""
            reused += result.reused
            created += result.created
        else:
            release(node, ByPod("bench", ev.pod))
            mig = held.pop(ev.pod)
            if destroy_on_release:
                reclaim(node, ByUuid(mig), PodSource.no_pods(), dry_run=False)
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


# --------------------------------------------------------------------------------------------
# The idle policy sweep: a timed trace, a virtual clock, reconcile every few minutes.

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: virtual minute 0
NAMESPACE = "bench"


@dataclass(frozen=True)
class TimedEvent:
    minute: float
    event: Event


@dataclass(frozen=True)
class TimedTrace:
    events: list[TimedEvent]
    arrivals: int
    turned_away: int
    minutes: float
    """Virtual length: the last arrival (pods still running then are left running)."""
    active_slice_minutes: float
    """Memory slices held by running pods, integrated over the trace (the scheduler's view)."""


def make_timed_trace(arrivals: int, seed: int, rate: float, lifetime: float) -> TimedTrace:
    """Poisson arrivals (`rate` per minute), each a profile from MIX and an exponential
    lifetime (mean `lifetime` minutes), placed first-fit over running pods only, as in
    `make_trace`. A request that does not fit is turned away. Every arrival draws its profile
    and lifetime whether it fits or not, so the random stream does not depend on placement."""
    rng = random.Random(seed)
    spec = MODELS[MODEL]
    placements = {p.name: [(s, p.size) for s in p.starts] for p in spec.profiles}
    active: dict[str, tuple[int, int, int]] = {}
    ends: list[tuple[float, str]] = []
    events: list[TimedEvent] = []
    now = 0.0
    held = 0  # memory slices of running pods
    slice_minutes = 0.0
    turned_away = 0

    def advance(to: float) -> None:
        nonlocal now, slice_minutes
        slice_minutes += held * (to - now)
        now = to

    for i in range(arrivals):
        arrive = now + rng.expovariate(rate)
        while ends and ends[0][0] <= arrive:
            end, pod = heapq.heappop(ends)
            advance(end)
            held -= active.pop(pod)[2]
            events.append(TimedEvent(end, Event("release", pod)))
        advance(arrive)
        profile = rng.choices(list(MIX), weights=list(MIX.values()))[0]
        lasts = rng.expovariate(1 / lifetime)
        fit = _first_fit(active, placements[profile], rng)
        if fit is None:
            turned_away += 1
            continue
        pod = f"pod-{i + 1}"
        size = placements[profile][0][1]
        active[pod] = (fit[0], fit[1], size)
        held += size
        heapq.heappush(ends, (arrive + lasts, pod))
        events.append(TimedEvent(arrive, Event("allocate", pod, fit[0], profile, fit[1])))
    return TimedTrace(events, arrivals, turned_away, now, slice_minutes)


@dataclass(frozen=True)
class SweepPoint:
    label: str
    ttl: int = 0
    """Seconds (0: off)."""
    cap: int | None = None
    destroy_on_release: bool = False


SWEEP = (
    SweepPoint("TTL off, no cap (no policy)"),
    SweepPoint("TTL 1h", ttl=3600),
    SweepPoint("TTL 10m", ttl=600),
    SweepPoint("TTL 1m", ttl=60),
    SweepPoint("cap 4 / GPU", cap=4),
    SweepPoint("cap 2 / GPU", cap=2),
    SweepPoint("cap 1 / GPU", cap=1),
    SweepPoint("cap 0 / GPU", cap=0),
    SweepPoint("destroy-on-release", destroy_on_release=True),
)


@dataclass
class SweepOutcome:
    allocations: int
    reused: int
    gi_ci_creations: int
    gi_ci_destructions: int
    idle_slice_minutes: float
    evicted: int
    pressured: int
    """Allocations that reclaimed Idle instances in the way of their placement."""
    pressure_reclaims: int
    reconciles: int
    seconds: float


def _running(pods: set[str], taken_at: float) -> PodSnapshot:
    """The pod list reconcile gets: every pod of the trace that runs now, holding its
    allocation (no annotation: Active records are kept by their owner, Idle ones are the
    policy's to judge)."""
    listed = tuple(
        Pod(NAMESPACE, name, None, None, "Running", None, (), None) for name in sorted(pods)
    )
    return PodSnapshot(pods=listed, source="bench", taken_at=taken_at)


def replay_timed(trace: TimedTrace, point: SweepPoint, every: float, tmp: Path) -> SweepOutcome:
    state = new_node(MODELS[MODEL], GPUS).to_json()
    store = SimStore(None, state)
    minors = tmp / "mig-minors"
    minors.write_text(mig_minors_text())
    hw = NvmlHardware(SimNvml(store), minors)
    hw.open()
    nvidia = [f"idleTTL: {point.ttl}"]
    if point.cap is not None:
        nvidia.append(f"maxIdleInstancesPerGPU: {point.cap}")
    config = tmp / "config.yaml"
    config.write_text(
        "cdi:\n  baseSpec: none\ndevices:\n  nvidia:\n"
        + "".join(f"    {line}\n" for line in nvidia)
    )
    clock = [EPOCH]
    node = Node(
        state_dir=tmp / "state",
        cdi_dir=tmp / "cdi",
        config_path=config,
        clock_source=lambda: clock[0],
        # The file alone decides the policy: HAMIMIG_IDLE_TTL and the like in the environment
        # of whoever runs the benchmark must not change what it measures.
        loaded_config=load_config(config, environ={}),
        opened=hw,
    )
    out = SweepOutcome(0, 0, 0, 0, 0.0, 0, 0, 0, 0, 0.0)
    running: set[str] = set()
    held: dict[str, tuple[str, int]] = {}  # pod -> (MIG UUID, memory slices)
    # The Idle instances and their memory slices, followed through what each step reports
    # (reading every record after every step would double the run time) and checked against
    # the records at every reconcile and at the end.
    idle: dict[str, int] = {}
    last = 0.0

    def advance(minute: float) -> None:
        nonlocal last
        out.idle_slice_minutes += sum(idle.values()) * (minute - last)
        last = minute
        clock[0] = EPOCH + minute * 60

    def gone(mig_uuids: Iterable[str | None], why: str) -> None:
        for mig in mig_uuids:
            if idle.pop(mig or "", None) is None:
                raise SystemExit(f"{point.label}: {why} {mig}, which was not Idle")

    def check(when: str) -> None:
        records, _ = node.records.load()
        found = {u: r.placement.size for u, r in records.items() if r.state is State.IDLE}
        if found != idle:
            raise SystemExit(f"{point.label}: the Idle records {when} are not what the steps said")

    next_pass = every

    def passes_until(minute: float) -> None:
        """Every reconcile due by `minute`, each with the pods running at its moment."""
        nonlocal next_pass
        while next_pass <= minute:
            advance(next_pass)
            report = reconcile(node, source=PodSource.given(_running(running, clock[0])))
            if report.exit_code != 0 or report.failed:
                raise SystemExit(f"{point.label}: reconcile failed: {report.failed}")
            for action in report.actions:
                if action.action == ActionKind.EVICT_IDLE.value:
                    out.evicted += 1
                    gone([action.mig_uuid], "the policy evicted")
                elif action.action != ActionKind.SKIP.value:
                    raise SystemExit(f"{point.label}: reconcile did {action.action}")
            out.reconciles += 1
            check(f"after the reconcile at minute {next_pass:g}")
            next_pass += every

    began = time.perf_counter()
    for timed in trace.events:
        passes_until(timed.minute)
        advance(timed.minute)
        ev = timed.event
        if ev.kind == "allocate":
            request = AllocateRequest(
                Owner(NAMESPACE, ev.pod), ev.gpu, ev.profile, PlacementSpec(ev.start)
            )
            pods = PodSource.given(_running(running, clock[0]))
            result = allocation.allocate(node, request, pods)
            mig = result.instance.mig_uuid or ""
            gone(result.reclaimed, "an allocation reclaimed")
            if result.reused:
                gone([mig], "an allocation reused")
            held[ev.pod] = (mig, result.instance.placement.size)
            running.add(ev.pod)
            out.allocations += 1
            out.reused += result.reused
            out.pressured += bool(result.reclaimed)
            out.pressure_reclaims += len(result.reclaimed)
        else:
            release(node, ByPod(NAMESPACE, ev.pod))
            running.discard(ev.pod)
            mig, size = held.pop(ev.pod)
            idle[mig] = size
            if point.destroy_on_release:
                pods = PodSource.given(_running(running, clock[0]))
                done = reclaim(node, ByUuid(mig), pods, dry_run=False)
                gone([v.mig_uuid for v in done.reclaimed], "destroy-on-release reclaimed")
    passes_until(trace.minutes)
    advance(trace.minutes)
    check("at the end")
    out.seconds = time.perf_counter() - began
    calls = store.read().calls
    hw.close()
    out.gi_ci_creations = sum(calls.get(c, 0) for c in CREATES)
    out.gi_ci_destructions = sum(calls.get(c, 0) for c in DESTROYS)
    return out


def policy_sweep(args: argparse.Namespace, shm: Path | None) -> None:
    trace = make_timed_trace(args.sweep_requests, args.seed, args.rate, args.lifetime)
    allocs = sum(1 for t in trace.events if t.event.kind == "allocate")
    capacity = GPUS * MEMORY_SLICES
    print(
        f"timed trace: {trace.arrivals} requests at {args.rate:g}/min, mean lifetime "
        f"{args.lifetime:g} min, over {trace.minutes / 60:.1f} virtual hours on {GPUS} x {MODEL}, "
        f"seed {args.seed}: {allocs} placed, {trace.turned_away} turned away "
        f"(no room among running pods); running pods hold "
        f"{100 * trace.active_slice_minutes / trace.minutes / capacity:.0f}% of the "
        f"{capacity} memory slices on average; reconcile every {args.reconcile_every:g} min"
    )
    header = (
        "policy",
        "GI+CI mutations (creations + destructions)",
        "served by reuse",
        "idle memory-slice-hours",
        "mean idle slices",
        "evicted by policy",
        "allocations that reclaimed Idle (instances)",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    began = time.perf_counter()
    replay = functools.partial(_replay_point, trace, args.reconcile_every, shm)
    # One process per point at a time, `--jobs` at once: the points share nothing but the
    # trace, which each gets whole.
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for point, out in zip(SWEEP, pool.map(replay, SWEEP), strict=True):
            row = (
                point.label,
                f"{out.gi_ci_creations + out.gi_ci_destructions} "
                f"({out.gi_ci_creations} + {out.gi_ci_destructions})",
                f"{100 * out.reused / out.allocations:.1f}%",
                f"{out.idle_slice_minutes / 60:.0f}",
                f"{out.idle_slice_minutes / trace.minutes:.1f} of {capacity}",
                out.evicted,
                f"{out.pressured} ({out.pressure_reclaims})",
            )
            print("| " + " | ".join(str(c) for c in row) + " |", flush=True)
    print(
        f"{len(SWEEP)} points replayed in {time.perf_counter() - began:.0f} s "
        f"wall, {args.jobs} at a time"
    )


def _replay_point(
    trace: TimedTrace, every: float, shm: Path | None, point: SweepPoint
) -> SweepOutcome:
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        return replay_timed(trace, point, every, Path(tmp))


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
    # The bench runs no pods: nothing but its own commands holds an instance on this node.
    ask = ("--gpu", "0", "--profile", "1g.10gb", "--placement", "0", "--assume-no-pods")
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
        hamimig("reclaim", "--mig-uuid", mig, "--assume-no-pods")
    return statistics.median(reuse), statistics.median(create)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=12000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cli-runs", type=int, default=15)
    sweep = parser.add_argument_group("idle policy sweep")
    sweep.add_argument(
        "--policy-sweep",
        action="store_true",
        help="replay a timed trace under idle policies instead of the lifecycle comparison",
    )
    sweep.add_argument("--sweep-requests", type=int, default=2000, help="arrivals")
    sweep.add_argument("--rate", type=float, default=1.0, help="arrivals per virtual minute")
    sweep.add_argument("--lifetime", type=float, default=15.0, help="mean pod lifetime, min")
    sweep.add_argument("--reconcile-every", type=float, default=5.0, help="virtual minutes")
    sweep.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="points replayed at once"
    )
    args = parser.parse_args()
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    if args.policy_sweep:
        for name in ("sweep_requests", "rate", "lifetime", "reconcile_every", "jobs"):
            if getattr(args, name) <= 0:
                parser.error(f"--{name.replace('_', '-')} must be positive")
        policy_sweep(args, shm)
        return
    events = make_trace(args.requests, args.seed)
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
