"""`allocate`: idempotent for the same pod slot, exact reuse of an Idle instance, otherwise
reclaim only the Idle instances in the way and create."""

from __future__ import annotations

import dataclasses
import functools
from functools import partial

from hamimig.engine.executor import Applied, execute, tidy_finished
from hamimig.engine.facts import (
    Durable,
    GpuFacts,
    cdi_device_for,
    check_live,
    has_processes,
    load_for_mutation,
    pending_mig_mode,
)
from hamimig.engine.node import Node, legal_placement, resolve_gpu
from hamimig.engine.ownership import PodHolds, held_by
from hamimig.engine.placement import plan_create, reuse_candidates
from hamimig.engine.podsource import PodSource, load_fresh
from hamimig.engine.requests import AllocateRequest
from hamimig.engine.results import Allocation, InstanceView, Warning_, record_view
from hamimig.engine.steps import Handout, Managed, NewInstance, Plan, Spec, Step, Target
from hamimig.errors import (
    NOTHING_CHANGED,
    ConflictError,
    HardwareError,
    NvmlError,
    UnverifiableError,
    UsageError,
)
from hamimig.hw.types import Gpu, MigMode
from hamimig.store.cdi import CdiStore, device_node_paths
from hamimig.store.cdi_base import BaseSpec
from hamimig.store.queue import QueuedRemoval
from hamimig.store.records import Record
from hamimig.vocabulary import ActionKind, Outcome, State


def allocate(
    node: Node, request: AllocateRequest, source: PodSource, dry_run: bool = False
) -> Allocation:
    """Plan (`plan_allocation`), then execute the plan (a dry run only reports it). The pods
    are read under the lock, so an instance another pod's annotation claims is neither handed
    out nor destroyed to make room."""
    reclaimed: tuple[str, ...] = ()
    with node.lock_unless(dry_run):
        durable = load_for_mutation(node, tidy=True, dry_run=dry_run)
        holds = PodHolds.of(load_fresh(node, source), request.owner)
        _check_own_entries(durable, holds, request)
        held = held_by(durable.records, request.owner)
        if held is not None:
            view, outcome = _idempotent(node, held, request), Outcome.UNCHANGED
            warnings = durable.warnings
        else:
            plan = plan_allocation(node, durable, request, holds)
            last = plan.steps[-1].target
            outcome = Outcome.REUSED if isinstance(last, Handout) else Outcome.CREATED
            reclaimed = tuple(step.mig_uuid or "" for step in plan.steps[:-1])
            if dry_run:
                view, warnings = _preview(node, last, durable)
            else:
                _refuse_stale_specs(node, durable, last)
                done = execute(node, plan, dry_run=False)
                tidy_finished(node, durable)
                view, warnings = _reported(node, last, done.results[-1])
    index = view.gpu_index
    try:
        pending = pending_mig_mode(index, *node.hardware().mig_modes(index))
    except NvmlError as exc:  # the allocation is done: a failed look at the mode cannot undo it
        pending = Warning_(
            file=f"GPU {index}", reason=f"MIG mode after the next GPU reset not read: {exc}"
        )
    return Allocation(
        instance=view,
        outcome=outcome,
        reclaimed=reclaimed,
        dry_run=dry_run,
        warnings=warnings if pending is None else (*warnings, pending),
    )


def plan_allocation(
    node: Node, durable: Durable, request: AllocateRequest, holds: PodHolds
) -> Plan:
    """The steps of an allocation whose slot holds nothing yet: one `reuse` of an exact Idle
    match, or the `reclaim`s of the Idle (or Error) instances in the way, then `create`. The
    plan aborts at its first failed step. Refuses (raises) what the request may not have;
    reads, never changes."""
    start, size = request.placement or (None, None)
    candidates = reuse_candidates(durable.records, request.gpu, request.profile, start, size)
    # Nothing to reuse: the creation's refusals (no base spec) come before any NVML call.
    handout = _plan_reuse(node, durable, candidates, request, holds) if candidates else None
    steps = [handout] if handout is not None else _plan_creation(node, durable, request, holds)
    return Plan(steps, abort=True)


def _refuse_stale_specs(node: Node, durable: Durable, last: Target) -> None:
    """Before a creation, retry the queued CDI removals; refuse (exit 4, before any NVML call)
    while one still names the GPU's device node (`_stale_specs`)."""
    if isinstance(last, NewInstance) and (stale := _stale_specs(node, durable, last.gpu, False)):
        cdi, gpu, item = node.cdi(), last.gpu, stale[0]
        assert cdi is not None
        raise HardwareError(
            f"the CDI spec {cdi.path_of(item.mig_uuid)} of destroyed instance "
            f"{item.mig_uuid} names /dev/nvidia{gpu.minor} and its removal failed again "
            f"({item.last_error}): a new instance on GPU {gpu.index} could get its device "
            "nodes; remove the file, then retry; nothing was changed"
        )


