"""Recovery after a crash (kill -9) anywhere in `allocate`, `reclaim` and `recover` itself
(docs/design.md "Crash safety").

Part 1, allocate and reclaim. For the scenarios of tests/support/crash_scenarios.py (allocate's
create path; the placement-pressure path that first reclaims two Idle instances; an allocation
whose record write fails and is being rolled back; `reclaim --mig-uuid`, also with a CDI removal
that fails and is queued, and with a GI destroy that fails and leaves Error), on a node that also
holds instances hamimig never made (an unmanaged pair on each GPU, an orphan GI): a crash-before
and a crash-after at every occurrence of every mutating NVML call and every file operation
(`--skip K`), and at every distinct read-only NVML call name the commands make, a crash-after at
its last occurrence (found by a clean run; the mutating steps done before it are counted).
Every occurrence of all ~180 read-only calls would not fit the time budget, and they add little:
a read-only call changes nothing, so its crash-before and crash-after leave the same durable
state, which is also the state between two mutating steps that those steps' cases already
reach. Then `recover --pods` (the pod of the Active neighbour runs, nobody else's) must exit 0
and leave exactly what the completed steps decide: an Idle instance whose reclaim had not begun
stays as it was, one whose record says Reclaiming or Error is gone; an allocation whose record
was written stays as an Idle instance, any other is rolled back; the Active neighbour stays
Active with the same MIG UUID; the unmanaged instances are untouched. The report names exactly
the expected actions, the lifecycle invariants hold, every instance hamimig made has a record,
and a second `recover` changes nothing.

Part 2, recover. A node that needs every kind of recovery action at once: restore-active with
repair-cdi of its lost spec, adopt-active of an instance a pod's HAMi annotation names,
restore-idle of an Active record whose pod is gone, rollback-intent of a crashed allocation,
finish-intent of one that completed, finish-reclaim of a crashed reclaim, retry-destroy of an
Error instance, drop-missing of an instance destroyed behind hamimig's back, retry-cdi-removal of
a queued removal, and with `--adopt` adopt-idle of an unmanaged pair and destroy-orphan-gi of an
orphan GI. A crash-before and a crash-after at every occurrence of every mutating NVML call and
file operation `recover` makes, then `recover` again to completion: the result must equal that
of an uninterrupted `recover` of the same node, the invariants must hold, and one more run must
change nothing.

Speed: only the crashing runs are child processes (forked from the test process, see
`tests/forked.py`); they run ahead of the test that checks them, one per CPU, each on its own
copy of a scenario built once (on tmpfs when there is one). Everything that does not crash
(setup, the recovery runs, the idempotence runs) runs in-process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hamimig.hw.types import Placement
from hamimig.rehearsal.simulator import sim_create, sim_fault_add, sim_fault_clear, sim_init
from hamimig.sim.state import CRASH_EXIT_STATUS, DURABLE_OPS
from hamimig.store.cdi import spec_file_name
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import State
from tests import forked
from tests.support.cli import Cli, allocate_args, run_hamimig, with_pod_source
from tests.support.crash import (
    LiveGi,
    Snapshot,
    check_invariants,
    count_file_ops,
    counted,
    snapshot,
)
from tests.support.crash_scenarios import (
    CREATE,
    CREATE_AT,
    KEEP,
    KEEP_AT,
    PRESSURE,
    PRESSURE_AT,
    RECLAIM,
    RECLAIM_DESTROY_FAILS,
    RECLAIM_OPS,
    RECLAIM_QUEUED,
    ROLLBACK,
    Scenario,
    Setup,
    allocate_at,
    release,
    setup_node,
    spec_name_of,
)
from tests.support.files import tree
from tests.support.node import node_document, sim_state
from tests.support.nvml import DESTROY_CI, DESTROY_GI, MUTATING_NVML

pytestmark = pytest.mark.slow

MODEL = "H100-SXM5-80GB"
IDLE = State.IDLE
ACTIVE = State.ACTIVE

# ---------------------------------------------------------------------------------------------
# Helpers shared by both parts


def _pods_file(path: Path, *running: tuple[str, str, list[dict[str, Any]] | None]) -> Path:
    """A `kubectl get pods -o json` list in which the named pods run: (namespace, name, HAMi's
    `hami.io/vgpu-mig-allocations` entries or None). A pod without the annotation holds its
    instances through the owner named in hamimig's records."""
    items = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"0000-{name}",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"app": name},
                "annotations": {}
                if allocations is None
                else {"hami.io/vgpu-mig-allocations": json.dumps(allocations)},
            },
            "spec": {
                "nodeName": "node-a",
                "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base"}],
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for namespace, name, allocations in running
    ]
    doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    path.write_text(json.dumps(doc, indent=4))
    return path


