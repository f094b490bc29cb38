"""`release`, `reclaim` and `reconcile`: moving instances to Idle, destroying Idle and Error
instances on request, and the retry pass for what failed before.

Each is a planner over one snapshot taken under the node lock (a dry run's without it);
`executor` applies its steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from hamimig.engine import validate
from hamimig.engine.executor import Applied, DestroyFailed, execute, tidy_finished
from hamimig.engine.facts import (
    BUSY,
    Durable,
    LiveCheck,
    Liveness,
    cdi_device_for,
    check_live,
    check_record,
    has_processes,
    load_for_mutation,
    moved,
    profile_names,
)
from hamimig.engine.idle_policy import IdlePolicy, idle_age_of, idle_records, plan_idle_policy
from hamimig.engine.lookup import check_reference, resolve_instance
from hamimig.engine.node import Node, resolve_gpu
from hamimig.engine.ownership import PodHolds, holding_pods, owned_by, same_uid
from hamimig.engine.placement import blocking_instance, record_of
from hamimig.engine.podsource import PodSource, changed_after, load_fresh, stale, stale_warning
from hamimig.engine.recovery import plan_queued_removals
from hamimig.engine.requests import (
    AllIdle,
    ByPod,
    ByUuid,
    IdleOlderThan,
    ReclaimTarget,
    ReleaseTarget,
    Window,
)
from hamimig.engine.results import (
    ActionReport,
    Blocked,
    BlockingInstance,
    InstanceView,
    Reclaim,
    Release,
    SkippedInstance,
    Warning_,
    record_view,
)
from hamimig.engine.steps import Managed, Plan, Spec, Step, Where
from hamimig.errors import (
    NOTHING_CHANGED,
    ConflictError,
    HamimigError,
    NotFoundError,
    UnverifiableError,
    UsageError,
)
from hamimig.hw.types import Gpu, GpuInstance, Placement
from hamimig.store.cdi import CdiStore
from hamimig.store.counters import LAST_RECONCILE
from hamimig.store.intents import Intent
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import ActionKind, Outcome, State

if TYPE_CHECKING:
    from hamimig.pods.model import Pod
    from hamimig.pods.sources import PodSnapshot

_DESTROYABLE = (State.IDLE, State.ERROR, State.RECLAIMING)


def _resolved(node: Node, target: ByUuid, durable: Durable) -> ByUuid:
    """The instance a MIG UUID, a prefix of one or its CDI device name names (see `lookup`);
    called under the node lock, after the durable state is loaded."""
    mig_uuid = resolve_instance(node, target.mig_uuid, True, durable.records, durable.intents)
    return target if mig_uuid == target.mig_uuid else ByUuid(mig_uuid)


def _index_hint(record: Record) -> int:
    return record.gpu_index if record.gpu_index is not None else -1


# --------------------------------------------------------------------------------------------
# release


def release(node: Node, target: ReleaseTarget, dry_run: bool = False) -> Release:
    """Confirmed pod release: Active -> Idle. The GI/CI and CDI spec stay for reuse.

    Releasing what is already released changes nothing and says so (outcome unchanged): an
    Idle instance by MIG UUID, or a pod none of whose instances is Active any more but whose
    last holder an Idle record names (`last_owner`).

    A dry run plans the same steps without the lock and shows each instance as it would be
    (Idle, no owner)."""
    if isinstance(target, ByUuid):
        check_reference(target.mig_uuid, mutating=True)
    with node.lock_unless(dry_run):
        durable = load_for_mutation(node, tidy=not dry_run, dry_run=dry_run)
        if isinstance(target, ByUuid):
            target = _resolved(node, target, durable)
        if already := _released_before(durable, target):
            views = tuple(
                record_view(r, _index_hint(r)).with_outcome(Outcome.UNCHANGED) for r in already
            )
        elif dry_run:
            steps, now = plan_release(durable, target).steps, node.clock()
            views = tuple(_would_be_idle(s, now) for s in steps)
        else:
            views = _each(node, plan_release(durable, target), _released)
            tidy_finished(node, durable)
        return Release(released=views, dry_run=dry_run, warnings=durable.warnings)


def _released_before(durable: Durable, target: ReleaseTarget) -> list[Record]:
    """What a release finds released already: an Idle instance by MIG UUID, or the Idle
    instances a pod with nothing Active any more last held."""
    if isinstance(target, ByUuid):
        record = durable.records.get(target.mig_uuid)
        return [record] if record is not None and record.state is State.IDLE else []
    active, released_before = pod_records(durable, target)
    return [] if active else released_before


def _each(
    node: Node,
    plan: Plan,
    shown: Callable[[Managed, Record | None], InstanceView],
    notes: list[str] | None = None,
) -> tuple[InstanceView, ...]:
    """Execute a plan of independent steps (one per instance), each instance `shown` from its
    target and the record its step left. One the hardware or the disk refuses is shown
    `failed` with the error, as that step left it, while the others still run (a plan of
    several goes on past a failed step): what did happen is reported, never lost behind the
    error (the result exits 4). A plan of one aborts: its step fails as the command does."""
    out: list[InstanceView] = []
    done = execute(node, plan, dry_run=False)
    for step, result in zip(plan.steps, done.results, strict=True):
        assert isinstance(step.target, Managed)
        if isinstance(result, Applied):
            if result.note and notes is not None:
                notes.append(result.note)
            out.append(shown(step.target, result.record))
            continue
        left = result.record if isinstance(result, DestroyFailed) else step.target.record
        why = result.message if isinstance(result, HamimigError) else f"I/O error: {result}"
        out.append(record_view(left, _index_hint(left)).failed(why))
    return tuple(out)


def _released(target: Managed, idle: Record | None) -> InstanceView:
    assert idle is not None
    return record_view(idle, _index_hint(idle)).with_outcome(Outcome.RELEASED)


def _reclaimed(target: Managed, _: Record | None) -> InstanceView:
    """Shown as the Idle (or Error) instance it was."""
    return record_view(target.record, target.gpu_index).with_outcome(Outcome.RECLAIMED)


def _would_be_idle(step: Step, now: str) -> InstanceView:
    """The instance as the release would leave it: Idle, no owner, its idle clock started."""
    assert isinstance(step.target, Managed)
    before = step.target.record
    record = dataclasses.replace(before, owner=None, idle_since=now, last_owner=before.owner)
    view = record_view(record, _index_hint(record), state=State.IDLE)
    return view.with_outcome(Outcome.RELEASED)


def plan_release(durable: Durable, target: ReleaseTarget) -> Plan:
    """The Active instances a pod (or one MIG UUID) releases, in MIG UUID order; a plan of
    several goes on past a failed step, one of one aborts."""
    if isinstance(target, ByUuid):
        mig_uuid = target.mig_uuid
        record = durable.records.get(mig_uuid)
        if record is None:
            raise NotFoundError(f"no hamimig record for {mig_uuid}")
        if record.state is not State.ACTIVE:
            raise ConflictError(
                f"{mig_uuid} is {record.state.value}, not Active: nothing to release"
            )
        targets = [record]
    else:
        targets, released_before = pod_records(durable, target)
        if not targets and not released_before:
            uid = f" with UID {target.uid}" if target.uid is not None else ""
            raise NotFoundError(f"pod {target}{uid} holds no MIG instance on this node")
    steps = [
        Step(ActionKind.RELEASE, Managed(r, None, _index_hint(r)), "confirmed pod release")
        for r in sorted(targets, key=lambda r: r.mig_uuid)
    ]
    return Plan(steps, abort=len(steps) == 1)


def pod_records(durable: Durable, target: ByPod) -> tuple[list[Record], list[Record]]:
    """The Active records a pod holds, and the Idle records it last held (`last_owner`), in
    MIG UUID order; with the target's UID, only those of that incarnation (a record without a
    UID may be any incarnation's, as `same_uid` says).

    A pod recreated under the same name is another owner: when what could be the pod's
    carries more than one identity (different UIDs, or a UID and none) and something of it is
    still Active, which incarnation is meant cannot be known, so nothing is released (a
    usage error naming the UIDs, as an ambiguous MIG UUID prefix is). Without anything
    Active a release changes nothing whichever is meant."""

    def names_it(owner: Owner | None) -> bool:
        return (
            owner is not None
            and (owner.namespace, owner.name) == (target.namespace, target.name)
            and same_uid(owner.uid, target.uid)
        )

    records = sorted(durable.records.values(), key=lambda r: r.mig_uuid)
    active = [r for r in records if r.state is State.ACTIVE and names_it(r.owner)]
    before = [r for r in records if r.state is State.IDLE and names_it(r.last_owner)]
    holders = [(r.owner, "Active") for r in active] + [(r.last_owner, "Idle") for r in before]
    uids = sorted({(o.uid or "").lower() for o, _ in holders if o is not None})
    if active and len(uids) > 1:
        shown = ", ".join(_incarnation(uid, holders) for uid in uids)
        raise UsageError(
            f"pod {target} names more than one incarnation here ({shown}): say which by its "
            f"pod UID, or release one instance by its MIG UUID; {NOTHING_CHANGED}"
        )
    return active, before


def _incarnation(uid: str, holders: list[tuple[Owner | None, str]]) -> str:
    """One incarnation as an ambiguity shows it: `UID 1f0c… (Active)`, `no UID (Idle)`."""
    states = sorted(
        {state for o, state in holders if o is not None and (o.uid or "").lower() == uid}
    )
    return f"{'UID ' + uid if uid else 'no UID'} ({', '.join(states)})"


# --------------------------------------------------------------------------------------------
# reclaim


def reclaim(node: Node, target: ReclaimTarget, source: PodSource, dry_run: bool) -> Reclaim:
    """Destroy Idle (or Error) instances; never Active, never anything without a record, never
    one a pod's annotation claims. A dry run reads without the node lock."""
    if isinstance(target, ByUuid):
        check_reference(target.mig_uuid, mutating=True)
    with node.lock_unless(dry_run):
        durable = load_for_mutation(node, tidy=not dry_run, dry_run=dry_run)
        holds = PodHolds.of(load_fresh(node, source))
        if isinstance(target, ByUuid):
            target = _resolved(node, target, durable)
        notes: list[str] = []
        plan, skipped = plan_reclaim(node, durable, target, notes, holds)
        if dry_run:
            done = tuple(
                _reclaimed(s.target, None) for s in plan.steps if isinstance(s.target, Managed)
            )
        else:
            done = _each(node, plan, _reclaimed, notes)
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
    one = target.mig_uuid if isinstance(target, ByUuid) else None
    if isinstance(target, ByUuid):
        targets = _targets_by_uuid(node, durable, target.mig_uuid)
    else:
        targets = _targets_on_gpu(node, durable, target, notes, holds)
    held = [(t, hold) for t in targets if (hold := holds.hold(t.record)) is not None]
    if one is not None and held:
        hold = held[0][1]
        raise ConflictError(
            f"{one} is {hold.brief} ({hold.reason}): hamimig never reclaims an instance a pod holds"
        )
    claimed = {t.record.mig_uuid for t, _ in held}
    busy = [t for t in targets if t.record.mig_uuid not in claimed and _busy(node, t)]
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
    layout = hw.layout(gpu.index)
    names = profile_names(node, gpu, layout)
    records = durable.on_gpu(gpu.uuid)
    if isinstance(target, AllIdle):
        chosen = [r for r in records if r.state in _DESTROYABLE]
    elif isinstance(target, IdleOlderThan):
        chosen = _idle_older_than(node, records, target.seconds, notes)
    else:
        slices = validate.slice_count(hw.profiles(gpu.index))
        window = validate.reclaim_window(target.placement, slices)
        in_flight = [i for i in durable.intents if i.gpu_uuid == gpu.uuid]
        chosen = _window_targets(window, records, layout, names, in_flight, holds)
    targets = [_verified(node, r, layout, names, gpu) for r in chosen]
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


