"""A crash (kill -9) at every step boundary of `allocate` and `reclaim` leaves durable state that
says enough to finish or undo the step (DESIGN.md "Crash safety", issue 3 section 6).

Each case sets up a node in-process, injects one simulator fault `crash-before` or
`crash-after` on the K-th call of one operation, and runs the command in a real subprocess,
which must die with status 137. Then it reads the simulated node and the state and CDI
directories and checks two things: the invariants every crash point must keep (every live
GI/CI hamimig made is named by a record or covered by an intent, every record explains its
instance, no CDI spec without a reason to exist, no overlap), and the exact durable state
expected after the steps that completed. Recovery is the next issue: only the durable state is
asserted here, plus that `list` still runs and shows the in-flight instance.

The step sequences are enumerated explicitly; `test_clean_run_makes_exactly_the_enumerated_steps`
proves each enumeration complete by counting every mutating NVML call and every file operation
of the same command run cleanly.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hamimig.hw.types import Placement
from hamimig.reports.simulator import sim_init
from hamimig.sim.models import MODELS
from hamimig.sim.state import CRASH_EXIT_STATUS, FILE_OPS
from hamimig.store.cdi import spec_file_name
from hamimig.store.intents import Intent, IntentStore
from hamimig.store.queue import QUEUE_NAME, RemovalQueue
from hamimig.store.records import Owner, Record, RecordState, RecordStore, record_name
from tests.support.cli import Cli, run_hamimig
from tests.support.node import sim_state

pytestmark = pytest.mark.slow

MUTATING_NVML = (
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceDestroy",
    "nvmlGpuInstanceDestroy",
)
CREATE_GI = "nvmlDeviceCreateGpuInstanceWithPlacement"
CREATE_CI = "nvmlGpuInstanceCreateComputeInstance"
DESTROY_CI = "nvmlComputeInstanceDestroy"
DESTROY_GI = "nvmlGpuInstanceDestroy"
COUNTING_SKIP = 10_000

KEEP = Owner("ns", "keep")
NEW = Owner("ns", "new")
KEEP_AT = Placement(6, 1)
CREATE_AT = Placement(3, 1)
RECLAIM_AT = Placement(2, 1)
PRESSURE_AT = Placement(0, 2)
A_AT = Placement(0, 1)
B_AT = Placement(1, 1)


# --------------------------------------------------------------------------------------------
# Reading the durable state and the simulated node


@dataclass(frozen=True)
class LiveGi:
    gpu_uuid: str
    gpu_index: int
    id: int
    profile: str
    placement: Placement
    cis: tuple[tuple[int, str], ...]
    """(CI ID, MIG UUID) of each compute instance."""


@dataclass(frozen=True)
class Snapshot:
    gpu_uuids: tuple[str, ...]
    gis: tuple[LiveGi, ...]
    records: dict[str, Record]
    intents: tuple[Intent, ...]
    queued: tuple[str, ...]
    specs: frozenset[str]
    """File names in the CDI directory."""
    faults: tuple[dict[str, Any], ...]
    calls: dict[str, int]

    def gi_at(self, gpu_index: int, placement: Placement) -> LiveGi | None:
        found = [g for g in self.gis if g.gpu_index == gpu_index and g.placement == placement]
        assert len(found) <= 1, found
        return found[0] if found else None

    def live_uuids(self) -> set[str]:
        return {uuid for g in self.gis for _, uuid in g.cis}

    def has_spec(self, mig_uuid: str) -> bool:
        return spec_file_name(mig_uuid) in self.specs


def snapshot(cli: Cli) -> Snapshot:
    state = sim_state(cli.sim)
    gis: list[LiveGi] = []
    for gpu in state["gpus"]:
        model = MODELS[gpu["model"]]
        for gi in gpu["gpuInstances"]:
            spec = model.profile_by_id(gi["profileId"])
            assert spec is not None
            gis.append(
                LiveGi(
                    gpu_uuid=gpu["uuid"],
                    gpu_index=gpu["index"],
                    id=gi["id"],
                    profile=spec.name,
                    placement=Placement(gi["placement"]["start"], gi["placement"]["size"]),
                    cis=tuple((ci["id"], ci["migUUID"]) for ci in gi["computeInstances"]),
                )
            )
    records, record_problems = RecordStore(cli.state_dir).load()
    intents, intent_problems = IntentStore(cli.state_dir).load()
    queued, queue_problems = RemovalQueue(cli.state_dir).load()
    assert record_problems + intent_problems + queue_problems == []
    state_files = sorted(p.name for p in cli.state_dir.iterdir()) if cli.state_dir.exists() else []
    # Nothing but records, intents, the queue and the lock: no temp file left behind.
    assert [
        n
        for n in state_files
        if not (n.startswith(("hami-owned-mig-", "intent-")) and n.endswith(".json"))
        and n not in (QUEUE_NAME, "hamimig.lock", "counters.json")
    ] == []
    assert sorted(n for n in state_files if n.startswith("hami-owned-")) == sorted(
        record_name(u) for u in records
    )
    assert len([n for n in state_files if n.startswith("intent-")]) == len(intents)
    specs = frozenset(p.name for p in cli.cdi_dir.iterdir()) if cli.cdi_dir.exists() else set()
    return Snapshot(
        gpu_uuids=tuple(g["uuid"] for g in state["gpus"]),
        gis=tuple(gis),
        records=records,
        intents=tuple(intents),
        queued=tuple(q.mig_uuid for q in queued),
        specs=frozenset(specs),
        faults=tuple(state["faults"]),
        calls=dict(state["calls"]),
    )


# --------------------------------------------------------------------------------------------
# The invariants every crash point keeps


def _record_claims(record: Record, gi: LiveGi) -> bool:
    return (
        gi.gpu_uuid == record.gpu_uuid
        and gi.id == record.gpu_instance_id
        and gi.placement == record.placement
        and gi.profile == record.profile
    )


def _intent_covers(intent: Intent, gi: LiveGi) -> bool:
    return (
        gi.gpu_uuid == intent.gpu_uuid
        and gi.placement == intent.placement
        and gi.profile == intent.profile
        and intent.gpu_instance_id in (None, gi.id)
    )


def check_invariants(snap: Snapshot) -> None:
    """(a)-(d) of the crash-safety rule, for a node where hamimig made every instance."""
    # (d) no two live instances overlap
    for i, g in enumerate(snap.gis):
        for h in snap.gis[i + 1 :]:
            assert not (g.gpu_uuid == h.gpu_uuid and g.placement.overlaps(h.placement)), (g, h)
    # (a) every live GI/CI is named by a record or covered by an intent
    for gi in snap.gis:
        owners = [r for r in snap.records.values() if _record_claims(r, gi)]
        covering = [i for i in snap.intents if _intent_covers(i, gi)]
        assert len(owners) + len(covering) >= 1, f"untracked live instance {gi}"
        assert len(owners) <= 1 and len(covering) <= 1, (gi, owners, covering)
        if owners:
            (record,) = owners
            # a GI holds at most the recorded CI (a GI-only remnant only while Reclaiming/Error)
            assert gi.cis in (((record.compute_instance_id, record.mig_uuid),), ()), (gi, record)
        else:
            (intent,) = covering
            assert len(gi.cis) <= 1
            if intent.mig_uuid is not None:  # the CI, or a GI whose CI a rollback destroyed
                assert gi.cis in (((intent.compute_instance_id, intent.mig_uuid),), ())
    # (b) every record names a live instance, or is Reclaiming/Error (or in flight: intent)
    for record in snap.records.values():
        assert record.managed
        live = [g for g in snap.gis if _record_claims(record, g)]
        others = [
            g
            for g in snap.gis
            if g.gpu_uuid == record.gpu_uuid
            and g.placement.overlaps(record.placement)
            and g not in live
        ]
        assert others == [], f"{record.mig_uuid}: another instance sits at its placement"
        complete = bool(live) and live[0].cis == ((record.compute_instance_id, record.mig_uuid),)
        if record.state in (RecordState.ACTIVE, RecordState.IDLE):
            assert complete, f"{record.state.value} record {record.mig_uuid} is not live"
            assert (record.owner is not None) == (record.state is RecordState.ACTIVE)
        else:
            assert record.state in (RecordState.RECLAIMING, RecordState.ERROR), record
            assert record.owner is None
            assert (record.error is not None) == (record.state is RecordState.ERROR)
    # (c) a spec only for an instance that is live and tracked, being reclaimed or in Error,
    # queued, or named by an intent; and every Active, Idle and Error instance has its spec
    allowed = (
        {u for u in snap.live_uuids() if u in snap.records}
        | {
            u
            for u, r in snap.records.items()
            if r.state in (RecordState.RECLAIMING, RecordState.ERROR)
        }
        | set(snap.queued)
        | {i.mig_uuid for i in snap.intents if i.mig_uuid is not None}
    )
    assert snap.specs <= {spec_file_name(u) for u in allowed}, "a CDI spec nobody explains"
    for u, r in snap.records.items():
        if r.state in (RecordState.ACTIVE, RecordState.IDLE, RecordState.ERROR):
            assert snap.has_spec(u), f"{r.state.value} {u} has no CDI spec"
    # a removal is queued only once the hardware is gone
    assert set(snap.queued).isdisjoint(snap.live_uuids())
    for intent in snap.intents:
        assert intent.op == "allocate"


# --------------------------------------------------------------------------------------------
# Scenarios


@dataclass(frozen=True)
class Setup:
    """What the scenario's setup made: the Active neighbour and the Idle instances."""

    keep: Record
    idle: tuple[Record, ...]
    """Idle instances, in the order the engine reclaims them (oldest first)."""
    before: Snapshot