def _cli_at(base: Path) -> Cli:
    return Cli(base / "sim" / "node.json", base / "state", base / "cdi")


def _copy(template: Path, to: Path) -> Cli:
    shutil.copytree(template, to, dirs_exist_ok=True)
    return _cli_at(to)


def _add_fault(cli: Cli, op: str, action: str, skip: int = 0, error: str | None = None) -> None:
    sim_fault_add(cli.sim, op, error, action, 1, skip, None)


def _durable_files(cli: Cli) -> dict[str, Any]:
    """Every file of the state and CDI directories with its mode and bytes, and the simulated
    layout."""
    files: dict[str, Any] = dict(tree(cli.state_dir, cli.cdi_dir))
    files["sim:gpus"] = json.dumps(sim_state(cli.sim)["gpus"], sort_keys=True).encode()
    return files


FAILED = "; failed: "
"""How a recovery action reports that it failed (with exit 0 when the failure is not fatal)."""


def _recover(cli: Cli, pods: Path, *extra: str) -> dict[str, Any]:
    # The init container lists the pods when it starts, after the crash: a pod list older than
    # the records the crashed command wrote would (rightly) leave those records alone.
    os.utime(pods)
    ran = cli.json("recover", "--pods", str(pods), *extra)
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    doc: dict[str, Any] = ran.json()
    assert (doc["kind"], doc["dryRun"]) == ("Recovery", False)
    return doc


def _actions(doc: dict[str, Any]) -> Counter[str]:
    return Counter(a["action"] for a in doc["actions"])


def _recover_twice(cli: Cli, pods: Path, *extra: str) -> tuple[dict[str, Any], Snapshot]:
    """Recover to completion, then check that a second run changes nothing at all."""
    doc = _recover(cli, pods, *extra)
    assert [a for a in doc["actions"] if FAILED in a["reason"]] == []
    after = snapshot(cli)
    files = _durable_files(cli)
    again = _recover(cli, pods, *extra)
    assert _durable_files(cli) == files, "a second recover changed the node"
    assert [a for a in again["actions"] if FAILED in a["reason"]] == []
    return doc, after


def _live(snap: Snapshot, record: Record) -> list[LiveGi]:
    return [g for g in snap.gis if g.gpu_uuid == record.gpu_uuid and g.id == record.gpu_instance_id]


def check_recovered(snap: Snapshot, unmanaged: tuple[LiveGi, ...]) -> None:
    """The lifecycle invariants after a completed recovery (nothing may be in flight any more).

    `unmanaged`: the live instances hamimig did not make (they are never touched without
    adoption); every other live instance was made by hamimig and must have a record.
    """
    assert snap.intents == ()
    assert snap.queued == ()
    # no two live instances overlap
    for i, g in enumerate(snap.gis):
        for h in snap.gis[i + 1 :]:
            assert not (g.gpu_uuid == h.gpu_uuid and g.placement.overlaps(h.placement)), (g, h)
    # every record names a live instance with its GPU, GI, CI, placement, profile and MIG UUID
    for mig, record in snap.records.items():
        assert record.managed
        assert record.state in (ACTIVE, IDLE), f"{mig} is {record.state.value} after recovery"
        assert (record.owner is not None) == (record.state is ACTIVE)
        assert record.error is None
        live = _live(snap, record)
        assert len(live) == 1, f"record {mig} names no live instance"
        (gi,) = live
        assert (gi.placement, gi.profile, gi.cis) == (
            record.placement,
            record.profile,
            ((record.compute_instance_id, mig),),
        )
        assert record.cdi_device is not None
        assert record.cdi_device.endswith("=" + spec_name_of(mig))
    # the instances hamimig did not make are still there, unchanged, and still unmanaged
    assert set(unmanaged) <= set(snap.gis)
    made = tuple(g for g in snap.gis if g not in unmanaged)
    for gi in unmanaged:
        assert not any(gi in _live(snap, r) for r in snap.records.values()), gi
    # no instance made by hamimig is left without a record
    for gi in made:
        assert [r for r in snap.records.values() if gi in _live(snap, r)] != [], (
            f"untracked instance {gi}"
        )
    # CDI: a spec for every Active and Idle instance, and for nothing else (the queue is empty)
    assert snap.specs == {spec_file_name(u) for u in snap.records}
    check_invariants(dataclasses.replace(snap, gis=made))


