"""The allocate and reclaim scenarios the crash suites interrupt, step by step: for each, the node
it starts from (an Active neighbour that must never be touched, Idle instances in the way), the
command, every mutating step in order (NVML calls and file operations), and what the durable
state and `list` must say after any number of those steps completed.

tests/test_crash_allocate_reclaim.py crashes each step and checks the state the crash leaves;
tests/test_crash_recover.py crashes each step and checks what `recover` makes of it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hamimig.hw.types import Placement
from hamimig.store.cdi import spec_file_name
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import State
from tests.support.cli import Cli, allocate_args, allocated, ok
from tests.support.crash import Snapshot, snapshot
from tests.support.nvml import CREATE_CI, CREATE_GI, DESTROY_CI, DESTROY_GI

KEEP = Owner("ns", "keep")
NEW = Owner("ns", "new")
KEEP_AT = Placement(6, 1)
CREATE_AT = Placement(3, 1)
RECLAIM_AT = Placement(2, 1)
PRESSURE_AT = Placement(0, 2)
A_AT = Placement(0, 1)
B_AT = Placement(1, 1)


def allocate_at(cli: Cli, pod: str, profile: str, at: Placement, gpu: int = 0) -> str:
    """Allocate at a placement, which must succeed; returns the MIG UUID."""
    return allocated(cli, pod, profile, str(at.start), str(gpu))


def release(cli: Cli, pod: str) -> None:
    ok(cli.json("release", "--pod", pod))


@dataclass(frozen=True)
class Setup:
    """What the scenario's setup made: the Active neighbour and the Idle instances."""

    keep: Record
    idle: tuple[Record, ...]
    """Idle instances, in the order the engine reclaims them (oldest first)."""
    before: Snapshot


def setup_node(cli: Cli, idle: tuple[Placement, ...]) -> Setup:
    """The scenario's starting node: the Active neighbour at KEEP_AT, an Idle instance at each of
    `idle` (released in that order)."""
    keep = allocate_at(cli, "ns/keep", "1g.10gb", KEEP_AT)
    uuids = []
    for n, placement in enumerate(idle):
        uuids.append(allocate_at(cli, f"ns/old{n}", "1g.10gb", placement))
        release(cli, f"ns/old{n}")
    before = snapshot(cli)
    records = sorted(
        (before.records[u] for u in uuids), key=lambda r: (r.updated_at or "", r.mig_uuid)
    )
    return Setup(keep=before.records[keep], idle=tuple(records), before=before)


@dataclass(frozen=True)
class Scenario:
    name: str
    idle: tuple[Placement, ...]
    command: Callable[[Setup], tuple[str, ...]]
    steps: tuple[tuple[str, int], ...]
    """Every mutating step in order: (operation, occurrence index among its kind)."""
    crash_steps: tuple[int, ...]
    """Indexes into `steps` at which crash-before and crash-after are injected."""
    expect: Callable[[Snapshot, Setup, int], None]
    """Checks the exact durable state after `done` steps completed."""
    list_expect: Callable[[list[dict[str, Any]], Snapshot, Setup, int], None]
    pre_faults: tuple[tuple[str, ...], ...] = ()
    """`sim fault add` arguments applied before the crash fault (a failing operation)."""
    clean_exit: int = 0
    """The command's exit status when nothing crashes (4: the failing operation)."""


def _steps(*ops: str) -> tuple[tuple[str, int], ...]:
    seen: Counter[str] = Counter()
    out = []
    for op in ops:
        out.append((op, seen[op]))
        seen[op] += 1
    return tuple(out)


RECLAIM_OPS = ("record.write", DESTROY_CI, DESTROY_GI, "cdi.remove", "record.remove")
RECLAIM_QUEUED_OPS = ("record.write", DESTROY_CI, DESTROY_GI, "queue.write", "record.remove")
CREATE_OPS = (
    "intent.write",
    CREATE_GI,
    "intent.write",
    CREATE_CI,
    "intent.write",
    "cdi.write",
    "record.write",
    "intent.remove",
)


# ----- create --------------------------------------------------------------------------------


