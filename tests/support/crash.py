"""Reading a node after a crash (kill -9 in the middle of a command), and the invariants every
crash point must keep (docs/design.md "Crash safety"): every live GI/CI hamimig made is named by
a record or covered by an intent, every record explains its instance, no CDI spec is without a
reason to exist, no two instances overlap. The crash suites (allocate and reclaim, recover, the
concurrency test) judge every durable state they reach with `check_invariants`.

It also holds the suites' way of counting file operations: a `raise` fault that would fire only
after COUNTING_SKIP calls never fires, and what is left of its skip counts the calls made."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from hamimig.hw.types import Placement
from hamimig.rehearsal.simulator import sim_fault_add
from hamimig.sim.models import MODELS
from hamimig.sim.state import DURABLE_OPS
from hamimig.store.cdi import spec_file_name
from hamimig.store.intents import Intent, IntentStore
from hamimig.store.queue import QUEUE_NAME, RemovalQueue
from hamimig.store.records import Record, RecordStore, record_name
from hamimig.vocabulary import State
from tests.support.cli import Cli
from tests.support.node import sim_state
from tests.support.nvml import MUTATING_NVML

COUNTING_SKIP = 10_000
"""The skip of a counting fault: more calls than any command makes."""


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
        and n not in (QUEUE_NAME, "hamimig.lock", "counters.json", "events.jsonl")
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
        if record.state in (State.ACTIVE, State.IDLE):
            assert complete, f"{record.state.value} record {record.mig_uuid} is not live"
            assert (record.owner is not None) == (record.state is State.ACTIVE)
        else:
            assert record.state in (State.RECLAIMING, State.ERROR), record
            assert record.owner is None
            assert (record.error is not None) == (record.state is State.ERROR)
    # (c) a spec only for an instance that is live and tracked, being reclaimed or in Error,
    # queued, or named by an intent; and every Active, Idle and Error instance has its spec
    allowed = (
        {u for u in snap.live_uuids() if u in snap.records}
        | {u for u, r in snap.records.items() if r.state in (State.RECLAIMING, State.ERROR)}
        | set(snap.queued)
        | {i.mig_uuid for i in snap.intents if i.mig_uuid is not None}
    )
    assert snap.specs <= {spec_file_name(u) for u in allowed}, "a CDI spec nobody explains"
    for u, r in snap.records.items():
        if r.state in (State.ACTIVE, State.IDLE, State.ERROR):
            assert snap.has_spec(u), f"{r.state.value} {u} has no CDI spec"
    # a removal is queued only once the hardware is gone
    assert set(snap.queued).isdisjoint(snap.live_uuids())
    for intent in snap.intents:
        assert intent.op == "allocate"


def count_file_ops(cli: Cli, skip: frozenset[str] = frozenset()) -> None:
    """Arm a counting fault (see the module's docstring) on every file operation but `skip`."""
    for op in DURABLE_OPS:
        if op not in skip:
            sim_fault_add(cli.sim, op, None, "raise", 1, COUNTING_SKIP, None)


def counted(before: Snapshot, after: Snapshot, skip: frozenset[str] = frozenset()) -> Counter[str]:
    """The mutating NVML calls and file operations (`skip` aside) made between two snapshots."""
    counts: Counter[str] = Counter()
    for op in MUTATING_NVML:
        n = after.calls.get(op, 0) - before.calls.get(op, 0)
        if n:
            counts[op] = n
    remaining = {f["op"]: f["skip"] for f in after.faults}
    for op in DURABLE_OPS:
        if op in skip:
            continue
        n = COUNTING_SKIP - remaining[op]
        if n:
            counts[op] = n
    return counts
