"""reconcile's idle pass: which Idle instances the idle policy evicts, as steps of the pass.

The rules (who goes first, what counts toward the cap, where an idle age comes from) are pure
functions in `idle_policy`; this module gathers the facts they judge: the Idle records checked
against their GPU's layout, processes, the pods that hold or reserve an instance, allocations in
flight, the idle-seen times, and the node's clock. What it plans the executor applies as any
other reclaim, in the same pass and under the same lock (docs/formats.md "Config").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hamimig.durations import format_duration
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
from hamimig.engine.plans import holding_pods
from hamimig.engine.podsource import changed_after
from hamimig.engine.results import Warning_
from hamimig.engine.steps import Managed, Plan, Where
from hamimig.errors import HamimigError
from hamimig.hw.types import Gpu, MigHardware, Placement
from hamimig.store.records import Record
from hamimig.vocabulary import ActionKind

if TYPE_CHECKING:
    from hamimig.pods.sources import PodSnapshot

MAX_POD_LIST_AGE = 300
"""Seconds: an older pod list may miss a pod that HAMi's plugin handed an Idle instance to, and
that hand-out changes no record, so nothing else would show it."""


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
    age = now - pods.taken_at
    if pods.taken_at <= 0 or age > MAX_POD_LIST_AGE:
        taken = "at an unknown time" if pods.taken_at <= 0 else f"{format_duration(age)} ago"
        notes.append(
            f"idle policy ({policy}) not applied: the pod list from {pods.source} was taken "
            f"{taken}; an Idle instance HAMi's plugin has handed out since would not show "
            f"(at most {format_duration(MAX_POD_LIST_AGE)} old)"
        )
        return None
    seen, problem = node.idle_seen().load()
    if problem is not None:
        reason = f"{problem.reason}; the idle clocks of HAMi's own records start again"
        plan.warnings.append(Warning_(problem.file, reason))
    holds = _pod_holds(pods)
    in_flight = [(i.gpu_uuid, i.placement) for i in durable.intents]
    joining: dict[str, int] = {}
    for step in plan.steps:
        if step.kind is ActionKind.RELEASE_IDLE and isinstance(step.target, Managed):
            released = step.target.record
            if released.mig_uuid in holds or (released.gpu_uuid, released.placement) in holds:
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


def _pod_holds(pods: PodSnapshot) -> dict[object, str]:
    """What the pods that hold allocations name: MIG UUIDs (the plugin handed the instance
    out) and GPU slots (every entry has one; without a runtime identity yet, the scheduler
    reserved the slot and the plugin will reuse the Idle instance there)."""
    holds: dict[object, str] = {}
    for pod in holding_pods(pods):
        for alloc in pod.allocations:
            slot = (alloc.gpu_uuid, alloc.placement)
            if alloc.mig_uuid is not None:
                holds[alloc.mig_uuid] = f"pod {pod.key}'s allocation annotation names it"
                holds.setdefault(slot, f"pod {pod.key}'s allocation annotation names its slot")
            else:
                holds[slot] = f"pod {pod.key}'s allocation annotation reserves its slot"
    return holds


def _kept_because(
    hw: MigHardware,
    record: Record,
    live: LiveCheck,
    holds: dict[object, str],
    in_flight: list[tuple[str, Placement]],
    pods: PodSnapshot,
) -> str | None:
    """Why the policy must leave an Idle instance alone (None: it may go)."""
    held = holds.get(record.mig_uuid) or holds.get((record.gpu_uuid, record.placement))
    if held is not None:
        return held
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