def expect_create(
    snap: Snapshot, done: int, at: Placement, profile: str, profile_id: int
) -> str | None:
    """The new instance after `done` of the 8 create steps; returns its MIG UUID once known."""
    gpu_uuid = snap.gpu_uuids[0]
    gi = snap.gi_at(0, at)
    if done >= 2:  # the GI exists
        assert gi is not None
        assert (gi.gpu_uuid, gi.profile) == (gpu_uuid, profile)
        assert len(gi.cis) == (1 if done >= 4 else 0)
    else:
        assert gi is None
    mig = gi.cis[0][1] if gi is not None and done >= 4 else None
    if 1 <= done <= 7:  # the intent exists, updated as IDs become known
        (intent,) = snap.intents
        assert (intent.op, intent.gpu_uuid, intent.gpu_index) == ("allocate", gpu_uuid, 0)
        assert (intent.profile, intent.profile_id, intent.placement) == (profile, profile_id, at)
        assert intent.owner == NEW
        assert gi is not None or done < 2
        assert intent.gpu_instance_id == (gi.id if gi is not None and done >= 3 else None)
        if done >= 5:
            assert gi is not None
            assert (intent.compute_instance_id, intent.mig_uuid) == gi.cis[0]
        else:
            assert (intent.compute_instance_id, intent.mig_uuid) == (None, None)
    else:
        assert snap.intents == ()
    assert mig is not None or done < 4
    if mig is not None:
        assert snap.has_spec(mig) == (done >= 6)
        assert (mig in snap.records) == (done >= 7)
    if done >= 7:
        assert gi is not None and mig is not None
        record = snap.records[mig]
        assert record.state is State.ACTIVE
        assert record.owner == NEW
        assert (record.gpu_uuid, record.profile, record.placement) == (gpu_uuid, profile, at)
        assert (record.gpu_instance_id, record.compute_instance_id) == (gi.id, gi.cis[0][0])
        assert record.cdi_device is not None and record.cdi_device.endswith(spec_name_of(mig))
    return mig


def spec_name_of(mig_uuid: str) -> str:
    """`mig-<sha256>`, the CDI device name (the spec file name without prefix and suffix)."""
    return spec_file_name(mig_uuid).removeprefix("hami-dynamic-mig-").removesuffix(".json")


def expect_neighbour(snap: Snapshot, setup: Setup) -> None:
    """The Active instance elsewhere on the GPU is never touched."""
    keep = setup.keep
    assert (keep.state, keep.owner) == (State.ACTIVE, KEEP)
    assert snap.records[keep.mig_uuid] == keep
    gi = snap.gi_at(0, KEEP_AT)
    assert gi is not None
    assert (gi.id, gi.cis) == (
        keep.gpu_instance_id,
        ((keep.compute_instance_id, keep.mig_uuid),),
    )
    assert snap.has_spec(keep.mig_uuid)
    assert [g for g in snap.gis if g.gpu_index == 1] == []


def expect_exactly(snap: Snapshot, records: set[str], specs: set[str]) -> None:
    """No other record and no other CDI spec than those named."""
    assert set(snap.records) == records
    assert snap.specs == {spec_file_name(u) for u in specs}


def _create_expect(snap: Snapshot, setup: Setup, done: int) -> None:
    mig = expect_create(snap, done, CREATE_AT, "1g.10gb", 19)
    keep = setup.keep.mig_uuid
    new = {mig} if mig is not None else set()
    expect_exactly(
        snap, {keep} | (new if done >= 7 else set()), {keep} | (new if done >= 6 else set())
    )
    assert snap.queued == ()
    assert len(snap.gis) == 1 + (1 if done >= 2 else 0)


def entries_at(items: list[dict[str, Any]], at: Placement) -> list[dict[str, Any]]:
    return [
        i
        for i in items
        if i["gpuIndex"] == 0
        and (i["placement"]["start"], i["placement"]["size"]) == (at.start, at.size)
    ]