def _verified(
    node: Node, record: Record, layout: tuple[GpuInstance, ...], names: dict[int, str], gpu: Gpu
) -> Managed:
    """The record checked against its GPU's layout; one whose instance is gone or lost its CI
    there must not be live on another GPU either (one NVML call: its MIG UUID not found), or
    the GI at its placement is not its own to destroy."""
    live = check_record(record, layout, names)
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
    return Managed(record, live, gpu.index)


def _busy(node: Node, target: Managed) -> bool:
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
    layout = hw.layout(gpu.index)
    return [_verified(node, record, layout, profile_names(node, gpu, layout), gpu)]


def _window_targets(
    window: Placement,
    records: list[Record],
    layout: tuple[GpuInstance, ...],
    names: dict[int, str],
    in_flight: list[Intent],
    holds: PodHolds,
) -> list[Record]:
    """Idle/Error records overlapping the window; refuse if anything else is live there, or a
    pod's annotation claims one of them."""
    chosen = [r for r in records if r.placement.overlaps(window) and r.state in _DESTROYABLE]
    owned = {(r.gpu_instance_id, r.placement) for r in chosen if holds.hold(r) is None}
    blocked = [
        _blocker(gi, records, names, in_flight, holds)
        for gi in layout
        if gi.placement.overlaps(window) and (gi.id, gi.placement) not in owned
    ]
    if blocked:
        raise ConflictError(
            f"slices {window} hold instances hamimig never reclaims: "
            + "; ".join(b.describe() for b in blocked),
            blockers=(Blocked(placement=window, instances=tuple(blocked)),),
        )
    return chosen


