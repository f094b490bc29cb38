"""Read-only views of the node: the live layout joined with records and intents, and profiles.

Nothing here mutates hardware or files and nothing takes the node lock; an unreadable record
becomes a warning, never a failure.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from hamimig.engine.facts import (
    Durable,
    GpuFacts,
    Liveness,
    check_record,
    ci_created_by,
    created_by,
    forget_line,
    load_durable,
    pending_mig_mode,
    process_count_on,
)
from hamimig.engine.lookup import resolve_instance
from hamimig.engine.node import Node, select_gpus
from hamimig.engine.results import InstanceView, Warning_, intent_view, record_view
from hamimig.engine.safety import node_problems
from hamimig.errors import HamimigError, NotFoundError, UsageError
from hamimig.hw.types import MEMORY_SLICES, Gpu, GpuInstance, MigDevice, MigHardware, MigMode
from hamimig.reports.views import (
    GpuProfiles,
    GpuView,
    InstanceDetail,
    InstanceList,
    ProfileList,
    ProfileView,
)
from hamimig.store.intents import Intent
from hamimig.store.records import Record, record_name
from hamimig.vocabulary import State


def _memory_slices(hw: MigHardware, gpu: Gpu) -> int:
    if gpu.mig_mode is MigMode.UNSUPPORTED:
        return 0
    ends = [p.end for prof in hw.profiles(gpu.index) for p in prof.placements]
    return max(ends, default=MEMORY_SLICES)


def _intent_view(intent: Intent, gpu_index: int, gi: GpuInstance | None) -> InstanceView:
    error = f"allocation in flight or interrupted (intent {intent.id})"
    return intent_view(intent, gpu_index, gi.id if gi else intent.gpu_instance_id, error)


@dataclass
class _Claims:
    """One GPU's live layout, and what its records and intents account for, filled in as they
    are matched."""

    facts: GpuFacts
    durable: Durable
    records: set[str]
    intents: set[str]
    views: list[InstanceView] = field(default_factory=list)
    pairs: set[tuple[int, int]] = field(default_factory=set)
    gis: set[int] = field(default_factory=set)


def gpu_instances(
    node: Node, hw: MigHardware, gpu: Gpu, durable: Durable, records: set[str], intents: set[str]
) -> list[InstanceView]:
    """One GPU's instances: live GI/CI pairs and orphan GIs, named by the record or intent that
    owns them. Adds the record UUIDs and intent IDs that were matched to `records` and
    `intents`."""
    if gpu.mig_mode is not MigMode.ENABLED:
        return []
    claims = _Claims(GpuFacts.listed(hw, gpu), durable, records, intents)
    _claim_recorded(claims)
    _claim_the_rest(node, claims)
    out = [_with_count_of_cis(_with_processes(hw, v), claims.facts.layout) for v in claims.views]
    out.sort(key=lambda v: (v.placement.start, v.gpu_instance_id or 0, v.compute_instance_id or 0))
    return out


def _with_count_of_cis(view: InstanceView, layout: tuple[GpuInstance, ...]) -> InstanceView:
    counts = {gi.id: len(gi.compute_instances) for gi in layout}
    if view.gpu_instance_id not in counts:
        return view
    return view.model_copy(update={"compute_instance_count": counts[view.gpu_instance_id]})


def _intent_at(durable: Durable, gpu: Gpu, gi: GpuInstance) -> Intent | None:
    """The allocation in flight that made (or is making) this GI, if any, by recovery's rule
    (`created_by`): a GI that request cannot have created is not shown as its."""
    return next(
        (i for i in durable.intents if i.gpu_uuid == gpu.uuid and created_by(i, gi)),
        None,
    )


def _claim_recorded(claims: _Claims) -> None:
    """The views of records whose GI (with or without its CI) is live."""
    gpu, durable = claims.facts.gpu, claims.durable
    for record in durable.on_gpu(gpu.uuid):
        live = check_record(record, claims.facts.layout, claims.facts.names)
        if live.status is Liveness.COMPLETE:
            claims.pairs.add((record.gpu_instance_id, record.compute_instance_id))
        elif live.status is Liveness.GI_ONLY:
            claims.gis.add(record.gpu_instance_id)
        else:
            continue
        claims.records.add(record.mig_uuid)
        intent = _intent_at(durable, gpu, live.gi) if live.gi is not None else None
        if intent is not None and intent.mig_uuid == record.mig_uuid:
            # The record was written but the intent not yet removed: one allocation, in flight.
            claims.intents.add(intent.id)
            claims.gis.add(record.gpu_instance_id)
            claims.views.append(_intent_view(intent, gpu.index, live.gi))
            continue
        error = None if live.status is Liveness.COMPLETE else live.detail
        claims.views.append(record_view(record, gpu.index, error=error or record.error))


def _claim_the_rest(node: Node, claims: _Claims) -> None:
    """The live GIs and pairs no record claimed: an allocation in flight, or unmanaged.

    An intent's Creating row stands only for what its request can have created
    (`ci_created_by`); any other live CI there gets its own Unmanaged row, so none is hidden."""
    gpu, durable = claims.facts.gpu, claims.durable
    for gi in claims.facts.layout:
        if gi.id in claims.gis:
            continue
        profile = claims.facts.names.get(gi.profile_id, f"profile-{gi.profile_id}")
        intent = _intent_at(durable, gpu, gi)
        cis = gi.compute_instances
        if intent is not None and intent.id not in claims.intents:
            claims.intents.add(intent.id)
            claims.views.append(_intent_view(intent, gpu.index, gi))
            cis = tuple(ci for ci in cis if not ci_created_by(intent, gi, ci))
        elif not cis:
            claims.views.append(_unmanaged(gi, profile, None, None))
        for ci in cis:
            if (gi.id, ci.id) not in claims.pairs:
                view = _unmanaged(gi, profile, ci.id, ci.mig_uuid)
                claims.views.append(_unreadable(node, view, durable))


_LIVE_PAIR_STATES = frozenset(State) - {State.MISSING, State.ORPHAN_GI}


def _with_count(hw: MigHardware, view: InstanceView, mig_uuid: str) -> InstanceView:
    """`view` with `processes` and `processCount` of a live MIG device (compute, graphics and
    MPS processes: three NVML calls)."""
    count = process_count_on(hw, mig_uuid)
    busy = None if count is None else count > 0
    return view.model_copy(update={"processes": busy, "process_count": count})


def _with_processes(hw: MigHardware, view: InstanceView) -> InstanceView:
    """A live MIG device's view, with whether processes run on it (never for a GI alone)."""
    if view.mig_uuid is None or view.compute_instance_id is None:
        return view
    return _with_count(hw, view, view.mig_uuid) if view.state in _LIVE_PAIR_STATES else view