def list_expect_create(
    items: list[dict[str, Any]], snap: Snapshot, at: Placement, profile: str, done: int
) -> None:
    entries = entries_at(items, at)
    gi = snap.gi_at(0, at)
    if done == 0:
        assert entries == []
        return
    if done == 8:
        assert gi is not None
        ((ci_id, mig),) = gi.cis
        assert ci_id == 0
        assert [(e["state"], e["migUUID"], e["gpuInstanceID"]) for e in entries] == [
            ("Active", mig, gi.id)
        ]
        assert entries[0]["owner"]["name"] == "new"
        return
    creating = [e for e in entries if e["state"] == "Creating"]
    assert len(creating) == 1, entries
    (entry,) = creating
    (intent,) = snap.intents
    assert entry["profile"] == profile
    assert (entry["owner"]["namespace"], entry["owner"]["name"]) == ("ns", "new")
    assert entry["gpuInstanceID"] == (gi.id if gi is not None else None)
    assert entry["migUUID"] == intent.mig_uuid
    assert intent.id in entry["error"]
    assert entries == [entry]


def _list_expect_create(items: list[dict[str, Any]], snap: Snapshot, _: Setup, done: int) -> None:
    list_expect_create(items, snap, CREATE_AT, "1g.10gb", done)


CREATE_COMMAND = tuple(allocate_args("ns/new", "1g.10gb", str(CREATE_AT.start)))

CREATE = Scenario(
    name="allocate-create",
    idle=(),
    command=lambda _: CREATE_COMMAND,
    steps=_steps(*CREATE_OPS),
    crash_steps=tuple(range(len(CREATE_OPS))),
    expect=_create_expect,
    list_expect=_list_expect_create,
)


# ----- reclaim -------------------------------------------------------------------------------


def expect_reclaimed(snap: Snapshot, record: Record, done: int, cdi_fails: bool = False) -> None:
    """One managed instance after `done` of its 5 destroy steps: Reclaiming, CI, GI, CDI spec
    (or, when its removal fails, the queue entry), record."""
    gi = snap.gi_at(0, record.placement)
    if done <= 4:
        now = snap.records[record.mig_uuid]
        expected = State.IDLE if done == 0 else State.RECLAIMING
        assert now.state is expected
        assert (now.gpu_uuid, now.profile, now.placement, now.owner) == (
            record.gpu_uuid,
            record.profile,
            record.placement,
            None,
        )
        assert (now.gpu_instance_id, now.compute_instance_id, now.error) == (
            record.gpu_instance_id,
            record.compute_instance_id,
            None,
        )
    else:
        assert record.mig_uuid not in snap.records
    if done <= 1:
        assert gi is not None
        assert (gi.id, gi.cis) == (
            record.gpu_instance_id,
            ((record.compute_instance_id, record.mig_uuid),),
        )
    elif done == 2:
        assert gi is not None
        assert (gi.id, gi.cis) == (record.gpu_instance_id, ())
    else:
        assert gi is None
    if cdi_fails:
        assert snap.has_spec(record.mig_uuid)
        assert snap.queued == ((record.mig_uuid,) if done >= 4 else ())
    else:
        assert snap.has_spec(record.mig_uuid) == (done <= 3)
        assert record.mig_uuid not in snap.queued


def list_state_of_reclaimed(done: int) -> str | None:
    """What `list` says about an instance after `done` destroy steps (None: not listed)."""
    if done == 0:
        return "Idle"
    if done <= 2:
        return "Reclaiming"
    # The hardware is gone but the Reclaiming record remains: "Missing" (docs/formats.md).
    return "Missing" if done <= 4 else None


def check_listed_reclaimed(items: list[dict[str, Any]], record: Record, done: int) -> None:
    entries = [i for i in items if i["migUUID"] == record.mig_uuid]
    state = list_state_of_reclaimed(done)
    if state is None:
        assert entries == []
        return
    assert [(e["state"], e["gpuInstanceID"], e["owner"]) for e in entries] == [
        (state, record.gpu_instance_id, None)
    ]
    if state == "Missing":
        assert entries[0]["error"] == "recorded as Reclaiming but not live"
    if done == 2:
        assert entries[0]["error"] == f"GI {record.gpu_instance_id} without its compute instance"