def _blocker(
    gi: GpuInstance,
    records: list[Record],
    names: dict[int, str],
    in_flight: list[Intent],
    holds: PodHolds,
) -> BlockingInstance:
    record = record_of(gi, records)
    held = holds.hold(record) if record is not None else None
    found = blocking_instance(gi, record, names, held=held)
    intent = next((i for i in in_flight if i.placement == gi.placement), None)
    if record is None and intent is not None:
        # An allocation in flight (or interrupted: recover rolls it back), not an orphan.
        return found.model_copy(update={"state": State.CREATING, "owner": intent.owner})
    return found


# --------------------------------------------------------------------------------------------
# reconcile


def reconcile(node: Node, dry_run: bool = False, source: PodSource | None = None) -> ActionReport:
    """One pass: with pods, release instances whose pods are gone; retry queued CDI removals;
    make specs current; retry destroying Error instances; then, with pods, apply the idle
    policy. A dry run reads without the node lock.

    A real pass that ran its plan to the end, failed steps and all, notes when it finished
    (`counters.json`'s `lastReconcile`, `metrics`' `hamimig_last_reconcile_timestamp_seconds`);
    a dry run or a pass refused before acting does not."""
    with node.lock_unless(dry_run):
        durable = load_for_mutation(node, tidy=not dry_run, dry_run=dry_run)
        pods = None if source is None else source.load(node)
        plan = plan_reconcile(node, durable, pods)
        plan.check(node, dry_run)  # before anything is written, the idle-seen file included
        if (old := stale_warning(node, pods)) is not None:
            plan.warnings.append(old)
        notes: list[str] = []
        policy = IdlePolicy.of(node.config())
        if policy.enabled and pods is None:
            notes.append(
                f"idle policy ({policy}) not applied: it needs a pod list, since HAMi's plugin "
                "may have handed an Idle instance to a pod after hamimig last wrote its record"
            )
        elif policy.enabled:
            assert pods is not None
            seen = plan_idle_policy(plan, node, durable, pods, policy, notes)
            if seen is not None and not dry_run:
                try:
                    node.idle_seen.save(seen)
                except (OSError, HamimigError) as exc:
                    why = exc.message if isinstance(exc, HamimigError) else exc.strerror or exc
                    notes.append(
                        f"the idle policy could not note when it first saw HAMi's own Idle "
                        f"records ({why}); their idle clocks start at a later pass"
                    )
        done = execute(node, plan, dry_run)
        if done.actions and not dry_run:
            tidy_finished(node, durable)
        if not dry_run:
            # The plan ran to its end (failed steps included: those are counted apart); a
            # refusal raised before this point. Best effort, as counting is.
            node.counters.note_timestamp(LAST_RECONCILE, int(node.now()))
    return ActionReport(
        dry_run=dry_run,
        actions=done.actions,
        failed=done.failed,
        warnings=durable.warnings + tuple(plan.warnings),
        notes=tuple(notes),
        files_changed=done.files_changed,
    )


