"""The one place that changes the node: planners decide, `apply(node, step)` acts, in the
crash-safe order of docs/design.md "Crash safety".

Every record write and removal is here and asks the transition table first, so no command can
move an instance between states the lifecycle does not allow.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from hamimig.engine.facts import Durable, Liveness, cdi_device_for, same_slot
from hamimig.engine.node import Node
from hamimig.engine.results import Action, Blocked, BlockingInstance, StepError
from hamimig.engine.states import (
    Creating,
    StateName,
    check_transition,
    idle_since_after,
    last_owner_after,
)
from hamimig.engine.step_events import StepOutcome, known_before, log_step
from hamimig.engine.steps import (
    Forgettable,
    Handout,
    InFlight,
    Managed,
    NewInstance,
    OrphanGi,
    Pair,
    Plan,
    Spec,
    Step,
    Target,
)
from hamimig.errors import (
    ConflictError,
    GpuInstanceUnreadable,
    HamimigError,
    HardwareError,
    NvmlError,
    UsageError,
)
from hamimig.store.cdi import ForeignSpec
from hamimig.store.counters import (
    CREATIONS,
    FAILED_ALLOCATE,
    FAILED_DESTROY,
    FAILURES,
    RECLAIMS,
    REUSES,
)
from hamimig.store.intents import Intent, new_intent_id
from hamimig.store.records import Record
from hamimig.vocabulary import ActionKind, FileOpName, State

PENDING_FORGET = "forgotten: the spec is removed right after its record"
"""What the CDI removal queue says while a forget is under way (a crash leaves it for reconcile)."""


def set_state(node: Node, record: Record, target: State, **changes: object) -> Record:
    """Write `record` in state `target`, if the transition table allows the move."""
    current: StateName = record.state
    check_transition(current, target, record.mig_uuid)
    now = node.clock()
    changes.setdefault("idle_since", idle_since_after(record, target, now))
    changes.setdefault("last_owner", last_owner_after(record, target))
    updated = dataclasses.replace(
        record,
        state=target,
        managed=True,
        updated_at=now,
        **changes,  # type: ignore[arg-type]
    )
    node.records.write(updated)
    return updated


class StepFailed(HardwareError):
    """A step the hardware or the disk refused. `tracked`: it left a state `reconcile` retries
    (Error, a queued removal, a kept orphan GI), so the device plugin may still start; else
    recovery has failed. `record` and `made` tell the event journal what the step left."""

    def __init__(
        self,
        message: str,
        tracked: bool = True,
        record: Record | None = None,
        made: str | None = None,
    ) -> None:
        super().__init__(message)
        self.tracked, self.record, self.made = tracked, record, made


def remove_cdi_after_destroy(node: Node, mig_uuid: str) -> str | None:
    """Remove an instance's CDI spec (its hardware is gone); queue the removal if it fails."""
    cdi = node.cdi()
    if cdi is None or not cdi.exists(mig_uuid):
        return None
    foreign, failed = _remove_spec(partial(cdi.remove, mig_uuid))
    if failed is not None:
        node.queue.add(mig_uuid, failed, node.clock())
        return f"CDI spec of {mig_uuid} could not be removed ({failed}); queued"
    return foreign


def _remove_spec(remove: Callable[[], object]) -> tuple[str | None, str | None]:
    """Remove a CDI spec: (why the file is kept, when it is not ours; why its removal failed)."""
    try:
        remove()
    except ForeignSpec as exc:
        return str(exc), None
    except OSError as exc:
        return None, str(exc.strerror or exc)
    return None, None


def failure_text(exc: HamimigError | OSError) -> str:
    """A failure as one line: the error's message, or what the disk said."""
    return exc.message if isinstance(exc, HamimigError) else f"I/O error: {exc}"