def _allocate(cli: Cli, pod: str, profile: str, placement: Placement, gpu: int = 0) -> str:
    ran = cli.json(
        "allocate",
        "--pod",
        pod,
        "--gpu",
        str(gpu),
        "--profile",
        profile,
        "--placement",
        str(placement.start),
    )
    assert ran.exit_code == 0, ran.stdout
    mig: str = ran.json()["instance"]["migUUID"]
    return mig


def _release(cli: Cli, pod: str) -> None:
    ran = cli.json("release", "--pod", pod)
    assert ran.exit_code == 0, ran.stdout


def _setup(cli: Cli, idle: tuple[Placement, ...]) -> Setup:
    keep = _allocate(cli, "ns/keep", "1g.10gb", KEEP_AT)
    uuids = []
    for n, placement in enumerate(idle):
        uuids.append(_allocate(cli, f"ns/old{n}", "1g.10gb", placement))
        _release(cli, f"ns/old{n}")
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
        assert record.state is RecordState.ACTIVE
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
    assert (keep.state, keep.owner) == (RecordState.ACTIVE, KEEP)
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


def _entries_at(items: list[dict[str, Any]], at: Placement) -> list[dict[str, Any]]:
    return [
        i
        for i in items
        if i["gpuIndex"] == 0
        and (i["placement"]["start"], i["placement"]["size"]) == (at.start, at.size)
    ]