def plan_reconcile(node: Node, durable: Durable, pods: PodSnapshot | None) -> Plan:
    plan = Plan()
    if pods is not None:
        _plan_releases(plan, node, durable, pods)
    plan_queued_removals(plan, durable)
    _plan_spec_refresh(plan, node, durable)
    _plan_destroy_retries(plan, node, durable, pods)
    return plan


def _plan_releases(plan: Plan, node: Node, durable: Durable, pods: PodSnapshot) -> None:
    """Release (Active -> Idle) what pods no longer hold: never a record written after the
    pods were listed, never an instance that processes still run on."""
    hw = node.hardware()
    for record, reason in sorted(_pods_gone(durable, pods), key=lambda g: g[0].mig_uuid):
        at = Where(record.mig_uuid, record.gpu_uuid, record.placement)
        newer = changed_after(record, pods)
        if newer:
            plan.add(ActionKind.SKIP, at, f"{reason}, but the record {newer}")
        elif has_processes(hw, record.mig_uuid):
            plan.add(ActionKind.SKIP, at, f"{reason}, but {BUSY}; left Active")
        else:
            target = Managed(record, None, _index_hint(record))
            plan.add(ActionKind.RELEASE_IDLE, target, reason)


def _pods_gone(durable: Durable, pods: PodSnapshot) -> list[tuple[Record, str]]:
    """Active records whose owner pod no longer holds allocations, with the reason."""
    by_key: dict[tuple[str, str], list[Pod]] = {}
    for pod in pods.pods:
        by_key.setdefault((pod.namespace, pod.name), []).append(pod)
    # MIG UUID (lower case: annotations may spell it either way) -> (pod key, where) per claim
    named: dict[str, list[tuple[str, str]]] = {}
    for pod in holding_pods(pods):
        for alloc in pod.allocations:
            if alloc.mig_uuid:
                where = (
                    f"pod {pod.key} container {alloc.container_index} device {alloc.device_index}"
                )
                named.setdefault(alloc.mig_uuid.lower(), []).append((pod.key, where))
    _check_holders(durable, by_key, named)
    gone: list[tuple[Record, str]] = []
    for record in durable.records.values():
        if record.state is not State.ACTIVE or record.owner is None:
            continue
        if record.mig_uuid.lower() not in named:
            why = _why_gone(record.owner, _owner_pods(record.owner, by_key))
            if why:
                gone.append((record, why))
    return gone


