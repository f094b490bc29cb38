"""`allocate`: idempotent for the same pod slot, exact reuse of an Idle instance, otherwise
reclaim only the Idle instances in the way and create."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from hamimig.engine import validate
from hamimig.engine.executor import (
    DestroyFailed,
    cdi_device_for,
    create_instance,
    destroy_managed,
    refresh_spec,
    set_state,
)
from hamimig.engine.facts import (
    Durable,
    check_reuse,
    has_processes,
    load_for_mutation,
    tidy_finished,
)
from hamimig.engine.inventory import record_view
from hamimig.engine.metrics import CREATIONS, REUSES, count
from hamimig.engine.node import Node, legal_placement, parse_gpu_ref, parse_placement, resolve_gpu
from hamimig.engine.plans import CreatePlan, held_by, plan_create, reuse_candidates
from hamimig.engine.views import Allocation, Warning_
from hamimig.errors import ConflictError, HardwareError, UnverifiableError, UsageError
from hamimig.hw.types import MigMode, Placement
from hamimig.store.records import Owner, Record, RecordState
from hamimig.vocabulary import Outcome


@dataclass(frozen=True)
class AllocateRequest:
    owner: Owner
    gpu: str
    profile: str
    placement: str | None = None


def parse_pod(text: str) -> tuple[str, str]:
    """`NAMESPACE/NAME` as Kubernetes spells them (a DNS-1123 label and subdomain)."""
    parts = text.split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"invalid pod {text!r}: use NAMESPACE/NAME")
    return validate.namespace(parts[0]), validate.pod_name(parts[1])


def make_request(
    pod: str,
    pod_uid: str | None,
    container_index: int,
    device_index: int,
    gpu: str,
    profile: str,
    placement: str | None,
) -> AllocateRequest:
    namespace, name = parse_pod(pod)
    validate.index(container_index, "--container-index")
    validate.index(device_index, "--device-index")
    if pod_uid is not None:
        pod_uid = validate.pod_uid(pod_uid, "--pod-uid")
    owner = Owner(namespace, name, pod_uid, container_index, device_index)
    return AllocateRequest(owner=owner, gpu=gpu, profile=profile, placement=placement)


def allocate(node: Node, request: AllocateRequest) -> Allocation:
    gpu_ref = parse_gpu_ref(request.gpu)
    start, size = parse_placement(request.placement) if request.placement else (None, None)
    with node.lock():
        durable = load_for_mutation(node, tidy=True)
        held = held_by(durable.records, request.owner)
        if held is not None:
            return _idempotent(node, held, gpu_ref, request, start, size)
        if not reuse_candidates(durable.records, gpu_ref, request.profile, start, size):
            _require_base(node)  # nothing to reuse: a new spec, refused before any NVML call
        result = _try_reuse(node, durable, gpu_ref, request, start, size)
        if result is None:
            result = _create(node, durable, request, start, size)
        tidy_finished(node, durable)
        return result


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


def _try_reuse(
    node: Node,
    durable: Durable,
    gpu_ref: int | str,
    request: AllocateRequest,
    start: int | None,
    size: int | None,
) -> Allocation | None:
    """Hand out an exact Idle match after verifying it live and repairing its CDI spec.

    Any failure leaves the instance Idle and cached. Verification reads that one instance
    (at most ten NVML calls, and one more to see that no process runs on it), never the node's
    layout.
    """
    hw = node.hardware()
    for record in reuse_candidates(durable.records, gpu_ref, request.profile, start, size):
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
        cdi = node.cdi()
        cdi_name = record.cdi_device
        warnings: list[Warning_] = []
        try:
            if cdi is not None:
                dev = cdi_device_for(
                    node,
                    record.mig_uuid,
                    live.gpu_uuid,
                    live.gpu_minor,
                    live.gpu_instance_id,
                    live.compute_instance_id,
                )
                cdi_name = cdi.qualified_name(record.mig_uuid)
                try:
                    kept = refresh_spec(cdi, dev)
                except UsageError:
                    continue  # no spec, and none can be composed: never handed out without
                if kept:
                    warnings.append(Warning_(str(cdi.path_of(record.mig_uuid)), kept))
            active = set_state(
                node,
                record,
                RecordState.ACTIVE,
                owner=request.owner,
                cdi_device=cdi_name,
                gpu_index=live.gpu_index,
            )
        except OSError as exc:
            raise HardwareError(
                f"reuse of {record.mig_uuid} failed ({exc.strerror or exc}); it stays Idle"
            ) from None
        if any(q.mig_uuid == record.mig_uuid for q in durable.removals):
            # An interrupted forget queued this spec's removal; the spec is the instance's
            # again (reconcile would drop the entry too, but nothing should ever remove it).
            with contextlib.suppress(OSError):
                node.queue().drop(record.mig_uuid)
        count(node, REUSES)
        return Allocation(
            instance=record_view(active, live.gpu_index),
            outcome=Outcome.REUSED,
            warnings=tuple(warnings),
        )
    return None


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


def _create(
    node: Node, durable: Durable, request: AllocateRequest, start: int | None, size: int | None
) -> Allocation:
    _require_base(node)
    hw = node.hardware()
    gpu = resolve_gpu(hw, request.gpu)
    _require_base(node, gpu.minor)
    if gpu.mig_mode is not MigMode.ENABLED:
        raise UsageError(f"GPU {gpu.index} has MIG {gpu.mig_mode.value}")
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

    plan: CreatePlan = plan_create(
        gpu.uuid,
        profile.placements,
        requested,
        durable.on_gpu(gpu.uuid),
        list(durable.intents),
        layout,
        profile_names,
        is_busy,
    )
    reclaimed: list[str] = []
    for record, live in plan.reclaim:
        was_error = record.state is RecordState.ERROR
        try:
            destroy_managed(node, record, live, gpu.index)
        except DestroyFailed as exc:
            if was_error:
                raise ConflictError(
                    f"placement {plan.placement} is blocked by Error instance {record.mig_uuid} "
                    f"that still cannot be destroyed: {exc.message}"
                ) from None
            raise
        reclaimed.append(record.mig_uuid)
    record = create_instance(node, gpu, profile, plan.placement, request.owner)
    count(node, CREATIONS)
    return Allocation(
        instance=record_view(record, gpu.index),
        outcome=Outcome.CREATED,
        reclaimed=tuple(reclaimed),
    )