def list_expect_create(
    items: list[dict[str, Any]], snap: Snapshot, at: Placement, profile: str, done: int
) -> None:
    entries = _entries_at(items, at)
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


CREATE_COMMAND = (
    "allocate",
    "--pod",
    "ns/new",
    "--gpu",
    "0",
    "--profile",
    "1g.10gb",
    "--placement",
    str(CREATE_AT.start),
)

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
        expected = RecordState.IDLE if done == 0 else RecordState.RECLAIMING
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
    # The hardware is gone but the Reclaiming record remains: CONTRACT.md's "Missing".
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
        assert now.state is RecordState.ERROR
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
    entries = _entries_at(items, CREATE_AT)
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
    command=lambda _: (
        "allocate",
        "--pod",
        "ns/new",
        "--gpu",
        "0",
        "--profile",
        "2g.20gb",
        "--placement",
        str(PRESSURE_AT.start),
    ),
    steps=_steps(*RECLAIM_OPS, *RECLAIM_OPS, *CREATE_OPS),
    # Both reclaims and the first intent write; the create steps after it are CREATE's.
    crash_steps=tuple(range(11)),
    expect=_pressure_expect,
    list_expect=_list_expect_pressure,
)

SCENARIOS = (CREATE, RECLAIM, RECLAIM_QUEUED, PRESSURE, RECLAIM_DESTROY_FAILS, ROLLBACK)