def _why_gone(owner: Owner, candidates: list[Pod]) -> str | None:
    """Why an owner no longer holds its allocations (None: it still does)."""
    if not candidates:
        return f"owner pod {owner.namespace}/{owner.name} no longer exists"
    if any(p.holds_allocations for p in candidates):
        return None
    pod = candidates[0]
    why = "is being deleted" if pod.deletion_timestamp else f"has phase {pod.phase}"
    return f"owner pod {pod.key} {why}"


def _owner_pods(owner: Owner, by_key: dict[tuple[str, str], list[Pod]]) -> list[Pod]:
    return [p for p in by_key.get((owner.namespace, owner.name), []) if owned_by(owner, p)]


def _check_holders(
    durable: Durable,
    by_key: dict[tuple[str, str], list[Pod]],
    named: dict[str, list[tuple[str, str]]],
) -> None:
    """Two holders of one instance are a conflict nobody here can settle (exit 5): two
    annotations naming it, or an annotation naming an instance whose recorded owner is
    another pod that still holds allocations."""
    refusals: list[str] = []
    records = {mig_uuid.lower(): record for mig_uuid, record in durable.records.items()}
    for key, claims in sorted(named.items()):
        record = records.get(key)
        mig_uuid = record.mig_uuid if record is not None else key
        wheres = [where for _, where in claims]
        if len(claims) > 1:
            refusals.append(f"{mig_uuid} is named by {' and by '.join(wheres)}")
            continue
        if record is None or record.state is not State.ACTIVE or record.owner is None:
            continue
        owners = [p for p in _owner_pods(record.owner, by_key) if p.holds_allocations]
        if owners and all(p.key != claims[0][0] for p in owners):
            refusals.append(
                f"{mig_uuid} is held by pod {owners[0].key} (its record's owner) and named by "
                f"{wheres[0]}: two pods cannot hold one instance"
            )
    if refusals:
        raise UnverifiableError("; ".join(refusals) + f"; {NOTHING_CHANGED}")


def _plan_spec_refresh(plan: Plan, node: Node, durable: Durable) -> None:
    """Rewrite the specs of Active and Idle instances that no longer match the NVIDIA base
    spec (a driver upgrade changes library paths), as reuse and recover do.

    Only existing specs are looked at (a missing one is recover's `repair-cdi`). A spec is
    compared with what its record says; one that differs is rewritten only once the record is
    verified against the live instance, as a reuse verifies it (`check_live`: its MIG UUID
    live on the recorded GPU with the recorded GI ID, CI ID, placement and profile, its compute
    instance spanning its GPU instance). A record that disagrees would point the spec at the
    device nodes of another tenant's instance: the pass refuses (exit 5). With no usable base
    spec every spec is kept as it is, with a warning.
    """
    cdi = node.cdi()
    if cdi is None or not cdi.lookup().composes:
        return
    for record in sorted(durable.records.values(), key=lambda r: r.mig_uuid):
        if record.state in (State.ACTIVE, State.IDLE) and cdi.exists(record.mig_uuid):
            _plan_spec(plan, node, cdi, record)