def _create(node: Node, target: Target) -> Applied:
    """Create GI, CI, CDI spec and an Active record under an intent; undo everything this
    request created if any step fails (a failed allocation never caches partial work)."""
    assert isinstance(target, NewInstance)
    gpu, profile, placement, owner = target.gpu, target.profile, target.placement, target.owner
    hw = node.hardware()
    intent = Intent(
        id=new_intent_id(),
        op="allocate",
        gpu_uuid=gpu.uuid,
        gpu_index=gpu.index,
        profile=profile.name,
        profile_id=profile.id,
        placement=placement,
        owner=owner,
        created_at=node.clock(),
    )
    check_transition(None, Creating, f"{profile.name} at {placement}")
    with _io("cannot write the intent journal"):
        node.intents.write(intent)
    try:
        gi_id = hw.create_gpu_instance(gpu.index, profile.id, placement)
    except NvmlError as exc:
        if isinstance(exc, GpuInstanceUnreadable):
            # The GI was created and reading it back failed: undo it like any partial work.
            node.counters.count(FAILURES, FAILED_ALLOCATE)
            _rollback_unread_gi(node, intent, exc)
        _drop_intent(node, intent)
        if exc.name == "INSUFFICIENT_RESOURCES":
            raise ConflictError(
                f"GPU {gpu.index} refused {profile.name} at {placement}: the placement is "
                f"occupied ({exc.message})"
            ) from None
        raise
    try:
        intent = dataclasses.replace(intent, gpu_instance_id=gi_id)
        node.intents.write(intent)
        ci = hw.create_compute_instance(gpu.index, gi_id)
        intent = dataclasses.replace(intent, compute_instance_id=ci.id, mig_uuid=ci.mig_uuid)
        node.intents.write(intent)
        cdi = node.cdi()
        cdi_name: str | None = None
        if cdi is not None:
            dev = cdi_device_for(
                node, ci.mig_uuid, gpu.uuid, gpu.minor, gi_id, ci.id, major=target.caps_major
            )
            cdi_name = cdi.write(dev)
        now = node.clock()
        record = Record(
            mig_uuid=ci.mig_uuid,
            gpu_uuid=gpu.uuid,
            profile=profile.name,
            placement=placement,
            gpu_instance_id=gi_id,
            compute_instance_id=ci.id,
            state=State.ACTIVE,
            owner=owner,
            cdi_device=cdi_name,
            created_at=now,
            updated_at=now,
            gpu_index=gpu.index,
        )
        check_transition(Creating, State.ACTIVE, ci.mig_uuid)
        node.records.write(record)
    except (HamimigError, OSError) as exc:
        reason = failure_text(exc)
        node.counters.count(FAILURES, FAILED_ALLOCATE)
        rollback_intent(node, intent)
        raise StepFailed(
            f"allocation of {profile.name} at {placement} on GPU {gpu.index} failed and was "
            f"rolled back: {reason}",
            made=intent.mig_uuid,
        ) from None
    # The allocation is complete (its record is written): a leftover intent naming a recorded
    # MIG UUID is a finished one, which allocate skips and recover clears.
    with contextlib.suppress(OSError):
        node.intents.remove(intent.id)
    node.counters.count(CREATIONS)
    return Applied(record)


def _rollback_unread_gi(node: Node, intent: Intent, exc: NvmlError) -> None:
    """Find and destroy the GI this request created but could not read back."""
    try:
        for gi in node.hardware().layout(intent.gpu_index):
            if same_slot(intent, gi):
                rollback_intent(node, dataclasses.replace(intent, gpu_instance_id=gi.id))
                return
    except (HamimigError, OSError) as failed:
        reason = failed.message if isinstance(failed, HamimigError) else str(failed)
        raise HardwareError(
            f"{exc.message}; the GPU instance it created could not be rolled back ({reason}): "
            f"intent {intent.id} is kept, run 'hamimig recover'"
        ) from None


def _drop_intent(node: Node, intent: Intent) -> None:
    try:
        node.intents.remove(intent.id)
    except OSError as exc:
        raise HardwareError(
            f"cannot remove intent {intent.id} ({exc.strerror or exc}); run 'hamimig recover'"
        ) from None