# ---------------------------------------------------------------------------------------------
# Crash runs: child processes, run ahead of the tests that check them


@dataclass(frozen=True)
class Case:
    id: str
    scenario: str
    """A part-1 scenario name, or "recover"."""
    op: str
    action: str
    skip: int | None
    """The occurrence the fault hits; None: the last one, found by a clean run (read-only)."""
    done: int | None = None
    """Mutating steps completed when the process dies; None: counted (read-only calls)."""


@dataclass(frozen=True)
class Crashed:
    cli: Cli
    returncode: int
    stdout: str
    stderr: str


Start = Callable[[Case, Path], tuple[Cli, list[str]]]


class CrashPool:
    """Runs the crashing subprocesses of the selected cases in test order, `limit` at a time,
    while the test process checks the earlier ones; each case works on its own directory."""

    def __init__(self, start: Start, order: list[Case], limit: int, scratch: Callable[[], Path]):
        self._start = start
        self._pending = list(order)
        self._limit = limit
        self._scratch = scratch
        self._running: dict[str, tuple[Cli, forked.Child, Path]] = {}

    def _launch(self, case: Case) -> None:
        workdir = self._scratch()
        cli, argv = self._start(case, workdir)
        proc = forked.spawn(with_pod_source(argv), workdir / "out", workdir / "err")
        self._running[case.id] = (cli, proc, workdir)

    def _top_up(self) -> None:
        while self._pending and len(self._running) < self._limit:
            self._launch(self._pending.pop(0))

    def result(self, case: Case) -> Crashed:
        if case.id not in self._running:
            self._pending = [c for c in self._pending if c.id != case.id]
            self._launch(case)
        cli, proc, workdir = self._running[case.id]
        returncode = proc.wait(timeout=120)
        del self._running[case.id]
        self._top_up()
        out, err = (workdir / "out").read_text(), (workdir / "err").read_text()
        return Crashed(cli, returncode, out, err)

    def close(self) -> None:
        for _, proc, _ in self._running.values():
            proc.kill()
            proc.wait()
        self._running.clear()


# ---------------------------------------------------------------------------------------------
# Part 1: allocate and reclaim


@dataclass(frozen=True)
class Kind:
    """How a part-1 scenario is crashed and what its allocation creates."""

    scenario: Scenario
    crash_steps: tuple[int, ...]
    new_at: Placement | None
    new_profile: str | None


KINDS = {
    k.scenario.name: k
    for k in (
        Kind(CREATE, tuple(range(len(CREATE.steps))), CREATE_AT, "1g.10gb"),
        Kind(PRESSURE, tuple(range(len(PRESSURE.steps))), PRESSURE_AT, "2g.20gb"),
        Kind(ROLLBACK, ROLLBACK.crash_steps, CREATE_AT, "1g.10gb"),
        Kind(RECLAIM, tuple(range(len(RECLAIM.steps))), None, None),
        Kind(RECLAIM_QUEUED, RECLAIM_QUEUED.crash_steps, None, None),
        Kind(RECLAIM_DESTROY_FAILS, RECLAIM_DESTROY_FAILS.crash_steps, None, None),
    )
}

# Instances hamimig never made, present before every part-1 scenario: an unmanaged pair on
# each GPU, out of every scenario's way, and an orphan GI. (GPU, profile, placement, no CI.)
FOREIGN = (
    (0, "1g.10gb", Placement(5, 1), False),
    (1, "1g.10gb", Placement(0, 1), False),
    (1, "2g.20gb", Placement(2, 2), True),
)

# Every distinct read-only NVML function allocate and reclaim call, with the scenario that
# crashes on it (`test_read_only_crash_points_cover_every_call_name` keeps this complete).
READ_ONLY: dict[str, tuple[str, ...]] = {
    PRESSURE.name: (
        "nvmlComputeInstanceGetInfo",
        "nvmlDeviceGetAttributes",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGpuInstanceById",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetGpuInstancePossiblePlacements",
        "nvmlDeviceGetGpuInstanceProfileInfo",
        "nvmlDeviceGetGpuInstances",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetMPSComputeRunningProcesses",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlGpuInstanceGetComputeInstanceById",
        "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        "nvmlGpuInstanceGetInfo",
        "nvmlInit",
        "nvmlShutdown",
    ),
    RECLAIM.name: (
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetIndex",
        "nvmlDeviceIsMigDeviceHandle",
    ),
}