def _plan_spec(plan: Plan, node: Node, cdi: CdiStore, record: Record) -> None:
    at = Where(record.mig_uuid, record.gpu_uuid, record.placement)
    hw = node.hardware()
    try:
        gpu = hw.gpu_by_uuid(record.gpu_uuid)
    except HamimigError:
        # Its GPU is not on the node: recover's business when the instance is gone with it,
        # but a record whose instance is live on another GPU disagrees with the hardware.
        live = hw.mig_device(record.mig_uuid)
        if live is not None:
            plan.refuse(
                f"cannot verify the record of {record.mig_uuid}: it names GPU "
                f"{record.gpu_uuid}, which is not on this node, but the instance is live on "
                f"GPU {live.gpu_index} ({live.gpu_uuid}); run 'hamimig recover'"
            )
        return
    try:
        dev = cdi_device_for(
            node,
            record.mig_uuid,
            gpu.uuid,
            gpu.minor,
            record.gpu_instance_id,
            record.compute_instance_id,
        )
        if cdi.matches(dev):
            return
        problem = check_live(hw, record, hw.mig_device(record.mig_uuid))
    except UsageError as exc:
        path = str(cdi.path_of(record.mig_uuid))
        reason = f"kept as it is, not compared: {exc.message}"
        plan.warnings.append(Warning_(file=path, reason=reason))
        return
    except (HamimigError, OSError) as exc:
        why = exc.message if isinstance(exc, HamimigError) else str(exc.strerror or exc)
        plan.failures.append(f"CDI spec of {record.mig_uuid}: {why}")
        plan.add(ActionKind.REPAIR_CDI, at, f"failed: {why}")
        return
    if problem:
        plan.refuse(
            f"cannot verify the record whose CDI spec would be rewritten: {problem}; "
            "run 'hamimig recover'"
        )
        return
    base = cdi.lookup().base
    reason = f"its CDI spec differs from what the NVIDIA CDI spec {base.path if base else ''}"
    reason += " and the instance need (a driver upgrade changes library paths)"
    target = Spec(record.mig_uuid, device=dev, gpu_uuid=gpu.uuid, placement=record.placement)
    plan.add(ActionKind.REPAIR_CDI, target, reason)


def _plan_destroy_retries(
    plan: Plan, node: Node, durable: Durable, pods: PodSnapshot | None
) -> None:
    """Retry destroying Error (and unfinished Reclaiming) instances, oldest first; a busy one
    is skipped, one that cannot be verified is a failure of this pass.

    HAMi's plugin restores an Error record as Idle and may have handed its instance to a pod,
    writing only the pod's annotation: one a pod claims is skipped, and without a pod list
    fresh enough to say (`stale`) only instances no pod could use (no compute instance left)
    are retried.
    """
    hw = node.hardware()
    why_unknown = "no pod list" if pods is None else stale(node, pods)
    holds = PodHolds.of(pods if why_unknown is None else None)
    errors = [r for r in durable.records.values() if r.state in (State.ERROR, State.RECLAIMING)]
    for record in sorted(errors, key=lambda r: (r.updated_at or "", r.mig_uuid)):
        at = Where(record.mig_uuid, record.gpu_uuid, record.placement)
        try:
            gpu = hw.gpu_by_uuid(record.gpu_uuid)
            layout = hw.layout(gpu.index)
            target = _verified(node, record, layout, profile_names(node, gpu, layout), gpu)
        except HamimigError as exc:
            plan.failures.append(exc.message)
            plan.add(ActionKind.RETRY_DESTROY, at, f"skipped: {exc.message}")
            continue
        hold = holds.hold(record)
        if hold is not None:
            plan.add(ActionKind.SKIP, at, f"{hold.reason}; not destroyed")
            continue
        complete = target.live is not None and target.live.status is Liveness.COMPLETE
        if why_unknown is not None and complete:
            reason = (
                f"{record.state.value} instance is complete, and a pod may hold it (HAMi's "
                f"plugin hands such instances out): {why_unknown}; not destroyed"
            )
            plan.add(ActionKind.SKIP, at, reason)
            continue
        if _busy(node, target):
            reason = f"{record.state.value} instance is {BUSY}; not destroyed"
            plan.add(ActionKind.SKIP, at, reason)
            continue
        reason = f"{record.state.value} since {record.updated_at}: {record.error or 'retry'}"
        plan.add(ActionKind.RETRY_DESTROY, target, reason)