def rollback_intent(node: Node, intent: Intent) -> None:
    """Destroy what an allocation created (CI, GI), then its CDI spec, then the intent; if the
    hardware refuses, the intent stays so that recovery can finish the job."""
    hw = node.hardware()
    gi_id = intent.gpu_instance_id
    try:
        if gi_id is not None:
            ci_ids = {ci for ci in [intent.compute_instance_id] if ci is not None}
            if intent.mig_uuid is None:
                # A CI may exist that the intent never learned of (its read-back failed, or a
                # crash came first): the GI is this request's, so every CI in it is too.
                ci_ids |= {
                    ci.id
                    for gi in hw.layout(intent.gpu_index)
                    if gi.id == gi_id and gi.placement == intent.placement
                    for ci in gi.compute_instances
                }
            for ci_id in sorted(ci_ids):
                _ignore_not_found(
                    partial(hw.destroy_compute_instance, intent.gpu_index, gi_id, ci_id)
                )
            _ignore_not_found(partial(hw.destroy_gpu_instance, intent.gpu_index, gi_id))
    except NvmlError as exc:
        raise HardwareError(
            f"rollback of intent {intent.id} failed: {exc.message}; the intent is kept, run "
            "'hamimig recover'"
        ) from None
    if intent.mig_uuid is not None:
        remove_cdi_after_destroy(node, intent.mig_uuid)
    check_transition(Creating, None, intent.id)
    _drop_intent(node, intent)


def _ignore_not_found(action: Callable[[], None]) -> None:
    """Undoing a step that never happened (or was already undone) is not a failure."""
    try:
        action()
    except NvmlError as exc:
        if exc.name != "NOT_FOUND":
            raise


# --------------------------------------------------------------------------------------------
# Applying planned steps


@dataclass(frozen=True)
class Applied:
    """What a step left: the record it wrote (if any) and a note on anything deferred."""

    record: Record | None = None
    note: str | None = None
    changed: bool = True
    """False: the step found everything as it should be and wrote nothing (a second run)."""


def apply(node: Node, step: Step) -> Applied:
    """Carry out one planned step (one on a `Where` only reports), logging it here, the one
    place all commands' changes pass through. `StepFailed` when the hardware or disk refuses
    part of it; `HamimigError` or `OSError` when it could not be done at all."""
    if not step.changes:
        return Applied()
    if node.read_only:  # a dry run only reports its plan; reaching here is a bug
        raise HamimigError(f"a dry run tried to apply {step.kind.value} (a bug); nothing changed")
    before = len(node.file_ops)
    known = known_before(node, step)
    try:
        applied = _HANDLERS[step.kind](node, step.target)
    except (HardwareError, OSError) as exc:
        # A failure of the hardware or the disk is an event; a refusal (the placement turned
        # out occupied, no spec can be composed) left nothing changed and, like every refused
        # command, writes nothing.
        why = failure_text(exc)
        left, made = (exc.record, exc.made) if isinstance(exc, StepFailed) else (None, None)
        done = StepOutcome(node.file_ops[before:], left, error=why, known=known, made=made)
        log_step(node, step, done)
        raise
    if applied.changed:
        done = StepOutcome(node.file_ops[before:], applied.record, applied.note, known=known)
        log_step(node, step, done)
    return applied


@dataclass(frozen=True)
class Executed:
    """What a plan's steps did: the report, and every failure (which make the exit code)."""

    actions: tuple[Action, ...]
    failed: str | None
    """Every failure, joined (None: none)."""
    files_changed: int = 0
    """Files the steps wrote or removed: per step, each store it touched (its record, intent,
    CDI spec, the removal queue) counts once."""
    results: tuple[Applied | HamimigError | OSError, ...] = ()
    """Per step applied, in order, what it left or why it failed (none in a dry run)."""


def execute(node: Node, plan: Plan, dry_run: bool, tolerate_tracked: bool = False) -> Executed:
    """Apply a verified plan's steps in order (a dry run only reports them). An `abort` plan
    stops at a failed step and raises (an undestroyable Error instance in the way of its
    creation as a conflict, exit 3); others go on and report it on the step. With
    `tolerate_tracked` (recovery) a failure that left a tracked state does not fail the command."""
    actions: list[Action] = []
    results: list[Applied | HamimigError | OSError] = []
    failures = list(plan.failures)
    files = 0
    for step in plan.steps:
        if dry_run:
            actions.append(step.report(changed=would_change(node, step)))
            continue
        before = len(node.file_ops)
        try:
            result: Applied | HamimigError | OSError = apply(node, step)
        except (HamimigError, OSError) as exc:
            if plan.abort:
                blocked = _blocked(plan, step, exc)
                if blocked is not None:
                    raise blocked from None
                raise
            result = exc
        touched = _files_touched(node, before)
        files += touched
        results.append(result)
        if isinstance(result, Applied):
            actions.append(step.report(result.note, changed=step.changes and result.changed))
            continue
        why = failure_text(result)
        code = result.code if isinstance(result, HamimigError) else HardwareError.code
        if not isinstance(result, StepFailed):
            failures.append(f"{step.kind.value} {step.mig_uuid or ''}: {why}")
        elif not (tolerate_tracked and result.tracked):
            failures.append(why)
        actions.append(step.report(changed=touched > 0, error=StepError(code=code, message=why)))
    return Executed(tuple(actions), "; ".join(failures) or None, files, tuple(results))