def _unmanaged(
    gi: GpuInstance, profile: str, ci_id: int | None, mig_uuid: str | None
) -> InstanceView:
    """A live GI (with the CI `ci_id` and its MIG UUID, or none) that no record accounts for."""
    return InstanceView(
        mig_uuid=mig_uuid,
        gpu_uuid=gi.gpu_uuid,
        gpu_index=gi.gpu_index,
        profile=profile,
        placement=gi.placement,
        gpu_instance_id=gi.id,
        compute_instance_id=ci_id,
        state=State.UNMANAGED if mig_uuid else State.ORPHAN_GI,
    )


def _unreadable(node: Node, view: InstanceView, durable: Durable) -> InstanceView:
    """An instance without a usable record is Unreadable, not Unmanaged, when the file at its
    record's name (the sha256 of its MIG UUID) cannot be read: it may well be someone's, so it
    is shown as what blocks the node (and what `hamimig forget` takes), never as free to adopt.
    A view only: mutating commands refuse the node while any record cannot be read."""
    if view.mig_uuid is None:
        return view
    problem = durable.unreadable_records().get(record_name(view.mig_uuid))
    if problem is None:
        return view
    error = (
        f"its record {problem.file} cannot be read ({problem.reason}): repair it, or drop it "
        f"with: {forget_line(problem, node)}"
    )
    return view.model_copy(update={"state": State.UNREADABLE, "error": error})


