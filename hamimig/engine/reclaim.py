"""`reclaim`: destroying Idle and Error instances on request (by MIG UUID, on a GPU, in a
placement window, or older than an age), never Active ones, never anything without a record,
never one a pod's annotation claims or one with processes.
"""

from __future__ import annotations

from hamimig.engine import validate
from hamimig.engine.executor import tidy_finished
from hamimig.engine.facts import (
    BUSY,
    Durable,
    GpuFacts,
    LiveCheck,
    Liveness,
    check_record,
    has_processes,
    load_for_mutation,
    moved,
)
from hamimig.engine.idle_policy import idle_age_of, idle_records
from hamimig.engine.lookup import check_reference
from hamimig.engine.node import Node, resolve_gpu
from hamimig.engine.ownership import PodHolds
from hamimig.engine.placement import blocking_instance, record_of
from hamimig.engine.podsource import PodSource, load_fresh
from hamimig.engine.release import execute_each, resolved
from hamimig.engine.requests import AllIdle, ByUuid, IdleOlderThan, ReclaimTarget, Window
from hamimig.engine.results import (
    Blocked,
    BlockingInstance,
    Reclaim,
    SkippedInstance,
    record_view,
)
from hamimig.engine.steps import Managed, Plan, Step
from hamimig.errors import NOTHING_CHANGED, ConflictError, NotFoundError, UnverifiableError
from hamimig.hw.types import Placement
from hamimig.store.intents import Intent
from hamimig.store.records import Record
from hamimig.vocabulary import ActionKind, Outcome, State

_DESTROYABLE = (State.IDLE, State.ERROR, State.RECLAIMING)


def reclaim(node: Node, target: ReclaimTarget, source: PodSource, dry_run: bool) -> Reclaim:
    """Destroy Idle (or Error) instances; never Active, never anything without a record, never
    one a pod's annotation claims. A dry run reads without the node lock."""
    if isinstance(target, ByUuid):
        check_reference(target.mig_uuid, mutating=True)
    with node.lock_unless(dry_run):
        durable = load_for_mutation(node, tidy=not dry_run, dry_run=dry_run)
        holds = PodHolds.of(load_fresh(node, source))
        if isinstance(target, ByUuid):
            target = resolved(node, target, durable)
        notes: list[str] = []
        plan, skipped = plan_reclaim(node, durable, target, notes, holds)
        if dry_run:
            done = tuple(
                record_view(s.target.record, s.target.gpu_index).with_outcome(Outcome.RECLAIMED)
                for s in plan.steps
                if isinstance(s.target, Managed)
            )
        else:
            done = execute_each(node, plan, Outcome.RECLAIMED, notes)
            tidy_finished(node, durable)
        return Reclaim(
            dry_run=dry_run,
            reclaimed=done,
            notes=tuple(notes),
            skipped=skipped,
            warnings=durable.warnings,
        )


def plan_reclaim(
    node: Node, durable: Durable, target: ReclaimTarget, notes: list[str], holds: PodHolds
) -> tuple[Plan, tuple[SkippedInstance, ...]]:
    """The instances to destroy, oldest first, and those passed over (a pod's annotation
    claims it, or processes run on it), which refuse a reclaim by MIG UUID (exit 3). A plan of
    several goes on past a failed step, one of one aborts."""
    if isinstance(target, ByUuid):
        one, targets = target.mig_uuid, _targets_by_uuid(node, durable, target.mig_uuid)
    else:
        one, targets = None, _targets_on_gpu(node, durable, target, notes, holds)
    held = [(t, hold) for t in targets if (hold := holds.hold(t.record)) is not None]
    if one is not None and held:
        hold = held[0][1]
        raise ConflictError(
            f"{one} is {hold.brief} ({hold.reason}): hamimig never reclaims an instance a pod holds"
        )
    claimed = {t.record.mig_uuid for t, _ in held}
    busy = [t for t in targets if t.record.mig_uuid not in claimed and is_running(node, t)]
    if one is not None and busy:
        raise ConflictError(f"{one} is busy: processes run on it; hamimig never reclaims it")
    skipped = [(t, hold.reason) for t, hold in held] + [(t, BUSY) for t in busy]
    steps = [
        Step(ActionKind.RECLAIM, t, "requested")
        for t in targets
        if t not in busy and t.record.mig_uuid not in claimed
    ]
    passed = (SkippedInstance(mig_uuid=t.record.mig_uuid, reason=why) for t, why in skipped)
    return Plan(steps, abort=len(steps) == 1), tuple(passed)


def _targets_on_gpu(
    node: Node,
    durable: Durable,
    target: Window | AllIdle | IdleOlderThan,
    notes: list[str],
    holds: PodHolds,
) -> list[Managed]:
    hw = node.hardware()
    gpu = resolve_gpu(hw, target.gpu)
    facts = GpuFacts.named(hw, gpu, hw.layout(gpu.index))
    records = durable.on_gpu(gpu.uuid)
    if isinstance(target, AllIdle):
        chosen = [r for r in records if r.state in _DESTROYABLE]
    elif isinstance(target, IdleOlderThan):
        chosen = _idle_older_than(node, records, target.seconds, notes)
    else:
        slices = validate.slice_count(hw.profiles(gpu.index))
        window = validate.reclaim_window(target.placement, slices)
        in_flight = [i for i in durable.intents if i.gpu_uuid == gpu.uuid]
        chosen = _window_targets(window, records, facts, in_flight, holds)
    targets = [verified(node, r, facts) for r in chosen]
    return sorted(targets, key=lambda t: (t.record.updated_at or "", t.record.mig_uuid))