def _part1_cases() -> list[Case]:
    cases = []
    for kind in KINDS.values():
        scenario = kind.scenario
        for index in kind.crash_steps:
            op, skip = scenario.steps[index]
            for action in ("crash-before", "crash-after"):
                done = index if action == "crash-before" else index + 1
                cid = f"{scenario.name}-{op}#{skip}-{action}"
                cases.append(Case(cid, scenario.name, op, action, skip, done=done))
    for name, ops in READ_ONLY.items():
        for op in ops:
            cases.append(Case(f"{name}-{op}@last-crash-after", name, op, "crash-after", None))
    return cases


PART1_CASES = _part1_cases()


@dataclass(frozen=True)
class Template:
    base: Path
    cli: Cli
    before: Snapshot
    pods: Path
    setup: Setup | None = None
    unmanaged: tuple[LiveGi, ...] = ()


def _build_part1(base: Path, scenario: Scenario) -> Template:
    sim_init(base / "sim" / "node.json", MODEL, 2)
    cli = _cli_at(base)
    setup = setup_node(cli, scenario.idle)
    for gpu, profile, at, no_ci in FOREIGN:
        sim_create(cli.sim, str(gpu), profile, f"{at.start}:{at.size}", no_ci)
    before = snapshot(cli)
    tracked = {(r.gpu_uuid, r.gpu_instance_id) for r in before.records.values()}
    unmanaged = tuple(g for g in before.gis if (g.gpu_uuid, g.id) not in tracked)
    assert {(g.gpu_index, g.profile, g.placement, len(g.cis)) for g in unmanaged} == {
        (gpu, profile, at, 0 if no_ci else 1) for gpu, profile, at, no_ci in FOREIGN
    }
    pods = _pods_file(base / "pods.json", (KEEP.namespace, KEEP.name, None))
    return Template(base, cli, before, pods, setup, unmanaged)


@dataclass(frozen=True)
class Progress:
    """What the completed steps of a crashed part-1 command leave for recovery to find."""

    idle_untouched: tuple[bool, ...]
    """Per Idle instance (in reclaim order): its reclaim had not begun."""
    idle_recorded: tuple[bool, ...]
    """Per Idle instance: its record still exists (Idle, Reclaiming or Error)."""
    queued: bool
    intent: bool
    new_recorded: bool
    """The allocation's record was written: the new instance must survive recovery."""


def progress(scenario: Scenario, done: int) -> Progress:
    completed = [op for op, _ in scenario.steps[:done]]
    per_idle = len(RECLAIM_OPS)
    record_step = next(
        (
            i
            for i, (op, _) in enumerate(scenario.steps)
            if op == "record.write" and i > 0 and scenario.steps[i - 1][0] == "cdi.write"
        ),
        None,
    )
    return Progress(
        idle_untouched=tuple(done <= per_idle * i for i in range(len(scenario.idle))),
        idle_recorded=tuple(done <= per_idle * i + 4 for i in range(len(scenario.idle))),
        queued="queue.write" in completed,
        intent="intent.write" in completed and "intent.remove" not in completed,
        new_recorded=record_step is not None and done > record_step,
    )


def expected_actions(p: Progress) -> Counter[str]:
    actions: Counter[str] = Counter(
        {"restore-active": 1, "preserve-unmanaged": 2, "preserve-orphan-gi": 1}
    )
    for untouched, recorded in zip(p.idle_untouched, p.idle_recorded, strict=True):
        if untouched:
            actions["restore-idle"] += 1
        elif recorded:
            actions["finish-reclaim"] += 1
    if p.queued:
        actions["retry-cdi-removal"] += 1
    if p.new_recorded:
        actions["restore-idle"] += 1
    if p.intent:
        actions["finish-intent" if p.new_recorded else "rollback-intent"] += 1
    return actions


def check_part1(after: Snapshot, crashed: Snapshot, tpl: Template, kind: Kind, p: Progress) -> None:
    setup = tpl.setup
    assert setup is not None
    check_recovered(after, tpl.unmanaged)
    # the Active neighbour held by a running pod: untouched, same MIG UUID
    keep = setup.keep
    assert after.records[keep.mig_uuid] == keep
    assert (keep.state, keep.owner) == (ACTIVE, KEEP)
    gi = after.gi_at(0, KEEP_AT)
    assert gi is not None
    assert (gi.id, gi.cis) == (keep.gpu_instance_id, ((keep.compute_instance_id, keep.mig_uuid),))
    # Idle instances: kept as they were unless their reclaim had begun
    expected = {keep.mig_uuid}
    for record, untouched in zip(setup.idle, p.idle_untouched, strict=True):
        if untouched:
            expected.add(record.mig_uuid)
            assert after.records[record.mig_uuid] == record
        else:
            assert record.mig_uuid not in after.live_uuids()
    # the allocation: kept (Idle: its pod does not run) once its record existed, else undone
    if kind.new_at is not None:
        new = after.gi_at(0, kind.new_at)
        if p.new_recorded:
            assert new is not None
            assert new == crashed.gi_at(0, kind.new_at)
            ((ci_id, mig),) = new.cis
            expected.add(mig)
            record = after.records[mig]
            assert (record.state, record.owner, record.profile, record.placement) == (
                IDLE,
                None,
                kind.new_profile,
                kind.new_at,
            )
            assert (record.gpu_instance_id, record.compute_instance_id) == (new.id, ci_id)
        else:
            assert new is None
    assert set(after.records) == expected
    assert len(after.gis) == len(expected) + len(tpl.unmanaged)


