"""`hamimig demo`: the whole lifecycle on a temporary simulated H100 node, step by step.

Each step runs the real engine and reports the NVML calls it cost, so the transcript shows the
point of the lifecycle: reuse makes no creations. A step is checked before it is narrated, and
one that went otherwise stops the demo (`DemoFailed`): narrated success would teach it wrong.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from hamimig.engine import allocate as allocation
from hamimig.engine import recovery
from hamimig.engine.node import Node
from hamimig.engine.podsource import PodSource
from hamimig.engine.reclaim import reclaim
from hamimig.engine.reconcile import reconcile
from hamimig.engine.release import release
from hamimig.engine.requests import AllocateRequest, ByPod, ByUuid
from hamimig.engine.results import Allocation, InstanceView, Reported
from hamimig.errors import HamimigError, PathUnusable
from hamimig.hw.types import PlacementSpec, parse_placement
from hamimig.pods.model import Pod
from hamimig.pods.sources import PodSnapshot
from hamimig.rehearsal.simulator import sim_fault_add, sim_init
from hamimig.reports.inventory import list_instances
from hamimig.reports.views import Report
from hamimig.sim.state import CRASH_EXIT_STATUS, SimStore
from hamimig.store.records import Owner
from hamimig.vocabulary import Outcome

MODEL = "H100-SXM5-80GB"
_NOT_COUNTED = ("nvmlInit", "nvmlShutdown")


class DemoFailed(HamimigError):
    """A step did not end the way the demo narrates it (hamimig misbehaves here: exit 1)."""

    code = "demo-failed"


class _Unexpected(Exception):
    """Raised inside a step's action; `step` turns it into `DemoFailed` naming the step."""


def _expect(condition: bool, why: str) -> None:
    if not condition:
        raise _Unexpected(why)


def prepare_keep(path: Path) -> None:
    """The directory to keep the demo node in must be absent or empty: the demo never writes
    among (or over) someone's files. Checked before anything is written; created when absent."""
    if path.is_symlink():
        raise PathUnusable(path, "is a symbolic link; give an absent or empty directory")
    if path.exists():
        if not path.is_dir():
            raise PathUnusable(path, "not a directory; give an absent or empty directory")
        if any(path.iterdir()):
            raise PathUnusable(path, "directory is not empty; give an absent or empty one")
        return
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        raise PathUnusable(path, f"cannot create it: {exc.strerror or exc}") from None


def in_child(work: Callable[[], object]) -> int:
    """Run `work` in a forked child and return its exit status, so the demo survives a crash
    fault (`os._exit`) and shows what it left behind. The child always ends with `os._exit`,
    never returning into the caller's code."""
    for stream in (sys.stdout, sys.stderr):  # else the child could write them out a second time
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child's coverage is never reported)
        status = 1
        try:
            work()
            status = 0
        except HamimigError as err:
            status = err.exit_code
        finally:
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status)


class DemoStep(Reported):
    """One narrated step: what we did, the equivalent command, and what came of it."""

    number: int = Field(alias="step")
    title: str
    narration: str
    command: str
    outcome: str
    exit_code: int = Field(alias="exitCode")
    nvml_calls: int = Field(alias="nvmlCalls")
    creations: int
    destructions: int
    instances: tuple[InstanceView, ...] = ()


class DemoTranscript(Report):
    kind: ClassVar[str] = "DemoTranscript"
    node: str
    steps: tuple[DemoStep, ...] = ()