# --------------------------------------------------------------------------------------------
# The tests


Prepare = Callable[[Scenario], tuple[Cli, Setup]]


@pytest.fixture(scope="module")
def templates() -> dict[str, tuple[Path, Setup]]:
    return {}


@pytest.fixture
def prepare(
    templates: dict[str, tuple[Path, Setup]],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
) -> Prepare:
    """A node set up for `scenario`: built once per scenario, then copied for each test."""

    def make(scenario: Scenario) -> tuple[Cli, Setup]:
        if scenario.name not in templates:
            base = tmp_path_factory.mktemp(f"template-{scenario.name}")
            sim_init(base / "sim" / "node.json", "H100-SXM5-80GB", 2)
            template = Cli(base / "sim" / "node.json", base / "state", base / "cdi")
            setup = _setup(template, scenario.idle)
            templates[scenario.name] = (base, setup)
        base, setup = templates[scenario.name]
        for sub in ("sim", "state", "cdi"):
            shutil.copytree(base / sub, tmp_path / sub)
        cli = Cli(tmp_path / "sim" / "node.json", tmp_path / "state", tmp_path / "cdi")
        assert snapshot(cli) == setup.before
        return cli, setup

    return make


def _fault(cli: Cli, *args: str) -> None:
    ran = cli("sim", "fault", "add", *args)
    assert ran.exit_code == 0, ran.stderr


def _crash_cases() -> list[Any]:
    cases = []
    for scenario in SCENARIOS:
        for index in scenario.crash_steps:
            op, skip = scenario.steps[index]
            for action in ("crash-before", "crash-after"):
                done = index if action == "crash-before" else index + 1
                cases.append(
                    pytest.param(
                        scenario, index, action, done, id=f"{scenario.name}-{op}#{skip}-{action}"
                    )
                )
    return cases


CRASH_CASES = _crash_cases()


def test_the_crash_matrix_covers_every_step() -> None:
    assert len(CRASH_CASES) == 2 * (8 + 5 + 2 + 11 + 1 + 4) == 62
    ops = {scenario.steps[i][0] for scenario in SCENARIOS for i in scenario.crash_steps}
    assert ops == set(MUTATING_NVML) | set(FILE_OPS)


@pytest.mark.parametrize(("scenario", "index", "action", "done"), CRASH_CASES)
def test_crash_leaves_durable_state_that_explains_the_step(
    prepare: Prepare, scenario: Scenario, index: int, action: str, done: int
) -> None:
    cli, setup = prepare(scenario)
    check_invariants(setup.before)
    scenario.expect(setup.before, setup, 0)
    for args in scenario.pre_faults:
        _fault(cli, *args)
    op, skip = scenario.steps[index]
    _fault(cli, "--op", op, "--action", action, "--skip", str(skip))

    ran = run_hamimig(*cli.globals(), "-o", "json", *scenario.command(setup))

    assert ran.returncode == CRASH_EXIT_STATUS, (ran.stdout, ran.stderr)
    assert (ran.stdout, ran.stderr) == ("", "")
    after = snapshot(cli)
    assert after.faults == ()  # the injected fault (and any failing one) fired, nothing else
    check_invariants(after)
    expect_neighbour(after, setup)
    scenario.expect(after, setup, done)

    listed = cli.json("list")
    assert listed.exit_code == 0, listed.stdout
    doc = listed.json()
    assert (doc["kind"], doc["warnings"]) == ("InstanceList", [])
    items: list[dict[str, Any]] = doc["instances"]
    keep = [i for i in items if i["migUUID"] == setup.keep.mig_uuid]
    assert [(i["state"], i["owner"]["name"]) for i in keep] == [("Active", "keep")]
    scenario.list_expect(items, after, setup, done)