# ---------------------------------------------------------------------------------------------
# Part 2: recover itself


@dataclass(frozen=True)
class Mixed:
    """The part-2 node: MIG UUIDs of the instances in each situation."""

    keep: str
    gone: str
    reclaiming: str
    missing: str
    queued: str
    errored: str
    rolled_back: str
    finished: str
    unmanaged: str
    annotated: str


HAMI_POD = Owner("ns", "hami", "0000-hami", 0, 0)
"""A running pod whose HAMi annotation names a live instance without a record."""


def _crash(cli: Cli, op: str, action: str, *command: str) -> None:
    _add_fault(cli, op, action)
    ran = run_hamimig(*cli.globals(), *command)
    assert ran.returncode == CRASH_EXIT_STATUS, (ran.stdout, ran.stderr)


def _build_mixed(base: Path) -> tuple[Template, Mixed]:
    sim_init(base / "sim" / "node.json", MODEL, 2)
    cli = _cli_at(base)
    keep = allocate_at(cli, "ns/keep", "1g.10gb", KEEP_AT)  # restore-active
    gone = allocate_at(cli, "ns/gone", "1g.10gb", Placement(5, 1))  # restore-idle
    reclaiming = allocate_at(cli, "ns/r", "1g.10gb", Placement(4, 1))
    missing = allocate_at(cli, "ns/m", "1g.10gb", Placement(2, 1))
    queued = allocate_at(cli, "ns/q", "1g.10gb", Placement(0, 1))
    errored = allocate_at(cli, "ns/e", "1g.10gb", Placement(1, 1))
    for pod in ("ns/r", "ns/m", "ns/q", "ns/e"):
        release(cli, pod)
    # retry-destroy: a reclaim whose CI destroy failed left the instance in Error
    _add_fault(cli, DESTROY_CI, "raise", error="IN_USE")
    ran = cli.json("reclaim", "--mig-uuid", errored)
    assert ran.exit_code == 4, ran.stdout
    # finish-reclaim: a reclaim that died right after marking the record Reclaiming
    _crash(cli, "record.write", "crash-after", "reclaim", "--mig-uuid", reclaiming)
    # rollback-intent: an allocation that died after writing its CDI spec
    _crash(cli, "cdi.write", "crash-after", *allocate_args("ns/crashed", "1g.10gb", "3", "0"))
    # retry-cdi-removal: a reclaim whose CDI removal failed and was queued; its spec names GPU
    # 0, where nothing is created after this, and the allocation on GPU 1 below retries the
    # removal before it creates, which fails again (the fault's second firing)
    sim_fault_add(cli.sim, "cdi.remove", "EIO", "raise", 2, 0, None)
    ran = cli.json("reclaim", "--mig-uuid", queued)
    assert ran.exit_code == 0, ran.stdout
    # finish-intent (+ restore-idle): an allocation that died before removing its intent (on
    # GPU 1: allocate refuses a GPU with an interrupted allocation until recovery)
    _crash(cli, "intent.remove", "crash-before", *allocate_args("ns/done", "1g.10gb", "4", "1"))
    # drop-missing: the Idle instance at 2 destroyed behind hamimig's back
    with node_document(cli.sim) as state:
        gpu = state["gpus"][0]
        gpu["gpuInstances"] = [g for g in gpu["gpuInstances"] if g["placement"]["start"] != 2]
    # adopt-idle and destroy-orphan-gi (with --adopt) on GPU 1, where no pod holds anything
    sim_create(cli.sim, "1", "1g.10gb", "0:1", False)
    sim_create(cli.sim, "1", "2g.20gb", "2:2", True)
    # adopt-active: a pod's HAMi annotation names an instance hamimig has no record of
    sim_create(cli.sim, "0", "1g.10gb", "0:1", False)
    # repair-cdi: the Active instance's CDI spec is gone; restore-active rewrites it
    (cli.cdi_dir / spec_file_name(keep)).unlink()
    before = snapshot(cli)
    assert before.faults == ()
    by_pod = {i.owner.name: i.mig_uuid for i in before.intents if i.owner is not None}
    assert set(by_pod) == {"crashed", "done"}
    rolled_back, finished = by_pod["crashed"], by_pod["done"]
    tracked = set(before.records) | {finished, rolled_back}
    (unmanaged,) = [u for g in before.gis if g.gpu_index == 1 for _, u in g.cis if u not in tracked]
    held = before.gi_at(0, Placement(0, 1))
    assert held is not None
    ((held_ci, annotated),) = held.cis
    assert annotated not in tracked
    allocation = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": held.gpu_uuid,
        "profile": "1g.10gb",
        "placement": {"start": 0, "size": 1},
        "migUUID": annotated,
        "gpuInstanceID": held.id,
        "computeInstanceID": held_ci,
    }
    assert rolled_back is not None and finished is not None
    assert {u: r.state for u, r in before.records.items()} == {
        keep: ACTIVE,
        gone: ACTIVE,
        reclaiming: State.RECLAIMING,
        missing: IDLE,
        finished: ACTIVE,
        errored: State.ERROR,
    }
    assert (
        before.records[errored].error
        == "NVML call nvmlComputeInstanceDestroy failed: IN_USE (code 19)"
    )
    assert queued not in before.records
    assert before.queued == (queued,)
    assert before.has_spec(queued) and before.has_spec(rolled_back)
    assert before.has_spec(finished)
    pods = _pods_file(
        base / "pods.json",
        (KEEP.namespace, KEEP.name, None),
        (HAMI_POD.namespace, HAMI_POD.name, [allocation]),
    )
    mixed = Mixed(
        keep,
        gone,
        reclaiming,
        missing,
        queued,
        errored,
        rolled_back,
        finished,
        unmanaged,
        annotated,
    )
    return Template(base, cli, before, pods), mixed


