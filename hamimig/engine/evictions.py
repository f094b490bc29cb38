"""reconcile's idle pass: which Idle instances the idle policy evicts, as steps of the pass.

The rules (who goes first, what counts toward the cap, where an idle age comes from) are pure
functions in `idle_policy`; this module gathers the facts they judge: the Idle records checked
against their GPU's layout, processes, the pods that hold or reserve an instance, allocations in
flight, the idle-seen times, and the node's clock. What it plans the executor applies as any
other reclaim, in the same pass and under the same lock (docs/formats.md "Config").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hamimig.engine.facts import (
    BUSY,
    Durable,
    LiveCheck,
    Liveness,
    check_record,
    has_processes,
    profile_names,
)
from hamimig.engine.idle_policy import (
    Candidate,
    IdlePolicy,
    decide,
    idle_age_of,
    idle_records,
    seen_after,
)
from hamimig.engine.node import Node
from hamimig.engine.plans import PodHolds
from hamimig.engine.podsource import changed_after, stale
from hamimig.engine.results import Warning_
from hamimig.engine.steps import Managed, Plan, Where
from hamimig.errors import HamimigError
from hamimig.hw.types import Gpu, MigHardware, Placement
from hamimig.store.records import Record
from hamimig.vocabulary import ActionKind

if TYPE_CHECKING:
    from hamimig.pods.sources import PodSnapshot


def plan_idle_policy(
    plan: Plan,
    node: Node,
    durable: Durable,
    pods: PodSnapshot,
    policy: IdlePolicy,
    notes: list[str],
) -> dict[str, str] | None:
    """Add the idle policy's evictions to `plan`, after its other steps. Returns the idle-seen
    map to save when it changed (None: as it is); says in `notes` why it did nothing at all.

    Every Idle record is checked against its GPU's layout and for processes, and a pod's
    annotation naming it or reserving its slot keeps it: none of those is evicted or counted.
    """
    hw = node.hardware()
    now = node.now()
    too_old = stale(node, pods)
    if too_old is not None:
        notes.append(f"idle policy ({policy}) not applied: {too_old}")
        return None
    seen, problem = node.idle_seen().load()
    if problem is not None:
        reason = f"{problem.reason}; the idle clocks of HAMi's own records start again"
        plan.warnings.append(Warning_(problem.file, reason))
    holds = PodHolds.of(pods)
    in_flight = [(i.gpu_uuid, i.placement) for i in durable.intents]
    joining: dict[str, int] = {}
    for step in plan.steps:
        if step.kind is ActionKind.RELEASE_IDLE and isinstance(step.target, Managed):
            released = step.target.record
            if holds.hold(released) is not None:
                continue  # a pod holds it after all: it will not be waiting for anyone
            joining[released.gpu_uuid] = joining.get(released.gpu_uuid, 0) + 1
    by_gpu: dict[str, list[Record]] = {}
    for record in idle_records(durable.records.values()):
        by_gpu.setdefault(record.gpu_uuid, []).append(record)
    looked: list[tuple[Gpu, list[Record], dict[str, LiveCheck]]] = []
    kept: dict[str, str | None] = {}
    for gpu_uuid in sorted(by_gpu):
        try:
            gpu = hw.gpu_by_uuid(gpu_uuid)
        except HamimigError:
            continue  # its GPU is gone: recover's business, as for the spec refresh
        try:
            layout = hw.layout(gpu.index)
        except HamimigError as exc:
            plan.failures.append(f"idle policy: GPU {gpu.index}: {exc.message}")
            continue
        names = profile_names(node, gpu, layout)
        lives = {r.mig_uuid: check_record(r, layout, names) for r in by_gpu[gpu_uuid]}
        for r in by_gpu[gpu_uuid]:
            kept[r.mig_uuid] = _kept_because(hw, r, lives[r.mig_uuid], holds, in_flight, pods)
        looked.append((gpu, by_gpu[gpu_uuid], lives))
    # A pod or a process holding one of HAMi's records stops its clock; in flight does not.
    unheld = {u for u, why in kept.items() if why is None or why == _IN_FLIGHT}
    new_seen = seen_after(seen, durable.records.values(), unheld, node.clock())
    evicted: set[str] = set()
    for gpu, records, lives in looked:
        candidates = [Candidate(r, idle_age_of(r, new_seen), kept[r.mig_uuid]) for r in records]
        for decision in decide(policy, now, gpu.index, candidates, joining.get(gpu.uuid, 0)):
            record = decision.candidate.record
            reason = f"idle policy: {decision.reason}"
            if decision.evict:
                target = Managed(record, lives[record.mig_uuid], gpu.index)
                plan.add(ActionKind.EVICT_IDLE, target, reason)
                evicted.add(record.mig_uuid)
            else:
                at = Where(record.mig_uuid, gpu.uuid, record.placement)
                plan.add(ActionKind.SKIP, at, reason)
    # A spec about to go with its instance is not worth rewriting first.
    plan.steps = [
        s for s in plan.steps if not (s.kind is ActionKind.REPAIR_CDI and s.mig_uuid in evicted)
    ]
    return new_seen if new_seen != seen or problem is not None else None


_IN_FLIGHT = "an allocation is in flight on its slices"


def _kept_because(
    hw: MigHardware,
    record: Record,
    live: LiveCheck,
    holds: PodHolds,
    in_flight: list[tuple[str, Placement]],
    pods: PodSnapshot,
) -> str | None:
    """Why the policy must leave an Idle instance alone (None: it may go)."""
    held = holds.hold(record)
    if held is not None:
        return held.reason
    newer = changed_after(record, pods)
    if newer:
        return newer.removesuffix("; left as it is")
    if live.status is not Liveness.COMPLETE:
        return f"it does not match the hardware ({live.detail}): run 'hamimig recover'"
    if has_processes(hw, record.mig_uuid):
        return BUSY
    if any(g == record.gpu_uuid and p.overlaps(record.placement) for g, p in in_flight):
        return _IN_FLIGHT
    return None