class _Counter:
    def __init__(self, store: SimStore) -> None:
        self.store = store
        self.before = store.read().calls

    def delta(self) -> tuple[int, int, int]:
        """The NVML calls since the last delta: all but init and shutdown, creations, and
        destructions."""
        after = self.store.read().calls
        diff = {k: v - self.before.get(k, 0) for k, v in after.items()}
        self.before = after
        return (
            sum(v for k, v in diff.items() if k not in _NOT_COUNTED),
            sum(v for k, v in diff.items() if "Create" in k),
            sum(v for k, v in diff.items() if "Destroy" in k),
        )


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

    def step(
        title: str,
        narration: str,
        command: str,
        action: Callable[[], str],
        expect_exit: int = 0,
        after: Callable[[], None] | None = None,
    ) -> DemoStep:
        """`after` checks durable state the narration promises, whatever the action raised."""
        nonlocal number
        number += 1
        failed = f"demo step {number} ({title}) did not go as narrated"
        exit_code = 0
        try:
            try:
                outcome = action()
            finally:
                if after is not None:
                    after()
        except _Unexpected as why:
            raise DemoFailed(f"{failed}: {why}") from None
        except HamimigError as err:
            outcome, exit_code = err.message, err.exit_code
        finally:
            node.close()
        if exit_code != expect_exit:
            raise DemoFailed(f"{failed}: expected exit {expect_exit}, got {exit_code}: {outcome}")
        calls, creations, destructions = counter.delta()
        shown = list_instances(node).instances
        node.close()
        counter.delta()  # the listing itself is not part of the step
        return DemoStep(
            number=number,
            title=title,
            narration=narration,
            command=f"{base} {command}",
            outcome=outcome,
            exit_code=exit_code,
            nvml_calls=calls,
            creations=creations,
            destructions=destructions,
            instances=shown,
        )

    uuids: dict[str, str] = {}  # the instance each pod was given, for later steps

    def alloc(
        pod: str, profile: str, placement: str, expected: Outcome = Outcome.CREATED
    ) -> Allocation:
        namespace, name = pod.split("/")
        request = AllocateRequest(
            Owner(namespace, name, None), 0, profile, parse_placement(placement)
        )
        result = allocation.allocate(node, request, _running_pods(node))
        _expect(
            result.outcome is expected,
            f"the allocation for {pod} was {_how(result.outcome)}, not {_how(expected)}",
        )
        _expect(result.instance.mig_uuid is not None, f"the allocation for {pod} has no MIG UUID")
        uuids[pod] = _uuid(result)
        return result

    yield step(
        "Allocate",
        "A pod asks for a 1g.10gb slice at memory slice 0. Nothing exists yet, so hamimig "
        "journals an intent, creates the GPU instance and its compute instance, writes the "
        "instance's CDI spec and an ownership record (Active).",
        "allocate --pod team-a/train-1 --gpu 0 --profile 1g.10gb --placement 0 --pods pods.json",
        lambda: _told(alloc("team-a/train-1", "1g.10gb", "0")),
    )

    def release_first() -> str:
        released = release(node, ByPod("team-a", "train-1")).released
        _expect(
            [(i.mig_uuid, i.state.value) for i in released] == [(uuids["team-a/train-1"], "Idle")],
            f"the release returned {[(i.mig_uuid, i.state.value) for i in released]}",
        )
        return f"released {uuids['team-a/train-1']} (now Idle)"

    yield step(
        "Release to Idle",
        "The pod finishes. A confirmed release keeps the GI/CI and its CDI spec: the instance "
        "is Idle, cached for the next matching request. No NVML mutation.",
        "release --pod team-a/train-1",
        release_first,
    )

    def reuse() -> str:
        result = alloc("team-b/infer-1", "1g.10gb", "0", Outcome.REUSED)
        first = uuids["team-a/train-1"]
        _expect(_uuid(result) == first, f"reused {_uuid(result)}, not {first}")
        return _told(result)

    yield step(
        "Exact reuse",
        "Another pod asks for the same GPU, profile and placement. hamimig verifies the Idle "
        "instance directly by its MIG UUID (no scan of the node) and hands it out: same MIG "
        "UUID, zero creations.",
        "allocate --pod team-b/infer-1 --gpu 0 --profile 1g.10gb --placement 0 --pods pods.json",
        reuse,
    )

    def two_idle() -> str:
        made = [alloc("team-c/etl-1", "1g.10gb", "2"), alloc("team-c/etl-2", "1g.10gb", "4")]
        released = release(node, ByPod("team-c", "etl-1")).released
        released += release(node, ByPod("team-c", "etl-2")).released
        _expect(len(released) == 2, f"released {len(released)} instances, not 2")
        return "; ".join(_told(m) for m in made) + f"; released {len(released)} (now Idle)"

    def pressure() -> str:
        result = alloc("team-d/big-1", "2g.20gb", "2")
        _expect(
            result.reclaimed == (uuids["team-c/etl-1"],),
            f"expected to reclaim exactly {uuids['team-c/etl-1']}: {_told(result)}",
        )
        return _told(result)

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
        "allocate --pod team-d/big-1 --gpu 0 --profile 2g.20gb --placement 2 --pods pods.json",
        pressure,
    )
    yield step(
        "Active is protected",
        "An operator tries to reclaim the instance team-b/infer-1 is using. Active instances "
        "are never reclaimed: exit 3, nothing changed.",
        f"reclaim --mig-uuid {uuids['team-a/train-1']} --pods pods.json",
        lambda: _reclaim(node, uuids["team-a/train-1"]),
        expect_exit=3,
    )

    def make_error() -> str:
        uuid = _uuid(alloc("team-e/job-1", "1g.10gb", "6"))
        release(node, ByPod("team-e", "job-1"))
        # A process that starts after hamimig saw none: the destroy itself fails with IN_USE.
        sim_fault_add(sim, "nvmlComputeInstanceDestroy", "IN_USE", "raise", 1, 0, None)
        return _reclaim(node, uuid)

    yield step(
        "NVML failure -> Error",
        "hamimig never reclaims an instance that processes run on; but a stray process can start "
        "on the Idle instance at slice 6 just after that check, and the destroy fails with "
        "IN_USE. hamimig keeps it in state Error with its record and CDI spec, and will never "
        "hand it out again.",
        "sim fault add --op nvmlComputeInstanceDestroy --error IN_USE && "
        "reclaim --mig-uuid MIG-... --pods pods.json",
        make_error,
        expect_exit=4,
        after=lambda: _expect_error_kept(node, uuids.get("team-e/job-1")),
    )

    def clear_error() -> str:
        report = reconcile(node, source=_running_pods(node))
        text = "; ".join(f"{a.action} {a.mig_uuid}: {a.reason}" for a in report.actions)
        retried = [a.mig_uuid for a in report.actions if a.action == "retry-destroy"]
        gone = uuids["team-e/job-1"] not in node.records.load()[0]
        _expect(
            report.exit_code == 0 and retried == [uuids["team-e/job-1"]] and gone,
            f"reconcile did not destroy {uuids['team-e/job-1']}: {text or 'nothing to do'}",
        )
        return text

    yield step(
        "reconcile clears it",
        "The process is gone. The reconciler retries the destruction of Error instances; this "
        "time it succeeds, and only then is the CDI spec removed.",
        "reconcile --pods pods.json",
        clear_error,
        after=lambda: _expect_spec_gone(node, uuids["team-e/job-1"]),
    )

    def crash() -> str:
        sim_fault_add(sim, "nvmlGpuInstanceCreateComputeInstance", None, "crash-before", 1, 0, None)
        twin = Node(node.state_dir, node.cdi_dir, node.config_path, sim=sim)
        crashy = AllocateRequest(Owner("team-f", "crashy", None), 0, "1g.10gb", PlacementSpec(5))
        status = in_child(lambda: allocation.allocate(twin, crashy, _running_pods(node)))
        _expect(
            status == CRASH_EXIT_STATUS,
            f"the allocating process exited {status}, not {CRASH_EXIT_STATUS}",
        )
        left = [i for i in node.intents.load()[0] if i.placement.start == 5]
        _expect(len(left) == 1, "the crashed allocation left no intent on disk")
        return (
            f"the allocating process died with exit status {status} after creating "
            "the GPU instance; its intent is on disk"
        )

    yield step(
        "Crash mid-allocation",
        "A process is killed (kill -9, OOM, power loss) between creating the GI and the CI. "
        "The intent journal written before the first hardware change says what was underway.",
        "sim fault add --op nvmlGpuInstanceCreateComputeInstance --action crash-before && "
        "allocate --pod team-f/crashy --gpu 0 --profile 1g.10gb --placement 5 --pods pods.json",
        crash,
    )

    def recover() -> str:
        pods = _given([("team-b", "infer-1"), ("team-d", "big-1")])
        report = recovery.recover(node, pods, adopt=False, dry_run=False)
        text = "; ".join(f"{a.action}: {a.reason}" for a in report.actions)
        rolled = [a for a in report.actions if a.action == "rollback-intent"]
        _expect(
            report.exit_code == 0 and len(rolled) == 1 and not node.intents.load()[0],
            f"recovery did not roll back the interrupted allocation: {text or 'nothing to do'}",
        )
        states = {r.placement.start: r.state.value for r in node.records.load()[0].values()}
        _expect(
            states == {0: "Active", 2: "Active", 4: "Idle"},
            f"after recovery the records are {states}, not Active at 0 and 2, Idle at 4",
        )
        return text

    yield step(
        "recover rolls it back",
        "Startup recovery (as the device plugin's init container runs it) reads the pods on "
        "the node, finds the intent and destroys what that request created. The other "
        "instances are verified against their records: those the running pods hold stay "
        "Active, the rest are Idle.",
        "recover --pods pods.json   # team-b/infer-1 and team-d/big-1 are Running",
        recover,
    )