# Every mutating step of the uninterrupted recover of the mixed node
# (`test_recover_makes_exactly_the_enumerated_steps` proves it complete).
RECOVER_STEPS = Counter(
    {
        DESTROY_CI: 3,  # finish-reclaim, retry-destroy, rollback-intent
        DESTROY_GI: 4,  # finish-reclaim, retry-destroy, rollback-intent, destroy-orphan-gi
        "record.write": 5,  # restore-idle x2, retry-destroy (Error -> Reclaiming), adopt-active,
        # adopt-idle
        "record.remove": 3,  # finish-reclaim, retry-destroy, drop-missing
        "cdi.write": 3,  # restore-active (repair-cdi), adopt-active, adopt-idle
        "cdi.remove": 5,  # finish-reclaim, retry-destroy, drop-missing, rollback-intent,
        # retry-cdi-removal
        "intent.remove": 2,  # rollback-intent, finish-intent
        "queue.write": 1,  # retry-cdi-removal
    }
)

RECOVER_ACTIONS = Counter(
    {
        "restore-active": 1,
        "repair-cdi": 1,
        "adopt-active": 1,
        "restore-idle": 2,
        "retry-destroy": 1,
        "finish-reclaim": 1,
        "drop-missing": 1,
        "rollback-intent": 1,
        "finish-intent": 1,
        "retry-cdi-removal": 1,
        "adopt-idle": 1,
        "destroy-orphan-gi": 1,
    }
)


def _part2_cases() -> list[Case]:
    return [
        Case(f"recover-{op}#{k}-{action}", "recover", op, action, k)
        for op, n in RECOVER_STEPS.items()
        for k in range(n)
        for action in ("crash-before", "crash-after")
    ]


PART2_CASES = _part2_cases()


def final_state(snap: Snapshot, cli: Cli) -> dict[str, Any]:
    """What two recoveries of the same node must agree on (timestamps aside)."""
    return {
        "gis": sorted(
            (g.gpu_index, g.id, g.placement.start, g.placement.size, g.profile, g.cis)
            for g in snap.gis
        ),
        "records": {
            u: (
                r.state,
                r.owner,
                r.gpu_uuid,
                r.gpu_index,
                r.gpu_instance_id,
                r.compute_instance_id,
                r.placement,
                r.profile,
                r.cdi_device,
                r.error,
            )
            for u, r in snap.records.items()
        },
        "specs": {p.name: p.read_bytes() for p in cli.cdi_dir.iterdir()},
        "intents": snap.intents,
        "queued": snap.queued,
    }