def _blocked(plan: Plan, step: Step, exc: Exception) -> ConflictError | None:
    """An Error instance in the way of the plan's creation that still cannot be destroyed
    blocks the placement (exit 3); an Idle one that fails is a hardware failure (exit 4)."""
    create = plan.steps[-1].target
    if not isinstance(exc, StepFailed) or exc.record is None or not isinstance(create, NewInstance):
        return None
    assert isinstance(step.target, Managed)
    record = step.target.record
    if record.state is not State.ERROR:
        return None
    blocker = BlockingInstance(
        mig_uuid=record.mig_uuid,
        gpu_instance_id=record.gpu_instance_id,
        profile=record.profile,
        placement=record.placement,
        state=State.ERROR,
    )
    return ConflictError(
        f"placement {create.placement} is blocked by Error instance {record.mig_uuid} that "
        f"still cannot be destroyed: {exc.message}",
        blockers=(Blocked(placement=create.placement, instances=(blocker,)),),
    )


def _files_touched(node: Node, since: int) -> int:
    """The files one step wrote or removed: the stores its file operations name (`record`,
    `intent`, `cdi`, `queue`), each once, since a step concerns one instance."""
    return len({op.value.split(".", 1)[0] for op in node.file_ops[since:]})


def would_change(node: Node, step: Step) -> bool:
    """Whether applying `step` would change anything: not a step that only reports, nor one
    whose instance is already as the step would leave it (a second run's restores)."""
    if not step.changes:
        return False
    target = step.target
    if step.kind is ActionKind.RESTORE_IDLE and isinstance(target, Managed):
        return not _idle_as_recorded(node, target.record)
    if isinstance(target, Pair):
        return not _pair_as_recorded(node, target)
    return True


def tidy_finished(node: Node, durable: Durable) -> None:
    """After a command changed something: remove the intents of allocations that had finished
    (best effort; never before, since a refused command must leave every file as it was)."""
    for intent in durable.finished:
        with contextlib.suppress(OSError):
            node.intents.remove(intent.id)


def _hand_out(node: Node, target: Target) -> Applied:
    """Reuse: the spec made current first (rewritten when the planner found it differs), then
    the record Active. Any failure leaves the instance Idle and cached."""
    assert isinstance(target, Handout)
    record, device, cdi = target.record, target.device, node.cdi()
    try:
        if cdi is not None and target.spec is not None:
            cdi.write(target.spec)
        active = set_state(
            node,
            record,
            State.ACTIVE,
            owner=target.owner,
            cdi_device=target.cdi_device,
            gpu_index=device.gpu_index,
        )
    except OSError as exc:
        raise HardwareError(
            f"reuse of {record.mig_uuid} failed ({exc.strerror or exc}); it stays Idle"
        ) from None
    # An interrupted forget may have queued this spec's removal; the spec is the instance's
    # again (reconcile would drop the entry too, but nothing should ever remove it).
    if target.queued:
        with contextlib.suppress(OSError):
            node.queue.drop(record.mig_uuid)
    node.counters.count(REUSES)
    return Applied(active, target.kept)


def _release(node: Node, target: Target) -> Applied:
    assert isinstance(target, Managed)
    try:
        idle = set_state(node, target.record, State.IDLE, owner=None)
    except OSError as exc:
        raise HardwareError(f"cannot write the record of {target.record.mig_uuid}: {exc}") from None
    return Applied(idle)