def test_list_shows_one_entry_per_instance_after_record_write(cli: Cli) -> None:
    _allocate(cli, "ns/keep", "1g.10gb", KEEP_AT)
    _fault(cli, "--op", "record.write", "--action", "crash-after")
    ran = run_hamimig(*cli.globals(), "-o", "json", *CREATE_COMMAND)
    assert ran.returncode == CRASH_EXIT_STATUS
    after = snapshot(cli)
    gi = after.gi_at(0, CREATE_AT)
    assert gi is not None
    listed = cli.json("list")
    assert listed.exit_code == 0
    entries = _entries_at(listed.json()["instances"], CREATE_AT)
    # One instance, one entry; an intent still exists, so the allocation is still in flight.
    assert [(e["state"], e["migUUID"], e["gpuInstanceID"]) for e in entries] == [
        ("Creating", gi.cis[0][1], gi.id)
    ]


def test_show_agrees_with_list_on_a_half_destroyed_instance(prepare: Prepare) -> None:
    cli, setup = prepare(RECLAIM)
    (record,) = setup.idle
    _fault(cli, "--op", DESTROY_CI, "--action", "crash-after")
    ran = run_hamimig(*cli.globals(), "reclaim", "--mig-uuid", record.mig_uuid)
    assert ran.returncode == CRASH_EXIT_STATUS
    listed = [i for i in cli.json("list").json()["instances"] if i["migUUID"] == record.mig_uuid]
    assert [i["state"] for i in listed] == ["Reclaiming"]
    shown = cli.json("show", record.mig_uuid)
    assert shown.exit_code == 0
    doc = shown.json()
    assert (doc["state"], doc["gpuInstanceID"], doc["gpuIndex"]) == (
        "Reclaiming",
        record.gpu_instance_id,
        0,
    )


def _count_file_ops(cli: Cli, skip: frozenset[str]) -> None:
    for op in FILE_OPS:
        if op not in skip:
            _fault(cli, "--op", op, "--action", "raise", "--skip", str(COUNTING_SKIP))


def _counted(before: Snapshot, after: Snapshot, skip: frozenset[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for op in MUTATING_NVML:
        n = after.calls.get(op, 0) - before.calls.get(op, 0)
        if n:
            counts[op] = n
    remaining = {f["op"]: f["skip"] for f in after.faults}
    for op in FILE_OPS:
        if op in skip:
            continue
        n = COUNTING_SKIP - remaining[op]
        if n:
            counts[op] = n
    return counts


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_clean_run_makes_exactly_the_enumerated_steps(prepare: Prepare, scenario: Scenario) -> None:
    cli, setup = prepare(scenario)
    failing = frozenset(args[1] for args in scenario.pre_faults)
    for args in scenario.pre_faults:
        _fault(cli, *args)
    _count_file_ops(cli, failing)
    before = snapshot(cli)

    ran = run_hamimig(*cli.globals(), "-o", "json", *scenario.command(setup))

    assert ran.returncode == scenario.clean_exit, (ran.stdout, ran.stderr)
    assert ran.stderr == ""
    kinds = {"allocate": "Allocation", "reclaim": "Reclaim"}
    kind = json.loads(ran.stdout)["kind"]
    assert kind == ("Error" if scenario.clean_exit else kinds[scenario.command(setup)[0]])
    after = snapshot(cli)
    assert _counted(before, after, failing) == Counter(op for op, _ in scenario.steps)
    check_invariants(after)
    expect_neighbour(after, setup)
    scenario.expect(after, setup, len(scenario.steps))


def test_counting_faults_count(cli: Cli) -> None:
    """The counting trick above: a `raise` fault with a large skip only counts calls."""
    _count_file_ops(cli, frozenset())
    before = snapshot(cli)
    _allocate(cli, "ns/keep", "1g.10gb", KEEP_AT)
    after = snapshot(cli)
    assert _counted(before, after, frozenset()) == Counter(op for op, _ in CREATE.steps)