@dataclass(frozen=True)
class Reference:
    template: Template
    mixed: Mixed
    actions: Counter[str]
    final: dict[str, Any]
    after: Snapshot


# ---------------------------------------------------------------------------------------------
# Fixtures


class Lab:
    """Scenario templates (built once each), clean-run call counts, and the crash pool."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: Counter[str] = Counter()
        self.templates: dict[str, Template] = {}
        self.clean_calls: dict[str, Counter[str]] = {}
        self._reference: Reference | None = None
        self._mixed: Mixed | None = None
        self.pool: CrashPool | None = None

    def mktemp(self, name: str) -> Path:
        self._made[name] += 1
        path = self.root / f"{name}{self._made[name]}"
        path.mkdir()
        return path

    def template(self, name: str) -> Template:
        if name not in self.templates:
            base = self.mktemp(f"template-{name}-")
            if name == "recover":
                self.templates[name], self._mixed = _build_mixed(base)
            else:
                self.templates[name] = _build_part1(base, KINDS[name].scenario)
        return self.templates[name]

    def scratch(self) -> Path:
        return self.mktemp("case")

    def mixed(self) -> Mixed:
        self.template("recover")
        assert self._mixed is not None
        return self._mixed

    def command(self, name: str) -> tuple[str, ...]:
        if name == "recover":
            return ("recover", "--pods", str(self.template(name).pods), "--adopt")
        tpl = self.template(name)
        assert tpl.setup is not None
        return KINDS[name].scenario.command(tpl.setup)

    def calls(self, name: str) -> Counter[str]:
        """NVML calls of the scenario's command run cleanly on a scratch copy."""
        if name not in self.clean_calls:
            tpl = self.template(name)
            cli = _copy(tpl.base, self.scratch())
            ran = cli.json(*self.command(name))
            assert ran.exit_code == 0, ran.stdout
            after = sim_state(cli.sim)["calls"]
            self.clean_calls[name] = (
                Counter({k: v - tpl.before.calls.get(k, 0) for k, v in after.items()}) - Counter()
            )
        return self.clean_calls[name]

    def start(self, case: Case, workdir: Path) -> tuple[Cli, list[str]]:
        """Copy the case's template and inject its faults; the argv of its crashing run."""
        tpl = self.template(case.scenario)
        skip = case.skip
        if skip is None:
            skip = self.calls(case.scenario)[case.op] - 1
        cli = _copy(tpl.base, workdir)
        if case.scenario in KINDS:
            for args in KINDS[case.scenario].scenario.pre_faults:
                opts = dict(zip(args[::2], args[1::2], strict=True))
                _add_fault(cli, opts["--op"], "raise", error=opts["--error"])
        if case.skip is None:  # a read-only call: count the steps done before it
            count_file_ops(cli)
        _add_fault(cli, case.op, case.action, skip)
        argv = [*cli.globals(), "-o", "json"]
        return cli, [*argv, *self.command(case.scenario)]

    def reference(self) -> Reference:
        """An uninterrupted recover of the mixed node."""
        if self._reference is None:
            tpl = self.template("recover")
            cli = _copy(tpl.base, self.scratch())
            doc, after = _recover_twice(cli, tpl.pods, "--adopt")
            self._reference = Reference(
                tpl, self.mixed(), _actions(doc), final_state(after, cli), after
            )
        return self._reference


