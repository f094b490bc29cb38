"""`allocate`: idempotent for the same pod slot, exact reuse of an Idle instance, otherwise
reclaim only the Idle instances in the way and create."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable

from hamimig.engine.executor import DestroyFailed, apply, tidy_finished
from hamimig.engine.facts import (
    Durable,
    cdi_device_for,
    check_reuse,
    has_processes,
    load_for_mutation,
    pending_mig_mode,
)
from hamimig.engine.node import Node, legal_placement, resolve_gpu
from hamimig.engine.plans import CreatePlan, PodHolds, held_by, plan_create, reuse_candidates
from hamimig.engine.podsource import PodSource, load_fresh
from hamimig.engine.requests import AllocateRequest
from hamimig.engine.results import (
    Allocation,
    Blocked,
    BlockingInstance,
    InstanceView,
    Warning_,
    record_view,
)
from hamimig.engine.steps import Handout, Managed, NewInstance, Plan, Spec, Step
from hamimig.errors import (
    ConflictError,
    HamimigError,
    HardwareError,
    NvmlError,
    UnverifiableError,
    UsageError,
)
from hamimig.hw.types import GiProfile, Gpu, MigMode, Placement
from hamimig.store.cdi import CdiStore, device_node_paths
from hamimig.store.queue import QueuedRemoval
from hamimig.store.records import Record
from hamimig.vocabulary import ActionKind, Outcome, State


def allocate(
    node: Node, request: AllocateRequest, source: PodSource, dry_run: bool = False
) -> Allocation:
    """Plan (`plan_allocation`), then apply the steps; a dry run plans the same steps on a
    snapshot read without the node lock and reports them, changing nothing.

    The pods are read under the lock: an Idle or Error instance that another pod's
    annotation claims is neither handed out nor destroyed to make room. The result warns when
    the GPU's next reset will disable MIG, destroying the instance with the rest."""
    result = _allocate(node, request, source, dry_run)
    index = result.instance.gpu_index
    try:
        pending = pending_mig_mode(index, *node.hardware().mig_modes(index))
    except NvmlError as exc:  # the allocation is done: a failed look at the mode cannot undo it
        why = f"MIG mode after the next GPU reset not read: {exc}"
        pending = Warning_(file=f"GPU {index}", reason=why)
    if pending is None:
        return result
    return result.model_copy(update={"warnings": (*result.warnings, pending)})


def _allocate(node: Node, request: AllocateRequest, source: PodSource, dry_run: bool) -> Allocation:
    gpu_ref = request.gpu
    start, size = request.placement if request.placement is not None else (None, None)
    with node.lock_unless(dry_run):
        durable = load_for_mutation(node, tidy=True, dry_run=dry_run)
        holds = PodHolds.of(load_fresh(node, source), request.owner)
        _check_own_entries(durable, holds, request)
        held = held_by(durable.records, request.owner)
        if held is not None:
            same = _idempotent(node, held, gpu_ref, request, start, size)
            return same.model_copy(update={"dry_run": dry_run, "warnings": durable.warnings})
        steps = plan_allocation(node, durable, request, holds)
        if dry_run:
            return _preview(node, steps, durable)
        if steps[-1].kind is ActionKind.REUSE:
            result = _hand_out(node, steps[-1])
        else:
            create = steps[-1].target
            assert isinstance(create, NewInstance)
            _clear_stale_specs(node, durable, create.gpu)
            result = _create(node, steps)
        tidy_finished(node, durable)
        return result


def plan_allocation(
    node: Node, durable: Durable, request: AllocateRequest, holds: PodHolds
) -> list[Step]:
    """The steps of an allocation whose slot holds nothing yet: one `reuse` of an exact Idle
    match, or the `reclaim`s of the Idle (or Error) instances in the way, then `create`.
    Refuses (raises) what the request may not have; reads, never changes."""
    gpu_ref = request.gpu
    start, size = request.placement if request.placement is not None else (None, None)
    if not reuse_candidates(durable.records, gpu_ref, request.profile, start, size):
        _require_base(node)  # nothing to reuse: a new spec, refused before any NVML call
    handout = _plan_reuse(node, durable, gpu_ref, request, start, size, holds)
    if handout is not None:
        return [handout]
    return _plan_creation(node, durable, request, start, size, holds)