def _warnings(node: Node, durable: Durable) -> tuple[Warning_, ...]:
    """Unreadable records, and what would make mutating commands refuse the node."""
    unreadable = tuple(Warning_(file=p.file, reason=p.reason) for p in durable.problems)
    return unreadable + tuple(node_problems(node, durable.records))


@dataclass(frozen=True)
class ListFilter:
    """`list`'s filters besides `--gpu`, combined with AND; an empty one keeps everything.
    `states` keeps any of those states; `pod` (`NAMESPACE`, `NAME`) matches an owner, which
    only Active and Creating instances have."""

    states: frozenset[State] = frozenset()
    pod: tuple[str, str] | None = None
    profile: str | None = None

    def keeps(self, view: InstanceView) -> bool:
        owner = None if view.owner is None else (view.owner.namespace, view.owner.name)
        return (
            (not self.states or view.state in self.states)
            and (self.pod is None or owner == self.pod)
            and (self.profile is None or view.profile == self.profile)
        )


def list_instances(
    node: Node, gpu_ref: int | str | None = None, wanted: ListFilter | None = None
) -> InstanceList:
    """Every instance (of one GPU with `gpu_ref`), kept by `wanted`."""
    hw = node.hardware()
    durable = load_durable(node)
    gpus = select_gpus(hw, gpu_ref)
    instances: list[InstanceView] = []
    views: list[GpuView] = []
    seen_records: set[str] = set()
    seen_intents: set[str] = set()
    for gpu in gpus:
        views.append(
            GpuView(
                index=gpu.index,
                uuid=gpu.uuid,
                model=gpu.model,
                mig_mode=gpu.mig_mode,
                memory_slices=_memory_slices(hw, gpu),
                mig_pending=gpu.mig_pending,
            )
        )
        instances += gpu_instances(node, hw, gpu, durable, seen_records, seen_intents)
    shown = {g.uuid: g.index for g in gpus}
    every_gpu = gpu_ref is None
    for record in durable.records.values():
        if record.mig_uuid not in seen_records and (every_gpu or record.gpu_uuid in shown):
            instances.append(_missing(record, shown.get(record.gpu_uuid, -1)))
    for intent in durable.intents:
        if intent.id not in seen_intents and (every_gpu or intent.gpu_uuid in shown):
            instances.append(_intent_view(intent, shown.get(intent.gpu_uuid, -1), None))
    if wanted is not None:
        if wanted.profile is not None:
            _check_profile(hw, gpus, instances, wanted.profile)
        instances = [i for i in instances if wanted.keeps(i)]
    return InstanceList(
        instances=tuple(instances),
        gpus=tuple(views),
        warnings=_warnings(node, durable),
        queued_removals=tuple(durable.removals),
    )


def _check_profile(
    hw: MigHardware, gpus: list[Gpu], instances: list[InstanceView], profile: str
) -> None:
    """A profile filter naming nothing these GPUs offer is a typo (or an unset variable), not
    "no instances": a script would read the empty answer as "none left"."""
    known = {i.profile for i in instances}
    for gpu in gpus:
        if gpu.mig_mode is MigMode.UNSUPPORTED:
            continue
        with contextlib.suppress(HamimigError):
            known |= {p.name for p in hw.profiles(gpu.index)}
    if profile not in known:
        offered = ", ".join(sorted(known)) or "none"
        raise UsageError(f"unknown profile {profile!r}: this node's GPUs offer {offered}")