def _reclaim_expect(cdi_fails: bool) -> Callable[[Snapshot, Setup, int], None]:
    def expect(snap: Snapshot, setup: Setup, done: int) -> None:
        (record,) = setup.idle
        expect_reclaimed(snap, record, done, cdi_fails)
        assert snap.intents == ()
        assert len(snap.gis) == 1 + (1 if done <= 2 else 0)
        keep, mig = setup.keep.mig_uuid, record.mig_uuid
        spec_kept = cdi_fails or done <= 3
        expect_exactly(
            snap,
            {keep} | ({mig} if done <= 4 else set()),
            {keep} | ({mig} if spec_kept else set()),
        )

    return expect


def _list_expect_reclaim(items: list[dict[str, Any]], _: Snapshot, setup: Setup, done: int) -> None:
    check_listed_reclaimed(items, setup.idle[0], done)
    assert [i["state"] for i in items if i["state"] == "Creating"] == []


RECLAIM = Scenario(
    name="reclaim",
    idle=(RECLAIM_AT,),
    command=lambda s: ("reclaim", "--mig-uuid", s.idle[0].mig_uuid),
    steps=_steps(*RECLAIM_OPS),
    crash_steps=tuple(range(len(RECLAIM_OPS))),
    expect=_reclaim_expect(cdi_fails=False),
    list_expect=_list_expect_reclaim,
)

RECLAIM_QUEUED = Scenario(
    name="reclaim-cdi-fails",
    idle=(RECLAIM_AT,),
    command=lambda s: ("reclaim", "--mig-uuid", s.idle[0].mig_uuid),
    steps=_steps(*RECLAIM_QUEUED_OPS),
    crash_steps=(3, 4),  # the steps before are those of RECLAIM
    expect=_reclaim_expect(cdi_fails=True),
    list_expect=_list_expect_reclaim,
    pre_faults=(("--op", "cdi.remove", "--error", "EIO"),),
)


# ----- a reclaim whose GI destroy fails: the record goes to Error ---------------------------


def _destroy_fails_expect(snap: Snapshot, setup: Setup, done: int) -> None:
    (record,) = setup.idle
    keep, mig = setup.keep.mig_uuid, record.mig_uuid
    if done <= 3:  # the failing GI destroy (step 3) changes nothing
        expect_reclaimed(snap, record, min(done, 2))
    else:
        now = snap.records[mig]
        assert now.state is State.ERROR
        assert now.error == "NVML call nvmlGpuInstanceDestroy failed: IN_USE (code 19)"
        assert (now.gpu_instance_id, now.compute_instance_id, now.placement, now.owner) == (
            record.gpu_instance_id,
            record.compute_instance_id,
            record.placement,
            None,
        )
        gi = snap.gi_at(0, record.placement)
        assert gi is not None
        assert (gi.id, gi.cis) == (record.gpu_instance_id, ())
    assert snap.intents == ()
    assert snap.queued == ()
    expect_exactly(snap, {keep, mig}, {keep, mig})


def _list_expect_destroy_fails(
    items: list[dict[str, Any]], _: Snapshot, setup: Setup, done: int
) -> None:
    (record,) = setup.idle
    entries = [i for i in items if i["migUUID"] == record.mig_uuid]
    state = "Error" if done == 4 else list_state_of_reclaimed(min(done, 2))
    assert [(e["state"], e["gpuInstanceID"], e["owner"]) for e in entries] == [
        (state, record.gpu_instance_id, None)
    ]


RECLAIM_DESTROY_FAILS = Scenario(
    name="reclaim-gi-destroy-fails",
    idle=(RECLAIM_AT,),
    command=lambda s: ("reclaim", "--mig-uuid", s.idle[0].mig_uuid),
    # the GI destroy is called, fails with IN_USE, and the record goes to Error
    steps=_steps("record.write", DESTROY_CI, DESTROY_GI, "record.write"),
    crash_steps=(3,),  # the steps before are those of RECLAIM
    expect=_destroy_fails_expect,
    list_expect=_list_expect_destroy_fails,
    pre_faults=(("--op", DESTROY_GI, "--error", "IN_USE"),),
    clean_exit=4,
)


# ----- an allocation whose record write fails: everything it created is rolled back ---------

ROLLBACK_OPS = (*CREATE_OPS[:6], DESTROY_CI, DESTROY_GI, "cdi.remove", "intent.remove")


