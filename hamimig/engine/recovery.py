"""Startup recovery and adoption: plan everything, verify the whole plan, then execute, in the
phase order of docs/design.md "The pipeline", each phase one function over one `_Survey`.
Anything unverifiable stops recovery before its first change (exit 5): changing uncertain
hardware state is how one tenant's slice ends up with another.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hamimig.engine.executor import execute
from hamimig.engine.facts import (
    Durable,
    GpuFacts,
    LiveCheck,
    Liveness,
    cdi_device_for,
    check_record,
    created_by,
    gi_holds,
    has_processes,
    live_pairs,
    load_for_mutation,
    same_slot,
    shared_gi_reason,
    uuid_elsewhere,
)
from hamimig.engine.node import Node, select_gpus
from hamimig.engine.ownership import PodHolds, holding_pods, owned_by
from hamimig.engine.podsource import PodSource, changed_after, stale, stale_warning
from hamimig.engine.results import ActionReport, SkippedGpu, Warning_
from hamimig.engine.steps import InFlight, Managed, OrphanGi, Pair, Plan, Spec, Where
from hamimig.errors import NvmlError, UsageError
from hamimig.hw.types import ComputeInstance, Gpu, GpuInstance, MigHardware, MigMode
from hamimig.store.cdi import CdiStore, spec_file_name
from hamimig.store.intents import Intent
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import ActionKind, State

if TYPE_CHECKING:
    from hamimig.pods.annotation import MigAllocation
    from hamimig.pods.model import Pod
    from hamimig.pods.sources import PodSnapshot


@dataclass
class _Survey:
    """One recovery's snapshot (records, pods, each MIG GPU's layout), the plan it builds and
    what that plan has accounted for so far (instances, GIs, and GPUs pods use), shared by the
    phases instead of a dozen parameters."""

    node: Node
    durable: Durable
    gpus: dict[str, GpuFacts]
    holding: list[Pod]
    pods: PodSnapshot | None
    plan: Plan
    pods_known: bool = True
    only_gpu: int | str | None = None
    claimed: dict[str, str] = field(default_factory=dict)  # MIG UUID -> who claims it
    claimed_gis: set[tuple[str, int]] = field(default_factory=set)  # (GPU UUID, GI ID)
    busy_gpus: set[str] = field(default_factory=set)  # GPUs with a live pod allocation

    @functools.cached_property
    def holds(self) -> PodHolds:
        """What the holding pods claim, read once per recovery (a pod list may be large)."""
        return PodHolds.of(self.pods)

    def may_be_held(self, record: Record) -> str | None:
        """Why a complete Error or Reclaiming instance must not be destroyed: a pod's entry
        claims it, or the pod list is too old to say that none does (HAMi's plugin restores
        such records as Idle and hands them out by writing only the pod's annotation)."""
        hold = self.holds.hold(record)
        if hold is not None:
            return hold.reason
        why = None if self.pods is None else stale(self.node, self.pods)
        return None if why is None else f"a pod may hold it: {why}"


def owner_pod(record: Record, pods: list[Pod]) -> Pod | None:
    """The first of `pods` that an Active record names as its owner."""
    owner = record.owner
    if owner is None or record.state is not State.ACTIVE:
        return None
    return next((pod for pod in pods if owned_by(owner, pod)), None)


def plan_recovery(
    node: Node,
    durable: Durable,
    pods: PodSnapshot | None,
    adopt: bool,
    only_gpu: int | str | None = None,
    pairs_only: bool = False,
    pods_known: bool = True,
) -> Plan:
    """Build and verify the whole plan, every refusal collected. `pairs_only` is `adopt` (pairs
    only; records, intents and orphan GIs are `recover`'s). `pods_known` False is `doctor`
    without pods: processes on an Active instance are not held against it (likely its pod's)."""
    plan = Plan()
    gpus = _survey_gpus(node.hardware(), plan, only_gpu)
    holding = holding_pods(pods) if pods is not None else []
    survey = _Survey(node, durable, gpus, holding, pods, plan, pods_known, only_gpu)
    _claim_pod_allocations(survey)
    if pairs_only:
        _leave_to_recover(survey)
        _plan_unknown(survey, adopt=True, orphans=False)
        return plan
    _reconcile_records(survey)
    for intent in durable.intents:
        _plan_intent(survey, intent)
    _plan_unknown(survey, adopt, orphans=adopt)
    _plan_cdi_files(survey)
    return plan


def _survey_gpus(hw: MigHardware, plan: Plan, only_gpu: int | str | None) -> dict[str, GpuFacts]:
    out: dict[str, GpuFacts] = {}
    for gpu in select_gpus(hw, only_gpu):
        mode = gpu.mig_mode.value
        if gpu.mig_mode is not MigMode.ENABLED:
            skip = SkippedGpu(index=gpu.index, uuid=gpu.uuid, mig_mode=mode, reason=f"MIG {mode}")
            plan.skipped.append(skip)
        else:
            out[gpu.uuid] = GpuFacts.listed(hw, gpu)
    return out


def _leave_to_recover(survey: _Survey) -> None:
    """`adopt` claims only what nobody accounts for: records and in-flight allocations
    (intents) belong to `recover`, which alone may restore or undo them."""
    for record in survey.durable.records.values():
        survey.claimed.setdefault(record.mig_uuid, "record")
        survey.claimed_gis.add((record.gpu_uuid, record.gpu_instance_id))
    for intent in survey.durable.intents:
        gpu = survey.gpus.get(intent.gpu_uuid)
        for gi in gpu.layout if gpu else ():
            if gi.placement.overlaps(intent.placement):
                survey.claimed_gis.add((intent.gpu_uuid, gi.id))


# --------------------------------------------------------------------------------------------
# 1. Runtime identities referenced by active pods


def _claim_pod_allocations(survey: _Survey) -> None:
    for pod in survey.holding:
        for alloc in pod.allocations:
            survey.busy_gpus.add(alloc.gpu_uuid)
            if alloc.has_runtime_identity:
                _claim_allocation(survey, pod, alloc)


def _claim_allocation(survey: _Survey, pod: Pod, alloc: MigAllocation) -> None:
    assert alloc.mig_uuid is not None
    plan = survey.plan
    where = f"pod {pod.key} container {alloc.container_index} device {alloc.device_index}"
    gpu = survey.gpus.get(alloc.gpu_uuid)
    if gpu is None:
        if survey.only_gpu is None:
            plan.refuse(
                f"{where} names {alloc.mig_uuid} on GPU {alloc.gpu_uuid}, which is not a "
                "MIG-enabled GPU of this node"
            )
        return
    pair = _find_pair(gpu, alloc)
    if isinstance(pair, str):
        plan.refuse(
            f"{where} names {alloc.mig_uuid} ({alloc.profile} at {alloc.placement}, GI "
            f"{alloc.gpu_instance_id}, CI {alloc.compute_instance_id}) but the live layout "
            f"differs: {pair}"
        )
        return
    mig_uuid = pair[1].mig_uuid  # as the driver spells it, which records and claims use
    if mig_uuid in survey.claimed:
        plan.refuse(f"{mig_uuid} is claimed by {survey.claimed[mig_uuid]} and by {where}")
        return
    survey.claimed[mig_uuid] = where
    survey.claimed_gis.add((alloc.gpu_uuid, pair[0].id))
    record = survey.durable.records.get(mig_uuid)
    if (problem := _record_disagrees(survey, record, pod, alloc, where)) is not None:
        plan.refuse(problem)
        return
    owner = Owner(pod.namespace, pod.name, pod.uid, alloc.container_index, alloc.device_index)
    _activate(survey, Pair(gpu.gpu, pair[0], pair[1], alloc.profile, owner, record), where)


def _find_pair(gpu: GpuFacts, alloc: MigAllocation) -> tuple[GpuInstance, ComputeInstance] | str:
    """The live pair an annotation names, when its whole identity matches (the MIG UUID
    without regard to case, as annotations may spell it); else what differs: every field
    that does, with the annotation's value and the live one, so the operator can see which of
    the two is wrong."""
    assert alloc.mig_uuid is not None
    wanted = alloc.mig_uuid.lower()
    live = next((p for p in live_pairs(gpu.layout) if p[1].mig_uuid.lower() == wanted), None)
    if live is None:
        gi_id = alloc.gpu_instance_id or 0
        at = next((gi for gi in gpu.layout if gi.id == gi_id), None)
        there = f"no GI {gi_id} is live" if at is None else gi_holds(at)
        return f"migUUID {alloc.mig_uuid} is not live on GPU {gpu.gpu.index} ({there})"
    gi, ci = live
    fields = (
        ("gpuInstanceID", alloc.gpu_instance_id or 0, gi.id),
        ("computeInstanceID", alloc.compute_instance_id or 0, ci.id),
        ("placement", alloc.placement, gi.placement),
        ("profile", alloc.profile, gpu.names.get(gi.profile_id, f"profile {gi.profile_id}")),
    )
    wrong = [
        f"{name} is {named} in the annotation, {actual} live"
        for name, named, actual in fields
        if named != actual
    ]
    if wrong:
        return "; ".join(wrong)  # every field that differs: which of the two is wrong shows
    if gi.shared:
        return shared_gi_reason(gi)  # one GPU instance is one tenant: never restored
    return gi, ci


_IDENTITY = ("gpu_uuid", "gpu_instance_id", "compute_instance_id", "placement", "profile")
"""What a record and an annotation's allocation must agree on to name the same instance."""


def _record_disagrees(
    survey: _Survey, record: Record | None, pod: Pod, alloc: MigAllocation, where: str
) -> str | None:
    """Why the record (if any) of an instance a pod names cannot be restored Active for it."""
    if record is None:
        return None
    if any(getattr(record, f) != getattr(alloc, f) for f in _IDENTITY):
        return f"the record of {alloc.mig_uuid} disagrees with {where}"
    if record.state in (State.RECLAIMING, State.ERROR):
        return f"{where} holds {alloc.mig_uuid}, whose record is {record.state.value}"
    other = owner_pod(record, survey.holding)
    if other is not None and other.key != pod.key:
        return two_holders(str(alloc.mig_uuid), other, where)
    return None


def two_holders(mig_uuid: str, owner: Pod, where: str) -> str:
    """The conflict nobody here can settle: the recorded owner `owner` still holds allocations
    and `where` (another pod's annotation entry) names the instance too."""
    return (
        f"{mig_uuid} is held by pod {owner.key} (its record's owner) and named by {where}: two "
        "pods cannot hold one instance"
    )


def _activate(survey: _Survey, pair: Pair, held_by: str) -> None:
    """Restore (or adopt) a verified live pair as Active for the pod that holds it; a kept
    instance's spec is checked too."""
    kind = ActionKind.RESTORE_ACTIVE if pair.record is not None else ActionKind.ADOPT_ACTIVE
    survey.plan.add(kind, pair, f"verified live and held by {held_by}")
    if pair.record is not None:
        _plan_cdi_repair(survey, pair.gpu, pair.gi, pair.ci)
    else:  # the adoption writes its spec
        _refuse_foreign_spec(survey, pair.ci.mig_uuid)


# --------------------------------------------------------------------------------------------
# 2. Durable records reconciled with the live layout


def _reconcile_records(survey: _Survey) -> None:
    for record in sorted(survey.durable.records.values(), key=lambda r: r.mig_uuid):
        if record.mig_uuid in survey.claimed:
            continue
        gpu = survey.gpus.get(record.gpu_uuid)
        if gpu is not None:
            _plan_record(survey, record, gpu)
        elif survey.only_gpu is None:
            survey.claimed[record.mig_uuid] = "record"
            _record_off_gpu(survey, record)


def _record_off_gpu(survey: _Survey, record: Record) -> None:
    """A record whose GPU is not a MIG-enabled GPU of this node."""
    plan = survey.plan
    skipped = next((s for s in plan.skipped if s.uuid == record.gpu_uuid), None)
    if skipped is None:
        plan.refuse(
            f"record {record.mig_uuid} names GPU {record.gpu_uuid}, which is not on this node"
        )
    elif owner_pod(record, survey.holding):
        plan.refuse(
            f"record {record.mig_uuid} is held by a running pod but its GPU has "
            f"MIG {skipped.mig_mode}"
        )
    elif (elsewhere := _live_elsewhere(survey, record)) is not None:
        plan.refuse(f"record {record.mig_uuid} cannot be verified: {elsewhere}")
    else:
        reason = f"its GPU has MIG {skipped.mig_mode}: no instance can exist"
        plan.add(_drop_kind(record), Managed(record, None, skipped.index), reason)


def _live_elsewhere(survey: _Survey, record: Record, by_gi: bool = True) -> str | None:
    """Where a record's identity is live beyond its recorded placement (so the record is wrong,
    not the instance gone): its MIG UUID on any GPU of the node, or (`by_gi`) a GI with its GI
    ID and profile on its GPU. The answer names the field that differs and both values."""
    for facts in survey.gpus.values():
        if any(ci.mig_uuid == record.mig_uuid for _, ci in live_pairs(facts.layout)):
            found = uuid_elsewhere(record, facts.layout, facts.names)
            return found or "its MIG UUID is live where it says"
    gpu = survey.gpus.get(record.gpu_uuid)
    if gpu is None or not by_gi:
        return None
    for gi in gpu.layout:
        # Only asked when nothing overlaps the recorded placement: this GI's differs.
        if gi.id == record.gpu_instance_id and gpu.names.get(gi.profile_id) == record.profile:
            return (
                f"GI {gi.id} ({record.profile}) is live on its GPU, placement recorded "
                f"{record.placement} but live {gi.placement}"
            )
    return None


def _drop_kind(record: Record) -> ActionKind:
    reclaiming = record.state is State.RECLAIMING
    return ActionKind.FINISH_RECLAIM if reclaiming else ActionKind.DROP_MISSING


def _plan_record(survey: _Survey, record: Record, gpu: GpuFacts) -> None:
    live = check_record(record, gpu.layout, gpu.names)
    survey.claimed[record.mig_uuid] = "record"
    if live.gi is not None:
        survey.claimed_gis.add((record.gpu_uuid, live.gi.id))
    owner = owner_pod(record, survey.holding)
    if live.status is Liveness.MISMATCH:
        survey.plan.refuse(
            f"record {record.mig_uuid} ({record.profile} at {record.placement}, GI "
            f"{record.gpu_instance_id}) does not match the hardware: {live.detail}"
        )
    elif owner is None:
        if _judged_by_pods(survey, record, live, gpu.gpu.index):
            _record_unheld(survey, record, live, gpu)
    elif live.status is not Liveness.COMPLETE:
        survey.plan.refuse(f"its owner pod {owner.key} holds {record.mig_uuid} but {live.detail}")
    else:  # the record's owner pod still holds allocations: restore it Active for that pod
        who = f"its owner pod {owner.key}"
        survey.claimed[record.mig_uuid] = who
        survey.busy_gpus.add(record.gpu_uuid)
        assert record.owner is not None
        gi, ci = _live_pair(record, live)
        _activate(survey, Pair(gpu.gpu, gi, ci, record.profile, record.owner, record), who)


def _live_pair(record: Record, live: LiveCheck) -> tuple[GpuInstance, ComputeInstance]:
    """The live GI/CI pair of a record verified complete."""
    assert live.gi is not None
    return live.gi, next(c for c in live.gi.compute_instances if c.mig_uuid == record.mig_uuid)


def _judged_by_pods(survey: _Survey, record: Record, live: LiveCheck, gpu_index: int) -> bool:
    """Whether the pod list can judge an unheld record: not when the record changed after the
    list was taken (the list cannot show that allocation yet), nor when processes nobody
    accounts for run on it."""
    state = record.state
    newer = changed_after(record, survey.pods) if state is State.ACTIVE else None
    if newer:
        survey.plan.add(ActionKind.SKIP, _at(record), newer)
        return False
    # Without a pod source (doctor) an Active record's processes may be its pod's.
    unknown_holder = not survey.pods_known and state is State.ACTIVE
    if (
        live.status is Liveness.COMPLETE
        and not unknown_holder
        and has_processes(survey.node.hardware(), record.mig_uuid)
    ):
        survey.plan.refuse(
            f"processes run on {record.mig_uuid} ({state.value}, {record.profile} at "
            f"{record.placement} on GPU {gpu_index}) and no pod that holds allocations "
            "accounts for them"
        )
        return False
    return True


def _record_unheld(survey: _Survey, record: Record, live: LiveCheck, gpu: GpuFacts) -> None:
    """No pod holds the instance: finish what was under way, or restore it Idle."""
    plan, target = survey.plan, Managed(record, live, gpu.gpu.index)
    if live.status in (Liveness.ABSENT, Liveness.GI_ONLY):
        # A GI that lost its CI is the record's only if its MIG UUID is live nowhere else.
        elsewhere = _live_elsewhere(survey, record, by_gi=live.status is Liveness.ABSENT)
        if elsewhere is not None:
            plan.refuse(f"record {record.mig_uuid} cannot be verified: {elsewhere}")
            return
    if live.status is Liveness.ABSENT:
        reason = f"no GPU instance at {record.placement} and no pod holds it"
        plan.add(_drop_kind(record), target, reason)
    elif (
        record.state in (State.RECLAIMING, State.ERROR)
        and live.status is Liveness.COMPLETE
        and (held := survey.may_be_held(record)) is not None
    ):
        plan.add(ActionKind.SKIP, _at(record), f"{held}; not destroyed")
    elif record.state is State.RECLAIMING:
        plan.add(ActionKind.FINISH_RECLAIM, target, "an interrupted reclaim")
    elif live.status is Liveness.GI_ONLY:
        plan.add(ActionKind.FINISH_RECLAIM, target, f"{live.detail}: not usable")
    elif record.state is State.ERROR:
        reason = (
            f"Error instance ({record.error or 'destroy failed'}) is never reused; retrying its "
            "destruction"
        )
        plan.add(ActionKind.RETRY_DESTROY, target, reason)
    else:
        was = "" if record.state is State.IDLE else f" (was {record.state.value})"
        plan.add(ActionKind.RESTORE_IDLE, target, f"verified live; no pod holds it{was}")
        _plan_cdi_repair(survey, gpu.gpu, *_live_pair(record, live))


def _at(record: Record) -> Where:
    return Where(record.mig_uuid, record.gpu_uuid, record.placement)


# --------------------------------------------------------------------------------------------
# 3. Interrupted allocations


def _plan_intent(survey: _Survey, intent: Intent) -> None:
    plan = survey.plan
    record = survey.durable.records.get(intent.mig_uuid or "")
    slot = (intent.gpu_uuid, intent.placement)
    if record is not None and (record.gpu_uuid, record.placement) == slot:
        reason = f"allocation {intent.id} had completed; clearing its intent"
        plan.add(ActionKind.FINISH_INTENT, InFlight(intent), reason)
        return
    gpu = survey.gpus.get(intent.gpu_uuid)
    if gpu is None:
        plan.refuse(
            f"intent {intent.id} names GPU {intent.gpu_uuid}, which is not a MIG-enabled GPU of "
            "this node"
        )
        return
    created = _created_gi(survey, intent, gpu)
    if isinstance(created, str):
        plan.refuse(created)
        return
    if created is not None:
        survey.claimed_gis.add((intent.gpu_uuid, created.id))
        for ci in created.compute_instances:
            survey.claimed[ci.mig_uuid] = f"intent {intent.id}"
    reason = (
        f"allocation {intent.id} for {intent.owner} was interrupted; destroying GI "
        f"{created.id} it created"
        if created
        else f"allocation {intent.id} was interrupted before creating anything"
    )
    plan.add(ActionKind.ROLLBACK_INTENT, InFlight(intent, gpu.gpu.index, created), reason)


def _created_gi(survey: _Survey, intent: Intent, gpu: GpuFacts) -> GpuInstance | str | None:
    """The live GI the intent's request created (None: nothing), or why that is uncertain."""
    forget = "drop the intent with: " + survey.node.pasteable(f"forget --intent {intent.id}")
    what = f"intent {intent.id} ({intent.profile} at {intent.placement})"
    created: GpuInstance | None = None
    for gi in gpu.layout:
        if not gi.placement.overlaps(intent.placement):
            continue
        if (intent.gpu_uuid, gi.id) in survey.claimed_gis:
            continue  # a GI a record or pod accounts for: not created by this request
        if created is None and created_by(intent, gi):
            created = gi
            continue
        if intent.gpu_instance_id is None and gi.compute_instances and same_slot(intent, gi):
            return (
                f"{what} never learned a GI ID, yet GI {gi.id} there holds a compute instance: "
                "an interrupted request creates its CI only after journaling its GI, so this "
                f"GI is not its own; {forget}"
            )
        return f"{what} overlaps GI {gi.id} that it cannot have created"
    if created is not None and any(
        has_processes(survey.node.hardware(), c.mig_uuid) for c in created.compute_instances
    ):
        return (
            f"{what} would roll back GI {created.id}, but processes run on it (or cannot be "
            "queried): a request that never finished handed nothing out, so this GI is not its "
            f"own; {forget}"
        )
    return created


# --------------------------------------------------------------------------------------------
# 4. Instances nobody knows


def _plan_unknown(survey: _Survey, adopt: bool, orphans: bool) -> None:
    """Preserved, or adopted with the opt-in when idle; orphan GIs destroyed only with
    `orphans` (recover with adoption) on a GPU nothing uses."""
    for uuid, gpu in survey.gpus.items():
        for gi in gpu.layout:
            if (uuid, gi.id) in survey.claimed_gis:
                continue
            name = gpu.names.get(gi.profile_id, f"profile {gi.profile_id}")
            if not gi.compute_instances:
                _plan_orphan(survey, gpu, gi, name, orphans)
                continue
            for ci in gi.compute_instances:
                if ci.mig_uuid not in survey.claimed:
                    _plan_unmarked(survey, gpu, gi, ci, name, adopt)


def _plan_unmarked(
    survey: _Survey, gpu: GpuFacts, gi: GpuInstance, ci: ComputeInstance, name: str, adopt: bool
) -> None:
    # A shared GI is never adopted (one GPU instance is one tenant), nor a busy instance.
    if adopt and not gi.shared and not has_processes(survey.node.hardware(), ci.mig_uuid):
        reason = (
            f"unmarked complete GI/CI pair ({name}, GI {gi.id}, CI {ci.id}); adoption is enabled"
        )
        survey.plan.add(ActionKind.ADOPT_IDLE, Pair(gpu.gpu, gi, ci, name, None, None), reason)
        _refuse_foreign_spec(survey, ci.mig_uuid)  # the adoption writes its spec
        return
    kept = "processes run on it, so it is not adopted" if adopt else "adoption is not enabled"
    why = shared_gi_reason(gi) if gi.shared else f"no ownership record; {kept}"
    where = Where(ci.mig_uuid, gpu.gpu.uuid, gi.placement)
    survey.plan.add(ActionKind.PRESERVE_UNMANAGED, where, why)


def _gpu_busy(hw: MigHardware, index: int) -> bool:
    """Whether processes run on a GPU; a failed query counts as busy (nothing is destroyed)."""
    try:
        return hw.gpu_has_processes(index)
    except NvmlError:
        return True


def _plan_orphan(survey: _Survey, gpu: GpuFacts, gi: GpuInstance, name: str, destroy: bool) -> None:
    uuid = gpu.gpu.uuid
    what = f"GI {gi.id} ({name})"
    if not destroy:
        why = f"{what} has no compute instance and no record; adoption is not enabled"
    elif uuid in survey.busy_gpus:
        why = f"{what}: the GPU has a live pod allocation"
    elif _gpu_busy(survey.node.hardware(), gpu.gpu.index):
        why = f"{what}: processes run on the GPU (or cannot be queried)"
    else:
        reason = f"{what} has no compute instance; the GPU is idle and adoption is enabled"
        survey.plan.add(ActionKind.DESTROY_ORPHAN_GI, OrphanGi(gpu.gpu, gi), reason)
        return
    survey.plan.add(ActionKind.PRESERVE_ORPHAN_GI, Where(None, uuid, gi.placement), why)


# --------------------------------------------------------------------------------------------
# 5. CDI files


_WRITE_SPECS = (ActionKind.ADOPT_IDLE, ActionKind.ADOPT_ACTIVE, ActionKind.REPAIR_CDI)
"""The steps that write an instance's CDI spec."""


def plan_queued_removals(
    plan: Plan, durable: Durable, refuse_foreign: CdiStore | None = None
) -> None:
    """Retry every queued CDI removal (recover and reconcile). When the instance has a record
    again (a forget interrupted after queueing, then reuse), its spec is the live instance's:
    only the stale queue entry goes. With `refuse_foreign` (recover), a file at the spec's name
    whose content is not the instance's is a refusal; otherwise the retry keeps it and warns."""
    # A spec this plan writes (an adoption after an interrupted forget, a repair) is the
    # live instance's: its stale queue entry goes, the file stays.
    written = {s.mig_uuid for s in plan.steps if s.kind in _WRITE_SPECS}
    for item in durable.removals:
        again = durable.records.get(item.mig_uuid)
        if item.mig_uuid in written or (again is not None and again.state is not State.RECLAIMING):
            reason = "the instance has a record again; its spec is kept"
            plan.add(ActionKind.RETRY_CDI_REMOVAL, Spec(item.mig_uuid, keep=True), reason)
            continue
        name = spec_file_name(item.mig_uuid)
        if refuse_foreign is not None and _refused(plan, refuse_foreign, name, item.mig_uuid):
            continue
        reason = f"queued since {item.since} after {item.attempts} failed attempt(s)"
        plan.add(ActionKind.RETRY_CDI_REMOVAL, Spec(item.mig_uuid), reason)


def refuse_foreign_spec(plan: Plan, cdi: CdiStore, mig_uuid: str) -> bool:
    """Refuse the file at the spec name of `mig_uuid` when the step planned for it would
    overwrite it and it is demonstrably not the instance's spec (`CdiStore.foreign`): it is not
    ours to replace. A damaged file (unreadable, not JSON) is not refused: it is rewritten."""
    refusal = cdi.overwrite_refusal(mig_uuid)
    if refusal is not None:
        plan.refuse(refusal)
    return refusal is not None


def _refuse_foreign_spec(survey: _Survey, mig_uuid: str) -> bool:
    cdi = survey.node.cdi()
    return cdi is not None and refuse_foreign_spec(survey.plan, cdi, mig_uuid)


def _refused(plan: Plan, cdi: CdiStore, name: str, mig_uuid: str | None = None) -> bool:
    """Refuse the file at our spec name `name` when it is not ours: HAMi's startup refuses
    it too, and it is not ours to remove."""
    why = cdi.not_ours(name, mig_uuid)
    if why is not None:
        plan.refuse(
            f"{cdi.directory / name} is not hamimig's CDI spec ({why}); move it out of the CDI "
            "directory if it is not hamimig's"
        )
    return why is not None


def _plan_cdi_files(survey: _Survey) -> None:
    """Retry queued removals, and remove specs of ours that no record, intent or queued removal
    accounts for: HAMi's device plugin refuses to start on one, and runtimes still offer it."""
    cdi = survey.node.cdi()
    if cdi is None:
        return
    durable, plan = survey.durable, survey.plan
    plan_queued_removals(plan, durable, refuse_foreign=cdi)
    accounted = set(durable.records) | {q.mig_uuid for q in durable.removals}
    accounted |= {i.mig_uuid for i in durable.intents if i.mig_uuid}
    # An instance preserved as Unmanaged is not ours: a spec of ours for it is an orphan.
    accounted |= {
        s.mig_uuid for s in plan.steps if s.mig_uuid and s.kind is not ActionKind.PRESERVE_UNMANAGED
    }
    known = {spec_file_name(u) for u in accounted}
    for name in cdi.list_ours():
        if name not in known and not _refused(plan, cdi, name):
            reason = f"{cdi.directory / name}: no record, intent or queued removal accounts for it"
            plan.add(ActionKind.REMOVE_ORPHAN_CDI, Spec(None, file=name), reason)


def _plan_cdi_repair(survey: _Survey, gpu: Gpu, gi: GpuInstance, ci: ComputeInstance) -> None:
    """Report a kept instance's missing or different CDI spec, and rewrite it; refuse a file
    at its name that is not its spec (`refuse_foreign_spec`), kept or compared alike."""
    cdi = survey.node.cdi()
    if cdi is None or refuse_foreign_spec(survey.plan, cdi, ci.mig_uuid):
        return
    dev = cdi_device_for(survey.node, ci.mig_uuid, gpu.uuid, gpu.minor, gi.id, ci.id)
    try:
        if cdi.matches(dev):
            return
    except UsageError as exc:  # no spec can be composed: keep what works, say so
        path = str(cdi.path_of(ci.mig_uuid))
        if cdi.usable(ci.mig_uuid):
            reason = f"kept as it is, not compared with the NVIDIA CDI spec: {exc.message}"
        else:
            reason = f"missing or unusable, and none can be composed: {exc.message}"
        survey.plan.warnings.append(Warning_(file=path, reason=reason))
        return
    why = "missing" if not cdi.exists(ci.mig_uuid) else "different from what the instance needs"
    # The step itself writes the spec, so a failed write is reported on it ("failed: …").
    target = Spec(ci.mig_uuid, device=dev, gpu_uuid=gpu.uuid, placement=gi.placement)
    survey.plan.add(ActionKind.REPAIR_CDI, target, f"its CDI spec is {why}; repair: rewrite it")


# --------------------------------------------------------------------------------------------
# Commands


class RecoveryReport(ActionReport):
    kind = "Recovery"


class AdoptionNotEnabled(UsageError):
    """Adoption without the operator's statement that HAMi owns the whole MIG layout."""


class AdoptionReport(ActionReport):
    kind = "Adoption"


def recover(
    node: Node,
    source: PodSource,
    adopt: bool,
    dry_run: bool,
    only_gpu: int | str | None = None,
    pairs_only: bool = False,
) -> ActionReport:
    """`recover` (and `adopt`: `pairs_only`): a pod source, or the assertion that no pod holds
    an instance, is required (the type says so). Under the node lock: load the records, then
    the pods (never older than the records they judge), plan and verify everything, then
    execute (or only report: a dry run takes no lock)."""
    adopt = adopt or node.config().adopt_existing
    with node.lock_unless(dry_run):
        durable = load_for_mutation(node, dry_run=dry_run)
        pods = source.load(node)
        plan = plan_recovery(node, durable, pods, adopt, only_gpu, pairs_only)
        if (old := stale_warning(node, pods)) is not None:
            plan.warnings.append(old)
        plan.check(node, dry_run)
        done = execute(node, plan, dry_run, tolerate_tracked=True)
    return (AdoptionReport if pairs_only else RecoveryReport)(
        dry_run=dry_run,
        actions=done.actions,
        failed=done.failed,
        skipped=tuple(plan.skipped),
        warnings=durable.warnings + tuple(plan.warnings),
        files_changed=done.files_changed,
    )


def adopt_pairs(
    node: Node, source: PodSource, exclusive_owner: bool, gpu: int | str | None, dry_run: bool
) -> ActionReport:
    if not (exclusive_owner or node.config().adopt_existing):
        raise AdoptionNotEnabled(
            "adopt needs the opt-in that HAMi exclusively owns the complete MIG layout on this "
            "node: devices.nvidia.adoptExistingMIGInstances: true in the config"
        )
    return recover(node, source, True, dry_run, only_gpu=gpu, pairs_only=True)