def show_instance(node: Node, mig_uuid: str) -> InstanceDetail:
    """One instance by MIG UUID (or a unique prefix of one, or its CDI device name: see
    `engine.lookup`): managed (record), unmanaged (live only) or missing."""
    hw = node.hardware()
    durable = load_durable(node)
    mig_uuid = resolve_instance(node, mig_uuid, False, durable.records, durable.intents)
    record = durable.records.get(mig_uuid)
    live = hw.mig_device(mig_uuid)
    cdi = node.cdi()
    cdi_path = str(cdi.path_of(mig_uuid)) if cdi is not None and cdi.exists(mig_uuid) else None
    if record is not None:
        if live is not None:
            view = _with_processes(hw, record_view(record, live.gpu_index))
        else:
            view = _record_without_mig_device(hw, record)
    elif (intent := next((i for i in durable.intents if i.mig_uuid == mig_uuid), None)) is not None:
        view = _in_flight(hw, intent, live)  # an allocation in flight, as `list` shows it
    elif live is None:
        raise NotFoundError(f"no MIG instance {mig_uuid} on this node and no record of it")
    else:
        name = hw.profile_name(live.gpu_index, live.profile_id) or f"profile-{live.profile_id}"
        # The GI its MIG device lives in, as far as the device says (its CIs are not read).
        gi = GpuInstance(
            live.gpu_index, live.gpu_uuid, live.gpu_instance_id, live.profile_id, live.placement, ()
        )
        view = _unmanaged(gi, name, live.compute_instance_id, mig_uuid)
        view = _with_count(hw, _unreadable(node, view, durable), mig_uuid)
    if live is not None:
        view = _with_count_of_cis(view, hw.layout(live.gpu_index))
    return InstanceDetail(
        instance=view,
        record=str(node.records.path_of(mig_uuid))
        if record is not None or view.state is State.UNREADABLE
        else None,
        cdi_spec=cdi_path,
        warnings=_warnings(node, durable),
    )


def _in_flight(hw: MigHardware, intent: Intent, live: MigDevice | None) -> InstanceView:
    """An intent that names a MIG UUID and has no record yet: Creating, as `list` shows it."""
    if live is None:
        try:
            index = hw.gpu_by_uuid(intent.gpu_uuid).index
        except UsageError:
            index = -1
        return _intent_view(intent, index, None)
    ids = {"gpu_instance_id": live.gpu_instance_id, "compute_instance_id": live.compute_instance_id}
    view = _intent_view(intent, live.gpu_index, None).model_copy(update=ids)
    return _with_count(hw, view, intent.mig_uuid or live.mig_uuid)


def _record_without_mig_device(hw: MigHardware, record: Record) -> InstanceView:
    """A record whose MIG device is gone: a GI left behind (half-destroyed) keeps the record's
    state, as `list` shows it; nothing live at all is Missing."""
    try:
        gpu = hw.gpu_by_uuid(record.gpu_uuid)
    except UsageError:
        return _missing(record, -1)
    if gpu.mig_mode is MigMode.ENABLED:
        facts = GpuFacts.listed(hw, gpu)
        live = check_record(record, facts.layout, facts.names)
        if live.status is Liveness.GI_ONLY:
            return record_view(record, gpu.index, error=live.detail)
    return _missing(record, gpu.index)


def _missing(record: Record, gpu_index: int) -> InstanceView:
    """A record with nothing live: Missing."""
    missing = f"recorded as {record.state.value} but not live"
    return record_view(record, gpu_index, state=State.MISSING, error=missing)


def list_profiles(hw: MigHardware, gpu_ref: int | str | None = None) -> ProfileList:
    """Each GPU's profiles with how many more of each fit now (none while MIG is not enabled),
    and a warning for a GPU whose next reset changes its MIG mode."""
    out: list[GpuProfiles] = []
    warnings: list[Warning_] = []
    for gpu in select_gpus(hw, gpu_ref):
        profiles = () if gpu.mig_mode is MigMode.UNSUPPORTED else hw.profiles(gpu.index)
        enabled = gpu.mig_mode is MigMode.ENABLED
        pending = pending_mig_mode(gpu.index, gpu.mig_mode, gpu.mig_pending)
        if pending is not None:
            warnings.append(pending)
        out.append(
            GpuProfiles(
                index=gpu.index,
                uuid=gpu.uuid,
                model=gpu.model,
                profiles=tuple(
                    ProfileView(
                        name=p.name,
                        id=p.id,
                        slice_count=p.slice_count,
                        memory_mb=p.memory_mb,
                        max_instances=p.max_instances,
                        placements=p.placements,
                        free_instances=hw.remaining_capacity(gpu.index, p.id) if enabled else 0,
                    )
                    for p in profiles
                ),
            )
        )
    return ProfileList(gpus=tuple(out), warnings=tuple(warnings))