def _rollback_expect(snap: Snapshot, setup: Setup, done: int) -> None:
    undone = done - 6  # rollback steps completed: CI, GI, CDI spec, intent
    keep = setup.keep.mig_uuid
    gi = snap.gi_at(0, CREATE_AT)
    if undone < 0:
        expect_create(snap, done, CREATE_AT, "1g.10gb", 19)
        return
    if undone < 4:
        (intent,) = snap.intents
        assert intent.owner == NEW
        assert (intent.placement, intent.profile) == (CREATE_AT, "1g.10gb")
        assert intent.gpu_instance_id is not None
        assert intent.compute_instance_id is not None and intent.mig_uuid is not None
        if undone < 2:
            assert gi is not None
            assert gi.id == intent.gpu_instance_id
            expected_cis = ((intent.compute_instance_id, intent.mig_uuid),) if undone == 0 else ()
            assert gi.cis == expected_cis
        else:
            assert gi is None
        spec = {intent.mig_uuid} if undone < 3 else set()
        expect_exactly(snap, {keep}, {keep} | spec)
    else:
        assert snap.intents == ()
        assert gi is None
        expect_exactly(snap, {keep}, {keep})
    assert snap.queued == ()


def _list_expect_rollback(items: list[dict[str, Any]], snap: Snapshot, _: Setup, done: int) -> None:
    entries = entries_at(items, CREATE_AT)
    if done == 10:
        assert entries == []
        return
    (intent,) = snap.intents
    gi = snap.gi_at(0, CREATE_AT)
    assert [(e["state"], e["migUUID"], e["gpuInstanceID"]) for e in entries] == [
        ("Creating", intent.mig_uuid, gi.id if gi is not None else intent.gpu_instance_id)
    ]


ROLLBACK = Scenario(
    name="allocate-rollback",
    idle=(),
    command=lambda _: CREATE_COMMAND,
    steps=_steps(*ROLLBACK_OPS),
    crash_steps=(6, 7, 8, 9),  # the steps before are those of CREATE
    expect=_rollback_expect,
    list_expect=_list_expect_rollback,
    pre_faults=(("--op", "record.write", "--error", "EIO"),),
    clean_exit=4,
)


# ----- allocate under placement pressure: two Idle instances in the way ----------------------


def _pressure_expect(snap: Snapshot, setup: Setup, done: int) -> None:
    first, second = setup.idle
    expect_reclaimed(snap, first, min(done, 5))
    expect_reclaimed(snap, second, max(0, min(done - 5, 5)))
    create_done = max(0, done - 10)
    mig = expect_create(snap, create_done, PRESSURE_AT, "2g.20gb", 14)
    assert snap.queued == ()
    records, specs = {setup.keep.mig_uuid}, {setup.keep.mig_uuid}
    for record, progress in ((first, min(done, 5)), (second, max(0, min(done - 5, 5)))):
        if progress <= 4:
            records.add(record.mig_uuid)
        if progress <= 3:
            specs.add(record.mig_uuid)
    if mig is not None:
        records |= {mig} if create_done >= 7 else set()
        specs |= {mig} if create_done >= 6 else set()
    expect_exactly(snap, records, specs)


def _list_expect_pressure(
    items: list[dict[str, Any]], snap: Snapshot, setup: Setup, done: int
) -> None:
    first, second = setup.idle
    check_listed_reclaimed(items, first, min(done, 5))
    check_listed_reclaimed(items, second, max(0, min(done - 5, 5)))
    if done > 10:
        list_expect_create(items, snap, PRESSURE_AT, "2g.20gb", done - 10)
    else:
        assert [i for i in items if i["state"] == "Creating"] == []


PRESSURE = Scenario(
    name="allocate-reclaims",
    idle=(A_AT, B_AT),
    command=lambda _: tuple(allocate_args("ns/new", "2g.20gb", str(PRESSURE_AT.start))),
    steps=_steps(*RECLAIM_OPS, *RECLAIM_OPS, *CREATE_OPS),
    # Both reclaims and the first intent write; the create steps after it are CREATE's.
    crash_steps=tuple(range(11)),
    expect=_pressure_expect,
    list_expect=_list_expect_pressure,
)

SCENARIOS = (CREATE, RECLAIM, RECLAIM_QUEUED, PRESSURE, RECLAIM_DESTROY_FAILS, ROLLBACK)