def _reported(
    node: Node, last: Target, applied: Applied | Exception
) -> tuple[InstanceView, tuple[Warning_, ...]]:
    """The instance the plan's last step made or handed out; a reuse warns when its spec was
    kept unchecked."""
    assert isinstance(applied, Applied) and applied.record is not None
    if isinstance(last, NewInstance):
        return record_view(applied.record, last.gpu.index), ()
    assert isinstance(last, Handout)
    view, cdi = record_view(applied.record, last.device.gpu_index), node.cdi()
    if not applied.note or cdi is None:
        return view, ()
    path = str(cdi.path_of(applied.record.mig_uuid))
    return view, (Warning_(file=path, reason=applied.note),)


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


def _preview(
    node: Node, last: Target, durable: Durable
) -> tuple[InstanceView, tuple[Warning_, ...]]:
    """A dry run's instance as the run would report it, where that is known before it runs
    (a new instance has no MIG UUID, GI, CI or CDI device yet)."""
    if isinstance(last, Handout):
        record = dataclasses.replace(
            last.record, state=State.ACTIVE, owner=last.owner, cdi_device=last.cdi_device
        )
        return record_view(record, last.device.gpu_index), durable.warnings
    assert isinstance(last, NewInstance)
    view = InstanceView(
        mig_uuid=None,
        gpu_uuid=last.gpu.uuid,
        gpu_index=last.gpu.index,
        profile=last.profile.name,
        placement=last.placement,
        gpu_instance_id=None,
        compute_instance_id=None,
        state=State.CREATING,
        owner=last.owner,
    )
    cdi, gpu = node.cdi(), last.gpu
    retried = tuple(
        Warning_(
            file=str(cdi.path_of(item.mig_uuid)) if cdi is not None else "",
            reason=f"the CDI spec of destroyed instance {item.mig_uuid} names "
            f"/dev/nvidia{gpu.minor} and its removal is queued ({item.last_error}): the real "
            "run retries it first and refuses (exit 4) if it fails again",
        )
        for item in _stale_specs(node, durable, gpu, dry_run=True)
    )
    return view, durable.warnings + retried


def _idempotent(node: Node, record: Record, request: AllocateRequest) -> InstanceView:
    """The slot already holds an instance: the same one again (nothing changes), or a clash."""
    gpu_ref, (start, size) = request.gpu, request.placement or (None, None)
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
    if problem := check_live(hw, record, live):
        raise UnverifiableError(
            f"the instance held by {request.owner} failed verification: {problem}"
        )
    return record_view(record, live.gpu_index)


def _plan_reuse(
    node: Node,
    durable: Durable,
    candidates: list[Record],
    request: AllocateRequest,
    holds: PodHolds,
) -> Step | None:
    """The exact Idle match to hand out, verified live with its spec, reading only that one
    instance, never the node's layout (docs/performance.md's budget). A busy, claimed or
    spec-less match is passed over and stays Idle; one that cannot be verified, or whose spec
    name holds a file that is not its spec by content, is refused (exit 5)."""
    gpu_ref = request.gpu
    hw = node.hardware()
    cdi = node.cdi()
    queued = {q.mig_uuid for q in durable.removals}
    for record in candidates:
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
        if problem := check_live(hw, record, live):
            raise UnverifiableError(f"cannot reuse: {problem}; run 'hamimig recover'")
        if has_processes(hw, record.mig_uuid):
            continue  # never handed out; it blocks its slices when the create path plans
        _allowed(node, live.gpu_index, request.profile, model=None)
        spec, kept, name = None, None, record.cdi_device
        if cdi is not None:
            _refuse_foreign_spec(cdi, record.mig_uuid)
            ids = (live.gpu_uuid, live.gpu_minor, live.gpu_instance_id, live.compute_instance_id)
            dev = cdi_device_for(node, record.mig_uuid, *ids)
            name = cdi.qualified_name(record.mig_uuid)
            try:
                spec = None if cdi.matches(dev) else dev
            except UsageError as exc:
                if not cdi.usable(record.mig_uuid):
                    continue  # no spec, and none can be composed: never handed out without
                kept = f"kept as it is, not compared with the NVIDIA CDI spec: {exc.message}"
        target = Handout(record, live, request.owner, spec, name, record.mig_uuid in queued, kept)
        return Step(ActionKind.REUSE, target, "exact Idle match")
    return None