def _check_own_entries(durable: Durable, holds: PodHolds, request: AllocateRequest) -> None:
    """The requester's own annotation entry never blocks it, but one that names an instance
    the records call Idle or Error means HAMi's plugin handed that instance to this very slot
    behind the records' back: nothing here can say which instance the pod uses (exit 5)."""
    by_uuid = {uuid.lower(): record for uuid, record in durable.records.items()}
    for alloc in holds.own:
        record = by_uuid.get((alloc.mig_uuid or "").lower())
        if record is not None and record.state in (State.IDLE, State.ERROR):
            raise UnverifiableError(
                f"pod {request.owner.namespace}/{request.owner.name}'s allocation annotation "
                f"(container {alloc.container_index} device {alloc.device_index}) names "
                f"{record.mig_uuid}, which the records call {record.state.value}; run "
                "'hamimig recover'; nothing was changed"
            )


def _preview(node: Node, steps: list[Step], durable: Durable) -> Allocation:
    """A dry run's result: the instance as the run would report it, where that is known
    before it runs (a new instance has no MIG UUID, GI, CI or CDI device yet)."""
    last = steps[-1]
    if isinstance(last.target, Handout):
        handout = last.target
        cdi = node.cdi()
        name = handout.record.cdi_device
        if cdi is not None and handout.spec is not None:
            name = cdi.qualified_name(handout.record.mig_uuid)
        record = dataclasses.replace(
            handout.record, state=State.ACTIVE, owner=handout.owner, cdi_device=name
        )
        view = record_view(record, handout.device.gpu_index)
        return Allocation(
            instance=view, outcome=Outcome.REUSED, dry_run=True, warnings=durable.warnings
        )
    create = last.target
    assert isinstance(create, NewInstance)
    view = InstanceView(
        mig_uuid=None,
        gpu_uuid=create.gpu.uuid,
        gpu_index=create.gpu.index,
        profile=create.profile.name,
        placement=create.placement,
        gpu_instance_id=None,
        compute_instance_id=None,
        state=State.CREATING,
        owner=create.owner,
    )
    reclaimed = tuple(step.mig_uuid or "" for step in steps[:-1])
    warnings = durable.warnings + _retried_first(node, durable, create.gpu)
    return Allocation(
        instance=view,
        outcome=Outcome.CREATED,
        reclaimed=reclaimed,
        dry_run=True,
        warnings=warnings,
    )


def _idempotent(
    node: Node,
    record: Record,
    gpu_ref: int | str,
    request: AllocateRequest,
    start: int | None,
    size: int | None,
) -> Allocation:
    """The slot already holds an instance: the same one again (nothing changes), or a clash."""
    hw = node.hardware()
    live = hw.mig_device(record.mig_uuid)
    if live is None:
        raise UnverifiableError(
            f"{request.owner} holds {record.mig_uuid}, which is not live; run 'hamimig recover'"
        )
    same_gpu = live.gpu_uuid == gpu_ref if isinstance(gpu_ref, str) else live.gpu_index == gpu_ref
    same = (
        same_gpu
        and record.profile == request.profile
        and start in (None, record.placement.start)
        and size in (None, record.placement.size)
    )
    if not same:
        raise ConflictError(
            f"{request.owner} already holds {record.mig_uuid} ({record.profile} at "
            f"{record.placement} on GPU {live.gpu_index}); release it before asking for another"
        )
    problem = check_reuse(record, live, hw.profile_name(live.gpu_index, live.profile_id))
    if problem:
        raise UnverifiableError(
            f"the instance held by {request.owner} failed verification: {problem}"
        )
    return Allocation(instance=record_view(record, live.gpu_index), outcome=Outcome.UNCHANGED)


def _plan_reuse(
    node: Node,
    durable: Durable,
    gpu_ref: int | str,
    request: AllocateRequest,
    start: int | None,
    size: int | None,
    holds: PodHolds,
) -> Step | None:
    """The exact Idle match to hand out, verified live, with the spec it needs.

    Verification reads that one instance (at most ten NVML calls, and three more to see that
    no compute, graphics or MPS process runs on it), never the node's layout. A busy match, or
    one whose spec is missing and cannot be composed, is passed over and stays Idle and cached;
    so is one that another pod's annotation claims (the create path then names that pod as a
    blocker).
    """
    hw = node.hardware()
    cdi = node.cdi()
    queued = {q.mig_uuid for q in durable.removals}
    for record in reuse_candidates(durable.records, gpu_ref, request.profile, start, size):
        if holds.hold(record) is not None:
            continue
        live = hw.mig_device(record.mig_uuid)
        if live is None:
            if isinstance(gpu_ref, int) and record.gpu_index not in (None, gpu_ref):
                continue  # recorded on another GPU: not this request's business
            raise UnverifiableError(
                f"Idle record {record.mig_uuid} names an instance that is not live; "
                "run 'hamimig recover'"
            )
        if isinstance(gpu_ref, int) and live.gpu_index != gpu_ref:
            continue  # the index hint was stale: it lives on another GPU
        problem = check_reuse(record, live, hw.profile_name(live.gpu_index, live.profile_id))
        if problem:
            raise UnverifiableError(f"cannot reuse: {problem}; run 'hamimig recover'")
        if has_processes(hw, record.mig_uuid):
            continue  # never handed out; it blocks its slices when the create path plans
        _allowed(node, live.gpu_index, request.profile, model=None)
        spec = None
        if cdi is not None:
            spec = cdi_device_for(
                node,
                record.mig_uuid,
                live.gpu_uuid,
                live.gpu_minor,
                live.gpu_instance_id,
                live.compute_instance_id,
            )
            try:
                cdi.matches(spec)
            except UsageError:
                if not cdi.usable(record.mig_uuid):
                    continue  # no spec, and none can be composed: never handed out without
        target = Handout(record, live, request.owner, spec, record.mig_uuid in queued)
        return Step(ActionKind.REUSE, target, "exact Idle match")
    return None