def _idle_older_than(
    node: Node, records: list[Record], seconds: int, notes: list[str]
) -> list[Record]:
    """Idle records idle longer than `seconds` by the idle policy's clock. The idle-seen file
    is only read: a record HAMi wrote that no policy pass has seen unheld has no age yet."""
    seen, _ = node.idle_seen.load()
    now = node.now()
    chosen, unknown = [], 0
    for record in idle_records(records):
        since = idle_age_of(record, seen).since
        if since is None:
            unknown += 1
        elif now - since > seconds:
            chosen.append(record)
    if unknown:
        notes.append(
            f"{unknown} Idle instance(s) on this GPU have no idle age yet (records HAMi wrote "
            "get one at the first 'hamimig reconcile' with pods that sees them unheld); kept"
        )
    return chosen


def verified(node: Node, record: Record, gpu: GpuFacts) -> Managed:
    """The record checked against its GPU's layout; one whose instance is gone or lost its CI
    there must not be live on another GPU either (one NVML call: its MIG UUID not found), or
    the GI at its placement is not its own to destroy."""
    live = check_record(record, gpu.layout, gpu.names)
    if live.status in (Liveness.ABSENT, Liveness.GI_ONLY):
        hw = node.hardware()
        dev = hw.mig_device(record.mig_uuid)
        if dev is not None:
            name = hw.profile_name(dev.gpu_index, dev.profile_id) or f"profile {dev.profile_id}"
            at = (dev.gpu_uuid, dev.placement, name, dev.gpu_instance_id, dev.compute_instance_id)
            live = LiveCheck(Liveness.MISMATCH, moved(record, *at) or "its MIG UUID is live")
    if live.status is Liveness.MISMATCH:
        raise UnverifiableError(f"{record.mig_uuid}: {live.detail}; {NOTHING_CHANGED}")
    if live.status is not Liveness.COMPLETE and record.state is State.IDLE:
        raise UnverifiableError(
            f"Idle record {record.mig_uuid} does not match the hardware ({live.detail}); "
            f"run 'hamimig recover'; {NOTHING_CHANGED}"
        )
    return Managed(record, live, gpu.gpu.index)


def is_running(node: Node, target: Managed) -> bool:
    """Only a live instance can have processes; a GI whose CI is gone has no MIG device."""
    if target.live is None or target.live.status is not Liveness.COMPLETE:
        return False
    return has_processes(node.hardware(), target.record.mig_uuid)


def _targets_by_uuid(node: Node, durable: Durable, mig_uuid: str) -> list[Managed]:
    hw = node.hardware()
    record = durable.records.get(mig_uuid)
    if record is None:
        if hw.mig_device(mig_uuid) is not None:
            raise ConflictError(
                f"{mig_uuid} has no hamimig record (Unmanaged): hamimig never reclaims it"
            )
        raise NotFoundError(f"no MIG instance {mig_uuid} on this node and no record of it")
    if record.state is State.ACTIVE:
        owner = f" (held by {record.owner})" if record.owner else ""
        raise ConflictError(f"{mig_uuid} is Active{owner}: hamimig never reclaims it")
    gpu = hw.gpu_by_uuid(record.gpu_uuid)
    return [verified(node, record, GpuFacts.named(hw, gpu, hw.layout(gpu.index)))]


def _window_targets(
    window: Placement,
    records: list[Record],
    gpu: GpuFacts,
    in_flight: list[Intent],
    holds: PodHolds,
) -> list[Record]:
    """Idle/Error records overlapping the window; refuse if anything else is live there, or a
    pod's annotation claims one of them."""
    chosen = [r for r in records if r.placement.overlaps(window) and r.state in _DESTROYABLE]
    owned = {(r.gpu_instance_id, r.placement) for r in chosen if holds.hold(r) is None}
    blocked: list[BlockingInstance] = []
    for gi in gpu.layout:
        if not gi.placement.overlaps(window) or (gi.id, gi.placement) in owned:
            continue
        record = record_of(gi, records)
        held = holds.hold(record) if record is not None else None
        found = blocking_instance(gi, record, gpu.names, held=held)
        intent = next((i for i in in_flight if i.placement == gi.placement), None)
        if record is None and intent is not None:
            # An allocation in flight (or interrupted: recover rolls it back), not an orphan.
            found = found.model_copy(update={"state": State.CREATING, "owner": intent.owner})
        blocked.append(found)
    if blocked:
        raise ConflictError(
            f"slices {window} hold instances hamimig never reclaims: "
            + "; ".join(b.describe() for b in blocked),
            blockers=(Blocked(placement=window, instances=tuple(blocked)),),
        )
    return chosen