def _how(outcome: Outcome) -> str:
    return "already held" if outcome is Outcome.UNCHANGED else outcome.value


def _uuid(result: Allocation) -> str:
    return str(result.instance.mig_uuid)


def _told(result: Allocation) -> str:
    """The outcome line of an allocation step, as the narration shows it."""
    inst = result.instance
    extra = f"; reclaimed {', '.join(result.reclaimed)}" if result.reclaimed else ""
    return f"{_how(result.outcome)} {inst.mig_uuid} ({inst.profile} at {inst.placement}){extra}"


def _expect_error_kept(node: Node, uuid: str | None) -> None:
    if uuid is None:
        return  # the allocation before it failed: the exit code check reports that
    record = node.records.load()[0].get(uuid)
    state = None if record is None else record.state.value
    _expect(state == "Error", f"{uuid} is {state or 'without a record'}, not Error")
    cdi = node.cdi()
    _expect(cdi is None or cdi.exists(uuid), f"the CDI spec of {uuid} is gone")


def _expect_spec_gone(node: Node, uuid: str) -> None:
    cdi = node.cdi()
    _expect(cdi is None or not cdi.exists(uuid), f"the CDI spec of destroyed {uuid} is still there")


def _running_pods(node: Node) -> PodSource:
    """The demo's pod list, as `kubectl get pods -o json` would give it now: a Running pod for
    each Active record's owner, and no pod annotation naming an Idle instance (no device plugin
    runs here to hand one out)."""
    active = [r.owner for r in node.records.load()[0].values() if r.state.value == "Active"]
    return _given(sorted({(o.namespace, o.name) for o in active if o}))


def _given(owners: list[tuple[str, str]]) -> PodSource:
    """A Running pod of each (namespace, name), as the demo's pod list."""
    running = tuple(Pod(ns, name, None, None, "Running", None, (), None) for ns, name in owners)
    return PodSource.given(PodSnapshot(running, "the demo's pod list", taken_at=time.time()))


def _reclaim(node: Node, uuid: str) -> str:
    result = reclaim(node, ByUuid(uuid), _running_pods(node), dry_run=False)
    return f"reclaimed {len(result.reclaimed)}"


def transcript(workdir: Path, on_step: Callable[[DemoStep], Any]) -> DemoTranscript:
    steps = []
    for s in run_demo(workdir):
        steps.append(s)
        on_step(s)
    return DemoTranscript(node=str(workdir / "node.json"), steps=tuple(steps))