def _hand_out(node: Node, step: Step) -> Allocation:
    assert isinstance(step.target, Handout)
    applied = apply(node, step)
    assert applied.record is not None
    warnings: tuple[Warning_, ...] = ()
    cdi = node.cdi()
    if applied.note and cdi is not None:
        path = str(cdi.path_of(applied.record.mig_uuid))
        warnings = (Warning_(file=path, reason=applied.note),)
    return Allocation(
        instance=record_view(applied.record, step.target.device.gpu_index),
        outcome=Outcome.REUSED,
        warnings=warnings,
    )


def _require_base(node: Node, gpu_minor: int | None = None) -> None:
    """Refuse (exit 2) an allocation whose new spec could not be composed: no usable NVIDIA
    base spec, or (once the GPU is known) one without that GPU. Checked before any hardware
    change, so a refusal leaves no GI or CI behind."""
    cdi = node.cdi()
    if cdi is None:
        return
    lookup = cdi.lookup()
    if not lookup.composes:
        return
    base = lookup.require()
    if gpu_minor is not None:
        base.parent_edits(gpu_minor)
    # The capability nodes' major too: without it no spec can be composed, and finding that
    # out after the GI and CI exist would create and destroy an instance on every request.
    from hamimig.hw.devnodes import caps_major

    caps_major(node.files().proc_devices)


def _allowed(node: Node, gpu_index: int, profile: str, model: str | None) -> None:
    cfg = node.config()
    if not cfg.profile_allowlist:
        return
    gpu_model = model if model is not None else node.hardware().gpu(gpu_index).model
    if not cfg.profile_allowed(gpu_model, profile):
        raise UsageError(
            f"profile {profile} is not in devices.nvidia.migProfileAllowlist for {gpu_model}"
        )


def _plan_creation(
    node: Node,
    durable: Durable,
    request: AllocateRequest,
    start: int | None,
    size: int | None,
    holds: PodHolds,
) -> list[Step]:
    """Reclaim the Idle (or Error) instances in the way, oldest first, then create."""
    _require_base(node)
    hw = node.hardware()
    gpu = resolve_gpu(hw, request.gpu)
    _require_base(node, gpu.minor)
    if gpu.mig_mode is not MigMode.ENABLED:
        after = f" ({gpu.mig_pending.value} after the next GPU reset)" if gpu.reset_pending else ""
        raise UsageError(f"GPU {gpu.index} has MIG {gpu.mig_mode.value}{after}")
    profile = hw.find_profile(gpu.index, request.profile)
    if profile is None:
        names = ", ".join(p.name for p in hw.profiles(gpu.index))
        raise UsageError(
            f"unknown profile {request.profile!r} on GPU {gpu.index}; profiles: {names}"
        )
    _allowed(node, gpu.index, profile.name, gpu.model)
    requested: Placement | None = None
    if start is not None:
        requested = legal_placement(profile.name, profile.placements, start, size)
    plan = _placement_plan(node, durable, gpu, profile, requested, holds)
    owner = request.owner
    # The reason names the request that forced the reclaim (the event journal keeps it).
    why = f"blocks {plan.placement} for {profile.name} requested by {owner.namespace}/{owner.name}"
    reclaims = [
        Step(ActionKind.RECLAIM, Managed(record, live, gpu.index), why)
        for record, live in plan.reclaim
    ]
    create = NewInstance(gpu, profile, plan.placement, request.owner)
    return [*reclaims, Step(ActionKind.CREATE, create, plan.reason)]