def _scratch_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bool]:
    """Where the cases work: tmpfs when there is one. The simulated node is a JSON file replaced
    (written and renamed) on every NVML call, a few hundred times per case; on a journaling
    disk each rename over an existing file flushes its data (ext4's auto_da_alloc) and costs
    milliseconds, which would double this module's run time. Returns (path, remove it after)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="hamimig-crash-recover-", dir=shm)), True
    return tmp_path_factory.mktemp("crash-recover"), False


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root, remove = _scratch_root(tmp_path_factory)
    lab = Lab(root)
    order: list[Case] = []  # the selected cases, in the order pytest runs them
    for item in request.session.items:
        if isinstance(item, pytest.Function) and item.module is request.module:
            callspec = getattr(item, "callspec", None)
            if callspec is not None and "case" in callspec.params:
                order.append(callspec.params["case"])
    try:
        limit = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        limit = os.cpu_count() or 2
    lab.pool = CrashPool(lab.start, order, max(2, limit), lab.scratch)
    try:
        yield lab
    finally:
        lab.pool.close()
        if remove:
            shutil.rmtree(root)


def _crashed(lab: Lab, case: Case) -> Crashed:
    assert lab.pool is not None
    run = lab.pool.result(case)
    assert run.returncode == CRASH_EXIT_STATUS, (run.stdout, run.stderr)
    assert (run.stdout, run.stderr) == ("", "")
    return run


# ---------------------------------------------------------------------------------------------
# Tests: part 1


def test_the_crash_matrices_cover_every_step() -> None:
    mutating = [c for c in PART1_CASES if c.done is not None]
    assert len(mutating) == 2 * (8 + 18 + 4 + 5 + 2 + 1) == 76
    ops = {c.op for c in mutating}
    assert ops == set(MUTATING_NVML) | set(DURABLE_OPS)
    assert len(PART1_CASES) - len(mutating) == 23 + 3
    assert len(PART2_CASES) == 2 * sum(RECOVER_STEPS.values()) == 52
    assert {c.op for c in PART2_CASES} == (set(MUTATING_NVML) | set(DURABLE_OPS)) - {
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceCreateComputeInstance",
        "intent.write",
    }


def test_read_only_crash_points_cover_every_call_name(lab: Lab) -> None:
    names: set[str] = set()
    for name in (CREATE.name, PRESSURE.name, RECLAIM.name):
        names |= set(lab.calls(name)) - set(MUTATING_NVML)
    assert names == {op for ops in READ_ONLY.values() for op in ops}
    for name, ops in READ_ONLY.items():
        assert set(ops) <= set(lab.calls(name)), name


@pytest.mark.parametrize("case", PART1_CASES, ids=lambda c: c.id)
def test_recover_after_a_crash_in_allocate_or_reclaim(lab: Lab, case: Case) -> None:
    tpl = lab.template(case.scenario)
    kind = KINDS[case.scenario]
    run = _crashed(lab, case)
    cli = run.cli
    crashed = snapshot(cli)
    if case.done is None:
        # A read-only call: count the mutating steps that completed before it.
        done = sum(counted(tpl.before, crashed, frozenset()).values())
        assert 0 <= done <= len(kind.scenario.steps)
        if case.op == "nvmlInit":
            assert done == 0
        if case.op == "nvmlShutdown":
            assert done == len(kind.scenario.steps)
        assert len(crashed.faults) == len(DURABLE_OPS)
        sim_fault_clear(cli.sim)
    else:
        done = case.done
        assert crashed.faults == ()
    p = progress(kind.scenario, done)

    doc, after = _recover_twice(cli, tpl.pods)

    assert _actions(doc) == expected_actions(p)
    check_part1(after, crashed, tpl, kind, p)


# ---------------------------------------------------------------------------------------------
# Tests: part 2


def test_recover_makes_exactly_the_enumerated_steps(lab: Lab) -> None:
    tpl = lab.template("recover")
    cli = _copy(tpl.base, lab.scratch())
    count_file_ops(cli)
    before = snapshot(cli)
    _recover(cli, tpl.pods, "--adopt")
    assert counted(before, snapshot(cli), frozenset()) == RECOVER_STEPS


def test_uninterrupted_recover_of_a_node_needing_every_action(lab: Lab) -> None:
    ref = lab.reference()
    m, after = ref.mixed, ref.after
    assert ref.actions == RECOVER_ACTIONS
    check_recovered(after, ())
    assert {u: (r.state, r.owner) for u, r in after.records.items()} == {
        m.keep: (ACTIVE, KEEP),
        m.annotated: (ACTIVE, HAMI_POD),
        m.gone: (IDLE, None),
        m.finished: (IDLE, None),
        m.unmanaged: (IDLE, None),
    }
    before = ref.template.before
    assert after.records[m.keep] == before.records[m.keep]
    assert sorted((g.gpu_index, g.placement.start, g.profile) for g in after.gis) == [
        (0, 0, "1g.10gb"),
        (0, 5, "1g.10gb"),
        (0, 6, "1g.10gb"),
        (1, 0, "1g.10gb"),
        (1, 4, "1g.10gb"),
    ]
    # the survivors are the very instances that were there before
    assert set(after.gis) <= set(before.gis)


@pytest.mark.parametrize("case", PART2_CASES, ids=lambda c: c.id)
def test_recover_after_a_crash_in_recover(lab: Lab, case: Case) -> None:
    ref = lab.reference()
    run = _crashed(lab, case)
    cli = run.cli
    assert snapshot(cli).faults == ()

    _, after = _recover_twice(cli, ref.template.pods, "--adopt")

    check_recovered(after, ())
    assert final_state(after, cli) == ref.final