def _destroy(node: Node, target: Target) -> Applied:
    """Destroy a managed instance in the crash-safe order; the note says what was deferred (a
    queued CDI removal). `StepFailed`, its record left in Error, when the hardware refuses."""
    assert isinstance(target, Managed) and target.live is not None
    record, live, gpu_index = target.record, target.live, target.gpu_index
    hw = node.hardware()
    if record.state is not State.RECLAIMING:
        record = set_state(node, record, State.RECLAIMING, error=None)
    try:
        if live.status is Liveness.COMPLETE:
            hw.destroy_compute_instance(
                gpu_index, record.gpu_instance_id, record.compute_instance_id
            )
        if live.status in (Liveness.COMPLETE, Liveness.GI_ONLY):
            hw.destroy_gpu_instance(gpu_index, record.gpu_instance_id)
    except NvmlError as exc:
        node.counters.count(FAILURES, FAILED_DESTROY)
        failed = set_state(node, record, State.ERROR, error=exc.message)
        raise StepFailed(
            f"could not destroy {record.mig_uuid} ({record.profile} at {record.placement} on "
            f"GPU {gpu_index}): {exc.message}; it is kept in state Error and not reused",
            record=failed,
        ) from None
    note = _drop_record(node, record)
    node.counters.count(RECLAIMS)
    return Applied(note=note)


def _drop_record(node: Node, record: Record) -> str | None:
    """Remove the files of an instance whose hardware is gone: its CDI spec (queued when that
    fails, which the note says), then its record."""
    check_transition(record.state, None, record.mig_uuid)
    note = remove_cdi_after_destroy(node, record.mig_uuid)
    node.records.remove(record.mig_uuid)
    return note


def _finish(node: Node, target: Target) -> Applied:
    """Finish what a crash or a vanished instance left: destroy what is still live, or only
    remove the files of an instance that is provably gone."""
    assert isinstance(target, Managed)
    if target.gone:
        return Applied(note=_drop_record(node, target.record))
    if target.record.state is State.ACTIVE:
        # Recovery found no pod holding it (its CI is gone): released first, since an Active
        # instance is never reclaimed, then destroyed like any Idle one.
        idle = set_state(node, target.record, State.IDLE, owner=None)
        target = dataclasses.replace(target, record=idle)
    return _destroy(node, target)


def _finish_intent(node: Node, target: Target) -> Applied:
    assert isinstance(target, InFlight)
    check_transition(Creating, None, target.intent.id)
    node.intents.remove(target.intent.id)
    return Applied()


def _roll_back(node: Node, target: Target) -> Applied:
    """Undo an interrupted allocation with the one rollback. Only the GI the planner verified
    as this request's is destroyed: when the journaled GI is gone, its ID may already belong to
    another instance, so the rollback then destroys nothing."""
    assert isinstance(target, InFlight) and target.gpu_index is not None
    known = dataclasses.replace(
        target.intent,
        gpu_index=target.gpu_index,
        gpu_instance_id=target.gi.id if target.gi is not None else None,
    )
    try:
        rollback_intent(node, known)
    except HamimigError as exc:
        raise StepFailed(exc.message, tracked=False) from None
    return Applied()


def _record_pair(node: Node, target: Target) -> Applied:
    """Record a verified live pair as Active for its pod, or as Idle (adopted). Record first,
    then spec: a crash between leaves a record whose spec recovery writes, never an unowned
    spec. An adoption with no composable spec stands (the note says why); it is never handed
    out without one, and a later `recover` writes it (repair-cdi)."""
    assert isinstance(target, Pair)
    record, gpu, gi, ci = target.record, target.gpu, target.gi, target.ci
    if _pair_as_recorded(node, target):  # already as it should be: a second run changes nothing
        return Applied(record, changed=False)
    state = State.IDLE if target.owner is None else State.ACTIVE
    now = node.clock()
    base = record or Record(
        mig_uuid=ci.mig_uuid,
        gpu_uuid=gpu.uuid,
        profile=target.profile,
        placement=gi.placement,
        gpu_instance_id=gi.id,
        compute_instance_id=ci.id,
        created_at=now,
    )
    check_transition(record.state if record else None, state, ci.mig_uuid)
    written = dataclasses.replace(
        base,
        state=state,
        owner=target.owner,
        managed=True,
        updated_at=now,
        gpu_index=gpu.index,
        error=None,
        cdi_device=_cdi_name(node, ci.mig_uuid) or base.cdi_device,
        idle_since=idle_since_after(record, state, now),
        last_owner=last_owner_after(record, state),
    )
    node.records.write(written)
    cdi = node.cdi()
    if record is not None or cdi is None:
        return Applied(written)
    dev = cdi_device_for(node, ci.mig_uuid, gpu.uuid, gpu.minor, gi.id, ci.id)
    try:
        if not cdi.matches(dev):
            cdi.write(dev)
    except UsageError as exc:
        return Applied(written, f"no CDI spec written yet: {exc.message}")
    return Applied(written)