def _placement_plan(
    node: Node,
    durable: Durable,
    gpu: Gpu,
    profile: GiProfile,
    requested: Placement | None,
    holds: PodHolds,
) -> CreatePlan:
    hw = node.hardware()
    layout = hw.layout(gpu.index)
    profile_names = {
        gi.profile_id: hw.profile_name(gpu.index, gi.profile_id) or "" for gi in layout
    }
    profile_names[profile.id] = profile.name
    busy: dict[str, bool] = {}

    def is_busy(record: Record) -> bool:
        if record.mig_uuid not in busy:
            busy[record.mig_uuid] = has_processes(hw, record.mig_uuid)
        return busy[record.mig_uuid]

    return plan_create(
        gpu.uuid,
        profile.placements,
        requested,
        durable.on_gpu(gpu.uuid),
        list(durable.intents),
        layout,
        profile_names,
        is_busy,
        holds,
    )


def _clear_stale_specs(node: Node, durable: Durable, gpu: Gpu) -> None:
    """Before any creation, retry every queued CDI removal; refuse (exit 4, before any NVML
    call) while one still queued names the target GPU's device node.

    A destroyed instance whose spec could not be removed leaves that spec published, and the
    driver gives the next instance at its slot the same GI and CI IDs: the stale spec's
    capability device nodes would then be the new tenant's.
    """
    cdi = node.cdi()
    if cdi is None or not durable.removals:
        return
    for step in _queued_removals(durable).steps:
        with contextlib.suppress(HamimigError, OSError):  # still queued: judged below
            apply(node, step)
    queued, _ = node.queue.load()
    stale = _naming_device(cdi, queued, gpu)  # an entry whose instance is back was dropped
    if stale:
        item = stale[0]
        raise HardwareError(
            f"the CDI spec {cdi.path_of(item.mig_uuid)} of destroyed instance "
            f"{item.mig_uuid} names /dev/nvidia{gpu.minor} and its removal failed again "
            f"({item.last_error}): a new instance on GPU {gpu.index} could get its device "
            "nodes; remove the file, then retry; nothing was changed"
        )


def _retried_first(node: Node, durable: Durable, gpu: Gpu) -> tuple[Warning_, ...]:
    """A dry run's word on the queued removals the real run retries before it creates
    (`_clear_stale_specs`): the dry run applies none, so it cannot know whether one fails
    again; it warns of each whose spec names the target GPU's device node, which the real run
    would then refuse (exit 4)."""
    cdi = node.cdi()
    if cdi is None or not durable.removals:
        return ()
    plan = _queued_removals(durable)
    retried = {s.mig_uuid for s in plan.steps if isinstance(s.target, Spec) and not s.target.keep}
    queued = [item for item in durable.removals if item.mig_uuid in retried]
    return tuple(
        Warning_(
            file=str(cdi.path_of(item.mig_uuid)),
            reason=f"the CDI spec of destroyed instance {item.mig_uuid} names "
            f"/dev/nvidia{gpu.minor} and its removal is queued ({item.last_error}): the real run "
            "retries it first and refuses (exit 4) if it fails again",
        )
        for item in _naming_device(cdi, queued, gpu)
    )


def _queued_removals(durable: Durable) -> Plan:
    from hamimig.engine.recovery import plan_queued_removals  # only with removals queued

    plan = Plan()
    plan_queued_removals(plan, durable)
    return plan


def _naming_device(cdi: CdiStore, queued: Iterable[QueuedRemoval], gpu: Gpu) -> list[QueuedRemoval]:
    """The queued removals whose spec still names `gpu`'s device node."""
    device = f"/dev/nvidia{gpu.minor}"
    return [item for item in queued if device in device_node_paths(cdi.read(item.mig_uuid))]


def _create(node: Node, steps: list[Step]) -> Allocation:
    """Apply the creation plan: an Error instance in the way that still cannot be destroyed
    blocks the placement (exit 3); an Idle one that fails is a hardware failure (exit 4)."""
    reclaimed: list[str] = []
    create = steps[-1].target
    assert isinstance(create, NewInstance)
    for step in steps:
        try:
            applied = apply(node, step)
        except DestroyFailed as exc:
            assert isinstance(step.target, Managed)
            record = step.target.record
            if record.state is State.ERROR:
                blocker = BlockingInstance(
                    mig_uuid=record.mig_uuid,
                    gpu_instance_id=record.gpu_instance_id,
                    profile=record.profile,
                    placement=record.placement,
                    state=State.ERROR,
                )
                raise ConflictError(
                    f"placement {create.placement} is blocked by Error instance "
                    f"{record.mig_uuid} that still cannot be destroyed: {exc.message}",
                    blockers=(Blocked(placement=create.placement, instances=(blocker,)),),
                ) from None
            raise
        if step.target is create:
            assert applied.record is not None
            return Allocation(
                instance=record_view(applied.record, create.gpu.index),
                outcome=Outcome.CREATED,
                reclaimed=tuple(reclaimed),
            )
        reclaimed.append(step.mig_uuid or "")
    raise AssertionError("a creation plan ends with its create step")