def _refuse_foreign_spec(cdi: CdiStore, mig_uuid: str) -> None:
    """Refuse (exit 5) to hand out an Idle instance whose spec name holds a file that is not its
    spec by content (`CdiStore.foreign`), as an instance that cannot be verified is refused:
    that file is never overwritten, nor handed to a pod as the instance's spec, and passing the
    instance over would let the creation reclaim it instead."""
    refusal = cdi.overwrite_refusal(mig_uuid)
    if refusal is not None:
        raise UnverifiableError(f"cannot reuse {mig_uuid}: {refusal}; {NOTHING_CHANGED}")


def _require_base(node: Node) -> tuple[BaseSpec | None, int | None]:
    """Refuse (exit 2) an allocation whose new spec could not be composed (no usable base spec,
    no capability major), before any hardware change: found after, it would create and destroy
    an instance on every request. Returns what the creation composes from."""
    cdi = node.cdi()
    if cdi is None or not cdi.lookup().composes:
        return None, None
    base = cdi.lookup().require()
    from hamimig.hw.devnodes import caps_major

    return base, caps_major(node.files().proc_devices)


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
    node: Node, durable: Durable, request: AllocateRequest, holds: PodHolds
) -> list[Step]:
    """Reclaim the Idle (or Error) instances in the way, oldest first, then create."""
    base, major = _require_base(node)
    hw = node.hardware()
    gpu = resolve_gpu(hw, request.gpu)
    if base is not None:
        base.parent_edits(gpu.minor)  # the base must have this GPU too
    if gpu.mig_mode is not MigMode.ENABLED:
        after = f" ({gpu.mig_pending.value} after the next GPU reset)" if gpu.reset_pending else ""
        raise UsageError(f"GPU {gpu.index} has MIG {gpu.mig_mode.value}{after}")
    profile = hw.find_profile(gpu.index, request.profile)
    if profile is None:
        known = ", ".join(p.name for p in hw.profiles(gpu.index))
        raise UsageError(
            f"unknown profile {request.profile!r} on GPU {gpu.index}; profiles: {known}"
        )
    _allowed(node, gpu.index, profile.name, gpu.model)
    start, size = request.placement or (None, None)
    legal = (
        None if start is None else legal_placement(profile.name, profile.placements, start, size)
    )
    layout = hw.layout(gpu.index)
    names = {**GpuFacts.named(hw, gpu, layout).names, profile.id: profile.name}
    busy = functools.cache(partial(has_processes, hw))
    plan = plan_create(
        gpu.uuid,
        profile.placements,
        legal,
        durable.on_gpu(gpu.uuid),
        list(durable.intents),
        layout,
        names,
        lambda record: busy(record.mig_uuid),
        holds,
    )
    owner = request.owner
    # The reason names the request that forced the reclaim (the event journal keeps it).
    why = f"blocks {plan.placement} for {profile.name} requested by {owner.namespace}/{owner.name}"
    reclaims = [
        Step(ActionKind.RECLAIM, Managed(record, live, gpu.index), why)
        for record, live in plan.reclaim
    ]
    create = NewInstance(gpu, profile, plan.placement, request.owner, major)
    return [*reclaims, Step(ActionKind.CREATE, create, plan.reason)]


def _stale_specs(node: Node, durable: Durable, gpu: Gpu, dry_run: bool) -> list[QueuedRemoval]:
    """The queued CDI removals whose spec names the target GPU's device node, which block a
    creation (docs/formats.md "The CDI removal queue": a stale spec's capability nodes would be
    the next tenant's). A dry run retries none, so it names each such one it would retry."""
    cdi = node.cdi()
    if cdi is None or not durable.removals:
        return []
    from hamimig.engine.recovery import plan_queued_removals  # only with removals queued

    plan = Plan()
    plan_queued_removals(plan, durable)
    if dry_run:
        retried = {
            s.mig_uuid for s in plan.steps if isinstance(s.target, Spec) and not s.target.keep
        }
        queued = [item for item in durable.removals if item.mig_uuid in retried]
    else:
        execute(node, plan, dry_run=False)  # an entry whose instance is back was dropped
        queued, _ = node.queue.load()
    device = f"/dev/nvidia{gpu.minor}"
    return [item for item in queued if device in device_node_paths(cdi.read(item.mig_uuid))]