def _pair_as_recorded(node: Node, target: Pair) -> bool:
    """Whether a pair's record already says what recording it would write."""
    record = target.record
    cdi_name = _cdi_name(node, target.ci.mig_uuid)
    return (
        record is not None
        and record.managed
        and record.state is (State.IDLE if target.owner is None else State.ACTIVE)
        and record.owner == target.owner
        and record.gpu_index == target.gpu.index
        and (cdi_name is None or cdi_name == record.cdi_device)
    )


def _idle_as_recorded(node: Node, record: Record) -> bool:
    """Whether restoring `record` Idle would leave it as it is (a record HAMi wrote stays as
    HAMi wrote it)."""
    cdi_name = _cdi_name(node, record.mig_uuid)
    return record.state is State.IDLE and (
        not record.managed or cdi_name is None or cdi_name == record.cdi_device
    )


def _restore_idle(node: Node, target: Target) -> Applied:
    assert isinstance(target, Managed)
    record = target.record
    cdi_name = _cdi_name(node, record.mig_uuid)
    if _idle_as_recorded(node, record):
        return Applied(record, changed=False)  # nothing to change
    idle = set_state(
        node,
        record,
        State.IDLE,
        owner=None,
        gpu_index=target.gpu_index,
        cdi_device=cdi_name or record.cdi_device,
    )
    return Applied(idle)


def _cdi_name(node: Node, mig_uuid: str) -> str | None:
    """The qualified CDI device name of an instance (None in legacy non-CDI mode)."""
    cdi = node.cdi()
    return None if cdi is None else cdi.qualified_name(mig_uuid)


def _destroy_orphan_gi(node: Node, target: Target) -> Applied:
    assert isinstance(target, OrphanGi)
    try:
        node.hardware().destroy_gpu_instance(target.gpu.index, target.gi.id)
    except NvmlError as exc:
        raise StepFailed(f"could not destroy orphan GI {target.gi.id}: {exc.message}") from None
    return Applied()


def _write_spec(node: Node, target: Target) -> Applied:
    assert isinstance(target, Spec) and target.device is not None
    cdi = node.cdi()
    if cdi is not None:
        cdi.write(target.device)
    return Applied()


def _retry_removal(node: Node, target: Target) -> Applied:
    """The one retry of a queued CDI spec removal (recover and reconcile). When the instance
    has a record again (a forget interrupted after queueing, then reuse), only the stale queue
    entry goes; a removal that fails again stays queued."""
    assert isinstance(target, Spec) and target.mig_uuid is not None
    uuid, queue, cdi = target.mig_uuid, node.queue, None if target.keep else node.cdi()
    foreign, failed = (None, None) if cdi is None else _remove_spec(partial(cdi.remove, uuid))
    if failed is not None:
        queue.add(uuid, failed, node.clock())
        raise StepFailed(f"CDI spec of {uuid} still cannot be removed: {failed}")
    # Removed, or kept (only the entry goes), or not ours to remove, now or later: the entry
    # goes, the file stays, and the note says so.
    queue.drop(uuid)
    return Applied(note=foreign)


def _remove_orphan_spec(node: Node, target: Target) -> Applied:
    assert isinstance(target, Spec) and target.file is not None
    cdi = node.cdi()
    if cdi is not None:
        cdi.remove_name(target.file)
    return Applied()


def _forget_record(node: Node, target: Target) -> Applied:
    """Drop one record file and its CDI spec, never the hardware. Queue the spec's removal,
    remove the record, the spec, the queue entry: before the record goes a rerun of `forget`
    starts over; after, the queued removal is `reconcile`'s."""
    assert isinstance(target, Forgettable)
    if target.mig_uuid is None:
        return _forget_record_file(node, target)
    uuid = target.mig_uuid
    if target.state is not None:
        check_transition(target.state, None, uuid)
    cdi, queue = node.cdi() if target.spec else None, node.queue
    if cdi is not None:
        with _io(f"cannot queue the removal of the CDI spec of {uuid}"):
            queue.add(uuid, PENDING_FORGET, node.clock())
    with _io(f"cannot remove the record of {uuid}"):
        node.records.remove(uuid)
    if cdi is None:
        return Applied()
    foreign, failed = _remove_spec(partial(cdi.remove, uuid))
    if failed is not None:
        with _io(f"cannot update the CDI removal queue for {uuid}"):
            queue.add(uuid, failed, node.clock())
        return Applied(
            note=f"the CDI spec could not be removed ({failed}); queued for 'hamimig reconcile'"
        )
    gone = f"the record and CDI spec of {uuid} are gone, but its queue entry is not"
    with _io(f"cannot update the CDI removal queue for {uuid}" if foreign is not None else gone):
        queue.drop(uuid)
    return Applied(note=foreign)


def _forget_record_file(node: Node, target: Forgettable) -> Applied:
    """Drop an unreadable record known only by its file name, then the spec of the device that
    name holds. Its MIG UUID is unknown, so no removal can be queued: a crash between the two
    leaves a spec no record accounts for, which `recover` removes as an orphan."""
    name, spec = target.record_file, target.spec_file
    assert name is not None
    records, cdi = node.records, node.cdi()
    with _io(f"cannot remove the record file {name}"):
        records.remove_named(FileOpName.RECORD_REMOVE, name)
    if cdi is None or spec is None:
        return Applied()
    foreign, failed = _remove_spec(partial(cdi.remove_name, spec))
    if failed is not None:
        return Applied(
            note=f"the CDI spec {spec} could not be removed ({failed}); 'hamimig recover' "
            "removes it, since no record accounts for it any more"
        )
    return Applied(note=foreign)


def _forget_intent(node: Node, target: Target) -> Applied:
    assert isinstance(target, Forgettable) and target.intent_id is not None
    with _io(f"cannot remove intent {target.intent_id}"):
        node.intents.remove(target.intent_id)
    return Applied()


@contextlib.contextmanager
def _io(what: str) -> Iterator[None]:
    """One durable step; an OSError becomes one line naming the step (exit 4)."""
    try:
        yield
    except OSError as exc:
        raise HardwareError(f"{what}: {exc.strerror or exc}") from None


_HANDLERS: dict[ActionKind, Callable[[Node, Target], Applied]] = {
    ActionKind.CREATE: _create,
    ActionKind.REUSE: _hand_out,
    ActionKind.RELEASE: _release,
    ActionKind.RELEASE_IDLE: _release,
    ActionKind.RECLAIM: _destroy,
    ActionKind.RETRY_DESTROY: _destroy,
    ActionKind.EVICT_IDLE: _destroy,
    ActionKind.FINISH_RECLAIM: _finish,
    ActionKind.DROP_MISSING: _finish,
    ActionKind.FINISH_INTENT: _finish_intent,
    ActionKind.ROLLBACK_INTENT: _roll_back,
    ActionKind.RESTORE_ACTIVE: _record_pair,
    ActionKind.ADOPT_ACTIVE: _record_pair,
    ActionKind.ADOPT_IDLE: _record_pair,
    ActionKind.RESTORE_IDLE: _restore_idle,
    ActionKind.DESTROY_ORPHAN_GI: _destroy_orphan_gi,
    ActionKind.REPAIR_CDI: _write_spec,
    ActionKind.RETRY_CDI_REMOVAL: _retry_removal,
    ActionKind.REMOVE_ORPHAN_CDI: _remove_orphan_spec,
    ActionKind.FORGET_RECORD: _forget_record,
    ActionKind.FORGET_INTENT: _forget_intent,
}
