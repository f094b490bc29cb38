"""Startup recovery and adoption: plan everything, verify the whole plan, then execute.

The order is the specification's: first the runtime identities that active pods reference,
then the durable records reconciled with the live layout, then instances nobody knows (kept
unless adoption is on). Anything that cannot be verified stops recovery before its first
change (exit 5): changing uncertain hardware state is how one tenant's slice ends up with
another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hamimig.engine.executor import (
    DestroyFailed,
    cdi_device_for,
    destroy_managed,
    remove_cdi_after_destroy,
    rollback_intent,
)
from hamimig.engine.facts import (
    Durable,
    LiveCheck,
    Liveness,
    check_record,
    has_processes,
    load_for_mutation,
)
from hamimig.engine.node import Node, resolve_gpu
from hamimig.engine.plans import same_uid
from hamimig.engine.podsource import PodSource, changed_after
from hamimig.engine.states import Creating, check_transition
from hamimig.engine.views import Action, ActionReport, SkippedGpu, Warning_
from hamimig.errors import HamimigError, NvmlError, UnverifiableError, UsageError
from hamimig.hw.types import ComputeInstance, Gpu, GpuInstance, MigHardware, MigMode, Placement
from hamimig.store.cdi import spec_file_name
from hamimig.store.intents import Intent
from hamimig.store.records import Owner, Record, RecordState

if TYPE_CHECKING:
    from hamimig.pods.model import Pod
    from hamimig.pods.sources import PodSnapshot

NOTHING_CHANGED = "nothing was changed"


@dataclass(frozen=True)
class GpuFacts:
    gpu: Gpu
    layout: tuple[GpuInstance, ...]
    names: dict[int, str]


@dataclass
class Step:
    """One planned action: what the report shows, and how to carry it out (None: report only)."""

    action: str
    mig_uuid: str | None
    gpu_uuid: str | None
    placement: Placement | None
    reason: str
    run: Callable[[Node], str | None] | None = None

    def report(self, outcome: str | None = None) -> Action:
        reason = self.reason if not outcome else f"{self.reason}; {outcome}"
        return Action(self.action, self.mig_uuid, self.gpu_uuid, self.placement, reason)


@dataclass
class Plan:
    """The steps to take, the GPUs not looked at, and every reason to take none of them.

    Planning collects every refusal rather than stopping at the first, so that `doctor`
    can list them all and an operator fixes the node in one round.
    """

    steps: list[Step] = field(default_factory=list)
    skipped: list[SkippedGpu] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    warnings: list[Warning_] = field(default_factory=list)

    def add(self, step: Step) -> None:
        self.steps.append(step)

    def refuse(self, reason: str) -> None:
        self.refusals.append(reason)

    def check(self) -> None:
        """Raise when anything could not be verified: then no step runs (exit 5)."""
        if self.refusals:
            raise UnverifiableError("; ".join(self.refusals) + f"; {NOTHING_CHANGED}")


def _facts(hw: MigHardware, plan: Plan, only_gpu: str | None) -> dict[str, GpuFacts]:
    gpus = [resolve_gpu(hw, only_gpu)] if only_gpu else [hw.gpu(i) for i in range(hw.gpu_count())]
    out: dict[str, GpuFacts] = {}
    for gpu in gpus:
        if gpu.mig_mode is not MigMode.ENABLED:
            plan.skipped.append(
                SkippedGpu(gpu.index, gpu.uuid, gpu.mig_mode.value, f"MIG {gpu.mig_mode.value}")
            )
            continue
        layout = hw.layout(gpu.index)
        names = {p.id: p.name for p in hw.profiles(gpu.index)}
        out[gpu.uuid] = GpuFacts(gpu, layout, names)
    return out


def _active_pods(pods: PodSnapshot | None) -> list[Pod]:
    if pods is None:
        return []
    if not pods.complete:
        raise UnverifiableError(f"the pod list from {pods.source} is incomplete; {NOTHING_CHANGED}")
    holding = [p for p in pods.pods if p.holds_allocations]
    for pod in holding:
        if pod.annotation_error:
            raise UnverifiableError(
                f"pod {pod.key} has a malformed hami.io/vgpu-mig-allocations annotation "
                f"({pod.annotation_error}); {NOTHING_CHANGED}"
            )
    return holding


def _find_pair(
    facts: GpuFacts, gi_id: int, ci_id: int, mig_uuid: str
) -> tuple[GpuInstance, ComputeInstance] | None:
    for gi in facts.layout:
        if gi.id == gi_id:
            for ci in gi.compute_instances:
                if ci.id == ci_id and ci.mig_uuid == mig_uuid:
                    return gi, ci
    return None


def _owner_holds(record: Record, pods: list[Pod]) -> Pod | None:
    """The pod a record names as owner, if that pod still holds its allocations."""
    if record.owner is None or record.state is not RecordState.ACTIVE:
        return None
    for pod in pods:
        if (pod.namespace, pod.name) == (record.owner.namespace, record.owner.name) and same_uid(
            record.owner.uid, pod.uid
        ):
            return pod
    return None


@dataclass
class _Claims:
    """What the plan has accounted for so far: instances, GIs, and GPUs pods use."""

    instances: dict[str, str] = field(default_factory=dict)  # MIG UUID -> who claims it
    gis: set[tuple[str, int]] = field(default_factory=set)  # (GPU UUID, GI ID)
    busy_gpus: set[str] = field(default_factory=set)  # GPUs with a live pod allocation


def plan_recovery(
    node: Node,
    durable: Durable,
    pods: PodSnapshot | None,
    adopt: bool,
    only_gpu: str | None = None,
    pairs_only: bool = False,
    pods_known: bool = True,
) -> Plan:
    """Build and verify the whole plan; every refusal is collected in `plan.refusals`.

    `pairs_only` is `adopt`: claim unmarked complete pairs (and pod-referenced ones), leave
    records, intents and orphan GIs to `recover`. `pods_known` False is `doctor` without a
    pod source: it plans as if no pod held anything, except that processes on an Active
    instance are not held against it (they may well be its pod's).
    """
    hw = node.hardware()
    plan = Plan()
    facts = _facts(hw, plan, only_gpu)
    holding = _active_pods(pods)
    claims = _Claims()
    _plan_pod_claims(node, plan, durable, facts, holding, claims, only_gpu)
    if pairs_only:
        # adopt claims only what nobody accounts for: records and in-flight allocations
        # (intents) belong to `recover`, which alone may restore or undo them.
        for record in durable.records.values():
            claims.instances.setdefault(record.mig_uuid, "record")
            claims.gis.add((record.gpu_uuid, record.gpu_instance_id))
        for intent in durable.intents:
            intent_gpu = facts.get(intent.gpu_uuid)
            for gi in intent_gpu.layout if intent_gpu else ():
                if gi.placement.overlaps(intent.placement):
                    claims.gis.add((intent.gpu_uuid, gi.id))
        _plan_unknown(node, plan, facts, claims, adopt=True, pairs_only=True)
        return plan
    _plan_records(node, plan, durable, facts, holding, claims, pods, pods_known, only_gpu)
    for intent in durable.intents:
        step = _plan_intent(node.hardware(), plan, intent, durable, facts, claims)
        if step is not None:
            plan.add(step)
    _plan_unknown(node, plan, facts, claims, adopt, pairs_only=False)
    _plan_cdi_files(node, plan, durable)
    return plan


def _plan_pod_claims(
    node: Node,
    plan: Plan,
    durable: Durable,
    facts: dict[str, GpuFacts],
    holding: list[Pod],
    claims: _Claims,
    only_gpu: str | None,
) -> None:
    """1. Runtime identities referenced by active pods."""
    for pod in holding:
        for alloc in pod.allocations:
            claims.busy_gpus.add(alloc.gpu_uuid)
            if not alloc.has_runtime_identity:
                continue
            assert alloc.mig_uuid is not None
            where = f"pod {pod.key} container {alloc.container_index} device {alloc.device_index}"
            gpu = facts.get(alloc.gpu_uuid)
            if gpu is None:
                if not only_gpu:
                    plan.refuse(
                        f"{where} names {alloc.mig_uuid} on GPU {alloc.gpu_uuid}, which is not "
                        "a MIG-enabled GPU of this node"
                    )
                continue
            pair = _find_pair(
                gpu, alloc.gpu_instance_id or 0, alloc.compute_instance_id or 0, alloc.mig_uuid
            )
            if (
                pair is None
                or pair[0].placement != alloc.placement
                or gpu.names.get(pair[0].profile_id) != alloc.profile
            ):
                plan.refuse(
                    f"{where} names {alloc.mig_uuid} ({alloc.profile} at {alloc.placement}, GI "
                    f"{alloc.gpu_instance_id}, CI {alloc.compute_instance_id}) but the live "
                    "layout differs"
                )
                continue
            if alloc.mig_uuid in claims.instances:
                plan.refuse(
                    f"{alloc.mig_uuid} is claimed by {claims.instances[alloc.mig_uuid]} and by "
                    f"{where}"
                )
                continue
            claims.instances[alloc.mig_uuid] = where
            claims.gis.add((alloc.gpu_uuid, pair[0].id))
            owner = Owner(
                pod.namespace, pod.name, pod.uid, alloc.container_index, alloc.device_index
            )
            record = durable.records.get(alloc.mig_uuid)
            if record is not None:
                identity = (
                    record.gpu_uuid,
                    record.gpu_instance_id,
                    record.compute_instance_id,
                    record.placement,
                    record.profile,
                )
                named = (
                    alloc.gpu_uuid,
                    alloc.gpu_instance_id,
                    alloc.compute_instance_id,
                    alloc.placement,
                    alloc.profile,
                )
                if identity != named:
                    plan.refuse(f"the record of {alloc.mig_uuid} disagrees with {where}")
                    continue
                if record.state in (RecordState.RECLAIMING, RecordState.ERROR):
                    plan.refuse(
                        f"{where} holds {alloc.mig_uuid}, whose record is {record.state.value}"
                    )
                    continue
                other = _owner_holds(record, holding)
                if other is not None and other.key != pod.key:
                    plan.refuse(
                        f"{alloc.mig_uuid} is held by pod {other.key} (its record's owner) and "
                        f"named by {where}: two pods cannot hold one instance"
                    )
                    continue
            plan.add(_activate(gpu, pair[0], pair[1], alloc.profile, owner, record, where))
            if record is not None:
                _plan_cdi_repair(node, plan, gpu, pair[0], pair[1])


def _plan_records(
    node: Node,
    plan: Plan,
    durable: Durable,
    facts: dict[str, GpuFacts],
    holding: list[Pod],
    claims: _Claims,
    pods: PodSnapshot | None,
    pods_known: bool,
    only_gpu: str | None,
) -> None:
    """2. Durable records reconciled with the live layout."""
    hw = node.hardware()
    for record in sorted(durable.records.values(), key=lambda r: r.mig_uuid):
        if record.mig_uuid in claims.instances:
            continue
        gpu = facts.get(record.gpu_uuid)
        if gpu is None:
            skipped = next((s for s in plan.skipped if s.uuid == record.gpu_uuid), None)
            if only_gpu:
                continue
            claims.instances[record.mig_uuid] = "record"
            if skipped is None:
                plan.refuse(
                    f"record {record.mig_uuid} names GPU {record.gpu_uuid}, which is not on "
                    "this node"
                )
            elif _owner_holds(record, holding):
                plan.refuse(
                    f"record {record.mig_uuid} is held by a running pod but its GPU has "
                    f"MIG {skipped.mig_mode}"
                )
            else:
                plan.add(
                    _drop(record, f"its GPU has MIG {skipped.mig_mode}: no instance can exist")
                )
            continue
        live = check_record(record, gpu.layout, gpu.names)
        claims.instances[record.mig_uuid] = "record"
        if live.gi is not None:
            claims.gis.add((record.gpu_uuid, live.gi.id))
        if live.status is Liveness.MISMATCH:
            plan.refuse(
                f"record {record.mig_uuid} ({record.profile} at {record.placement}, GI "
                f"{record.gpu_instance_id}) does not match the hardware: {live.detail}"
            )
            continue
        owner_pod = _owner_holds(record, holding)
        state = record.state
        if owner_pod is not None:
            who = f"its owner pod {owner_pod.key}"
            if live.status is not Liveness.COMPLETE:
                plan.refuse(f"{who} holds {record.mig_uuid} but {live.detail}")
                continue
            claims.instances[record.mig_uuid] = who
            claims.busy_gpus.add(record.gpu_uuid)
            assert live.gi is not None and record.owner is not None
            ci = next(c for c in live.gi.compute_instances if c.mig_uuid == record.mig_uuid)
            plan.add(_activate(gpu, live.gi, ci, record.profile, record.owner, record, who))
            _plan_cdi_repair(node, plan, gpu, live.gi, ci)
            continue
        newer = changed_after(record, pods) if state is RecordState.ACTIVE else None
        if newer:  # the pod list cannot show the allocation yet: not judged by it at all
            plan.add(Step("skip", record.mig_uuid, record.gpu_uuid, record.placement, newer))
            continue
        # Without a pod source (doctor) an Active record's processes may be its pod's.
        unknown_holder = not pods_known and state is RecordState.ACTIVE
        if (
            live.status is Liveness.COMPLETE
            and not unknown_holder
            and has_processes(hw, record.mig_uuid)
        ):
            plan.refuse(
                f"processes run on {record.mig_uuid} ({state.value}, {record.profile} at "
                f"{record.placement} on GPU {gpu.gpu.index}) and no pod that holds allocations "
                "accounts for them"
            )
            continue
        if live.status is Liveness.ABSENT:
            plan.add(_drop(record, f"no GPU instance at {record.placement} and no pod holds it"))
        elif state is RecordState.RECLAIMING or live.status is Liveness.GI_ONLY:
            plan.add(
                _destroy(
                    "finish-reclaim",
                    record,
                    live,
                    gpu,
                    "an interrupted reclaim"
                    if state is RecordState.RECLAIMING
                    else f"{live.detail}: not usable",
                )
            )
        elif state is RecordState.ERROR:
            plan.add(
                _destroy(
                    "retry-destroy",
                    record,
                    live,
                    gpu,
                    f"Error instance ({record.error or 'destroy failed'}) is never "
                    "reused; retrying its destruction",
                )
            )
        else:
            plan.add(_restore_idle(record, gpu))
            assert live.gi is not None
            ci = next(c for c in live.gi.compute_instances if c.mig_uuid == record.mig_uuid)
            _plan_cdi_repair(node, plan, gpu, live.gi, ci)


def _plan_cdi_files(node: Node, plan: Plan, durable: Durable) -> None:
    """4. CDI: retry queued removals, and remove specs of ours nothing accounts for.

    A spec without a record, intent or queued removal is left by a crash (an adoption between
    its spec and its record) or by hand; HAMi's device plugin refuses to start on such a file,
    and runtimes still offer its device. Recovery removes it.
    """
    cdi = node.cdi()
    if cdi is None:
        return
    for item in durable.removals:
        again = durable.records.get(item.mig_uuid)
        if again is not None and again.state is not RecordState.RECLAIMING:
            # A forget interrupted after queueing, then the instance was reused: its spec is
            # the live instance's again. Only the stale queue entry goes.
            reason = "the instance has a record again; its spec is kept"
            plan.add(
                Step(
                    "retry-cdi-removal",
                    item.mig_uuid,
                    None,
                    None,
                    reason,
                    _drop_queued(item.mig_uuid),
                )
            )
            continue
        plan.add(
            Step(
                "retry-cdi-removal",
                item.mig_uuid,
                None,
                None,
                f"queued since {item.since} after {item.attempts} attempt(s)",
                _retry_removal(item.mig_uuid),
            )
        )
    accounted = set(durable.records) | {q.mig_uuid for q in durable.removals}
    accounted |= {i.mig_uuid for i in durable.intents if i.mig_uuid}
    accounted |= {s.mig_uuid for s in plan.steps if s.mig_uuid}
    known = {spec_file_name(u) for u in accounted}
    for name in cdi.list_ours():
        if name in known:
            continue
        plan.add(
            Step(
                "remove-orphan-cdi",
                None,
                None,
                None,
                f"{cdi.directory / name}: no record, intent or queued removal accounts for it",
                _remove_orphan_spec(name),
            )
        )


def _drop_queued(mig_uuid: str) -> Callable[[Node], str | None]:
    def run(node: Node) -> str | None:
        node.queue().drop(mig_uuid)
        return None

    return run


def _remove_orphan_spec(name: str) -> Callable[[Node], str | None]:
    def run(node: Node) -> str | None:
        cdi = node.cdi()
        if cdi is not None:
            cdi.remove_name(name)
        return None

    return run


def _activate(
    facts: GpuFacts,
    gi: GpuInstance,
    ci: ComputeInstance,
    profile: str,
    owner: Owner,
    record: Record | None,
    where: str,
) -> Step:
    action = "restore-active" if record is not None else "adopt-active"
    reason = f"verified live and held by {where}"

    def run(node: Node) -> str | None:
        cdi_name = _cdi_name(node, ci.mig_uuid)
        if (
            record is not None
            and record.managed
            and record.state is RecordState.ACTIVE
            and record.owner == owner
            and record.gpu_index == facts.gpu.index
            and (cdi_name is None or cdi_name == record.cdi_device)
        ):
            return None  # already as it should be: a second run changes nothing
        now = node.clock()
        base = record or Record(
            mig_uuid=ci.mig_uuid,
            gpu_uuid=facts.gpu.uuid,
            profile=profile,
            placement=gi.placement,
            gpu_instance_id=gi.id,
            compute_instance_id=ci.id,
            created_at=now,
        )
        check_transition(record.state if record else None, RecordState.ACTIVE, ci.mig_uuid)
        node.records().write(
            dataclasses.replace(
                base,
                state=RecordState.ACTIVE,
                owner=owner,
                managed=True,
                updated_at=now,
                gpu_index=facts.gpu.index,
                error=None,
                cdi_device=cdi_name or base.cdi_device,
            )
        )
        if record is None:  # adopted: its spec after its record, as for adopt-idle
            return _write_spec(node, facts, gi, ci)
        return None

    return Step(action, ci.mig_uuid, facts.gpu.uuid, gi.placement, reason, run)


def _plan_cdi_repair(
    node: Node, plan: Plan, facts: GpuFacts, gi: GpuInstance, ci: ComputeInstance
) -> None:
    """Report a kept instance's missing or different CDI spec; the restore step rewrites it."""
    cdi = node.cdi()
    if cdi is None:
        return
    dev = cdi_device_for(node, ci.mig_uuid, facts.gpu.uuid, facts.gpu.minor, gi.id, ci.id)
    try:
        if cdi.matches(dev):
            return
    except UsageError as exc:  # no spec can be composed: keep what works, say so
        path = str(cdi.path_of(ci.mig_uuid))
        if cdi.usable(ci.mig_uuid):
            reason = f"kept as it is, not compared with the NVIDIA CDI spec: {exc.message}"
        else:
            reason = f"missing or unusable, and none can be composed: {exc.message}"
        plan.warnings.append(Warning_(path, reason))
        return
    why = "missing" if not cdi.exists(ci.mig_uuid) else "different from what the instance needs"

    def run(node: Node) -> str | None:
        store = node.cdi()
        if store is not None:
            store.write(dev)
        return None

    # The step itself writes the spec, so a failed write is reported on it ("failed: …").
    reason = f"its CDI spec is {why}; repair: rewrite it"
    plan.add(Step("repair-cdi", ci.mig_uuid, facts.gpu.uuid, gi.placement, reason, run))


def _cdi_name(node: Node, mig_uuid: str) -> str | None:
    """The qualified CDI device name of an instance (None in legacy non-CDI mode); its spec
    is written by the `repair-cdi` step, which reports success only when the write did."""
    cdi = node.cdi()
    return None if cdi is None else cdi.qualified_name(mig_uuid)


def _restore_idle(record: Record, facts: GpuFacts) -> Step:
    state = record.state
    was = "" if state is RecordState.IDLE else f" (was {state.value})"
    reason = f"verified live; no pod holds it{was}"

    def run(node: Node) -> str | None:
        cdi_name = _cdi_name(node, record.mig_uuid)
        if state is RecordState.IDLE and (
            not record.managed or cdi_name is None or cdi_name == record.cdi_device
        ):
            return None  # nothing to change (a record HAMi wrote stays as HAMi wrote it)
        check_transition(state, RecordState.IDLE, record.mig_uuid)
        node.records().write(
            dataclasses.replace(
                record,
                state=RecordState.IDLE,
                owner=None,
                managed=True,
                updated_at=node.clock(),
                gpu_index=facts.gpu.index,
                cdi_device=cdi_name or record.cdi_device,
            )
        )
        return None

    return Step("restore-idle", record.mig_uuid, record.gpu_uuid, record.placement, reason, run)


def _drop(record: Record, reason: str) -> Step:
    def run(node: Node) -> str | None:
        check_transition(record.state, None, record.mig_uuid)
        note = remove_cdi_after_destroy(node, record.mig_uuid)
        node.records().remove(record.mig_uuid)
        return note

    action = "finish-reclaim" if record.state is RecordState.RECLAIMING else "drop-missing"
    return Step(action, record.mig_uuid, record.gpu_uuid, record.placement, reason, run)


def _destroy(action: str, record: Record, live: LiveCheck, facts: GpuFacts, reason: str) -> Step:
    def run(node: Node) -> str | None:
        try:
            notes = destroy_managed(node, record, live, facts.gpu.index)
        except DestroyFailed as exc:
            raise _Failed(exc.message) from None
        return "; ".join(notes) or None

    return Step(action, record.mig_uuid, record.gpu_uuid, record.placement, reason, run)


class _Failed(HamimigError):
    """A step that failed on the hardware. A fatal one (an interrupted allocation that still
    cannot be undone) makes recovery exit 4; a non-fatal one leaves a consistent, tracked state
    behind (an instance kept in Error, a queued CDI removal, an orphan GI preserved), which the
    device plugin may start on and `reconcile` retries."""

    exit_code = 4
    code = "hardware"

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


def _plan_intent(
    hw: MigHardware,
    plan: Plan,
    intent: Intent,
    durable: Durable,
    facts: dict[str, GpuFacts],
    claims: _Claims,
) -> Step | None:
    if intent.mig_uuid is not None and intent.mig_uuid in durable.records:
        record = durable.records[intent.mig_uuid]
        if (record.gpu_uuid, record.placement) == (intent.gpu_uuid, intent.placement):
            return Step(
                "finish-intent",
                intent.mig_uuid,
                intent.gpu_uuid,
                intent.placement,
                f"allocation {intent.id} had completed; clearing its intent",
                _remove_intent(intent),
            )
    gpu = facts.get(intent.gpu_uuid)
    if gpu is None:
        plan.refuse(
            f"intent {intent.id} names GPU {intent.gpu_uuid}, which is not a MIG-enabled GPU of "
            "this node"
        )
        return None
    here = [g for g in gpu.layout if g.placement.overlaps(intent.placement)]
    created: GpuInstance | None = None
    for gi in here:
        if (intent.gpu_uuid, gi.id) in claims.gis:
            continue  # a GI a record or pod accounts for: not created by this request
        if created is None and created_by(intent, gi):
            created = gi
            continue
        if intent.gpu_instance_id is None and gi.compute_instances and _same_slot(intent, gi):
            plan.refuse(
                f"intent {intent.id} ({intent.profile} at {intent.placement}) never learned a "
                f"GI ID, yet GI {gi.id} there holds a compute instance: an interrupted request "
                "creates its CI only after journaling its GI, so this GI is not its own; "
                f"'hamimig forget --intent {intent.id}' drops the intent"
            )
            return None
        plan.refuse(
            f"intent {intent.id} ({intent.profile} at {intent.placement}) overlaps GI {gi.id} "
            "that it cannot have created"
        )
        return None
    if created is not None and any(
        has_processes(hw, c.mig_uuid) for c in created.compute_instances
    ):
        plan.refuse(
            f"intent {intent.id} ({intent.profile} at {intent.placement}) would roll back GI "
            f"{created.id}, but processes run on it (or cannot be queried): a request that "
            "never finished handed nothing out, so this GI is not its own; "
            f"'hamimig forget --intent {intent.id}' drops the intent"
        )
        return None
    if created is not None:
        claims.gis.add((intent.gpu_uuid, created.id))
        for ci in created.compute_instances:
            claims.instances[ci.mig_uuid] = f"intent {intent.id}"
    reason = (
        f"allocation {intent.id} for {intent.owner} was interrupted; destroying GI "
        f"{created.id} it created"
        if created
        else f"allocation {intent.id} was interrupted before creating anything"
    )
    return Step(
        "rollback-intent",
        intent.mig_uuid,
        intent.gpu_uuid,
        intent.placement,
        reason,
        _rollback(intent, gpu, created),
    )


def _same_slot(intent: Intent, gi: GpuInstance) -> bool:
    return gi.placement == intent.placement and gi.profile_id == intent.profile_id


def created_by(intent: Intent, gi: GpuInstance) -> bool:
    """Whether `gi` can be the GI that `intent`'s interrupted request created.

    Same placement and profile, and either the GI ID the intent journaled, or, when the
    request died before journaling one, a GI without compute instances: the CI is created
    only after the GI ID is journaled, so a GI that holds one belongs to someone else.
    """
    if not _same_slot(intent, gi):
        return False
    if intent.gpu_instance_id is not None:
        return gi.id == intent.gpu_instance_id
    return not gi.compute_instances


def _remove_intent(intent: Intent) -> Callable[[Node], str | None]:
    def run(node: Node) -> str | None:
        check_transition(Creating, None, intent.id)
        node.intents().remove(intent.id)
        return None

    return run


def _rollback(
    intent: Intent, facts: GpuFacts, gi: GpuInstance | None
) -> Callable[[Node], str | None]:
    """Undo an interrupted allocation with the executor's one rollback.

    The GPU is addressed by its index now (indexes can change across reboots), and only the
    GI the planner verified as this request's is destroyed: when the journaled GI is gone,
    its ID may already belong to another instance, so the rollback destroys nothing.
    """

    def run(node: Node) -> str | None:
        known = dataclasses.replace(
            intent, gpu_index=facts.gpu.index, gpu_instance_id=gi.id if gi is not None else None
        )
        try:
            rollback_intent(node, known, record_written=False)
        except HamimigError as exc:
            raise _Failed(exc.message, fatal=True) from None
        return None

    return run


def _retry_removal(mig_uuid: str) -> Callable[[Node], str | None]:
    def run(node: Node) -> str | None:
        cdi = node.cdi()
        queue = node.queue()
        try:
            if cdi is not None:
                cdi.remove(mig_uuid)
        except OSError as exc:
            queue.add(mig_uuid, str(exc.strerror or exc), node.clock())
            raise _Failed(f"CDI spec of {mig_uuid} still cannot be removed: {exc}") from None
        queue.drop(mig_uuid)
        return None

    return run


def _plan_unknown(
    node: Node,
    plan: Plan,
    facts: dict[str, GpuFacts],
    claims: _Claims,
    adopt: bool,
    pairs_only: bool,
) -> None:
    """3. Instances nobody knows: preserved, or adopted with the opt-in when idle."""
    hw = node.hardware()
    for uuid, gpu in facts.items():
        for gi in gpu.layout:
            if (uuid, gi.id) in claims.gis:
                continue
            name = gpu.names.get(gi.profile_id, f"profile {gi.profile_id}")
            if not gi.compute_instances:
                _plan_orphan(hw, plan, gpu, gi, name, claims.busy_gpus, adopt and not pairs_only)
                continue
            for ci in gi.compute_instances:
                if ci.mig_uuid in claims.instances:
                    continue
                if adopt and has_processes(hw, ci.mig_uuid):
                    reason = "no ownership record; processes run on it, so it is not adopted"
                elif adopt:
                    plan.add(_adopt_idle(gpu, gi, ci, name))
                    continue
                else:
                    reason = "no ownership record; adoption is not enabled"
                plan.add(Step("preserve-unmanaged", ci.mig_uuid, uuid, gi.placement, reason))


def _gpu_busy(hw: MigHardware, index: int) -> bool:
    """Whether processes run on a GPU; a failed query counts as busy (nothing is destroyed)."""
    try:
        return hw.gpu_has_processes(index)
    except NvmlError:
        return True


def _plan_orphan(
    hw: MigHardware,
    plan: Plan,
    gpu: GpuFacts,
    gi: GpuInstance,
    name: str,
    busy_gpus: set[str],
    adopt: bool,
) -> None:
    uuid = gpu.gpu.uuid
    if not adopt:
        plan.add(
            Step(
                "preserve-orphan-gi",
                None,
                uuid,
                gi.placement,
                f"GI {gi.id} ({name}) has no compute instance and no record; adoption is "
                "not enabled",
            )
        )
        return
    if uuid in busy_gpus:
        plan.add(
            Step(
                "preserve-orphan-gi",
                None,
                uuid,
                gi.placement,
                f"GI {gi.id} ({name}): the GPU has a live pod allocation",
            )
        )
        return
    if _gpu_busy(hw, gpu.gpu.index):
        plan.add(
            Step(
                "preserve-orphan-gi",
                None,
                uuid,
                gi.placement,
                f"GI {gi.id} ({name}): processes run on the GPU (or cannot be queried)",
            )
        )
        return

    def run(node: Node) -> str | None:
        try:
            node.hardware().destroy_gpu_instance(gpu.gpu.index, gi.id)
        except NvmlError as exc:
            raise _Failed(f"could not destroy orphan GI {gi.id}: {exc.message}") from None
        return None

    plan.add(
        Step(
            "destroy-orphan-gi",
            None,
            uuid,
            gi.placement,
            f"GI {gi.id} ({name}) has no compute instance; the GPU is idle and adoption is enabled",
            run,
        )
    )


def _write_spec(node: Node, facts: GpuFacts, gi: GpuInstance, ci: ComputeInstance) -> str | None:
    """Write an adopted instance's spec. When none can be composed (no NVIDIA spec, no
    nvidia-caps major) the adoption still stands and this says why there is no spec: the
    instance is never handed out without one, and a later recover writes it (repair-cdi)
    once the node can. The init container is not blocked for it."""
    cdi = node.cdi()
    if cdi is None:
        return None
    dev = cdi_device_for(node, ci.mig_uuid, facts.gpu.uuid, facts.gpu.minor, gi.id, ci.id)
    try:
        if not cdi.matches(dev):
            cdi.write(dev)
    except UsageError as exc:
        return f"no CDI spec written yet: {exc.message}"
    return None


def _adopt_idle(gpu: GpuFacts, gi: GpuInstance, ci: ComputeInstance, name: str) -> Step:
    def run(node: Node) -> str | None:
        now = node.clock()
        check_transition(None, RecordState.IDLE, ci.mig_uuid)
        cdi_name = _cdi_name(node, ci.mig_uuid)
        # The record first, then the spec: a crash between them leaves an Idle record whose
        # spec the next recovery rewrites, never a spec that no record accounts for.
        node.records().write(
            Record(
                mig_uuid=ci.mig_uuid,
                gpu_uuid=gpu.gpu.uuid,
                profile=name,
                placement=gi.placement,
                gpu_instance_id=gi.id,
                compute_instance_id=ci.id,
                state=RecordState.IDLE,
                cdi_device=cdi_name,
                created_at=now,
                updated_at=now,
                gpu_index=gpu.gpu.index,
            )
        )
        return _write_spec(node, gpu, gi, ci)

    return Step(
        "adopt-idle",
        ci.mig_uuid,
        gpu.gpu.uuid,
        gi.placement,
        f"unmarked complete GI/CI pair ({name}, GI {gi.id}, CI {ci.id}); adoption is enabled",
        run,
    )


def execute_plan(node: Node, plan: Plan, dry_run: bool) -> tuple[list[Action], list[str]]:
    """Run the verified plan in order; returns the report and the fatal failures."""
    actions: list[Action] = []
    failures: list[str] = []
    for step in plan.steps:
        if dry_run or step.run is None:
            actions.append(step.report())
            continue
        try:
            actions.append(step.report(step.run(node)))
        except _Failed as exc:
            if exc.fatal:
                failures.append(exc.message)
            actions.append(step.report(f"failed: {exc.message}"))
        except HamimigError as exc:
            failures.append(f"{step.action} {step.mig_uuid or ''}: {exc.message}")
            actions.append(step.report(f"failed: {exc.message}"))
        except OSError as exc:
            failures.append(f"{step.action} {step.mig_uuid or ''}: I/O error: {exc}")
            actions.append(step.report(f"failed: I/O error: {exc}"))
    return actions, failures


class RecoveryReport(ActionReport):
    kind = "Recovery"


class AdoptionReport(ActionReport):
    kind = "Adoption"


def recover(node: Node, source: PodSource, adopt: bool, dry_run: bool) -> ActionReport:
    """`recover`: a pod source, or `--assume-no-pods`, is required."""
    source.check(node, required=True)
    adopt = adopt or node.config().adopt_existing
    return _run(
        node, RecoveryReport, dry_run, source, lambda d, pods: plan_recovery(node, d, pods, adopt)
    )


def adopt_pairs(
    node: Node, source: PodSource, exclusive_owner: bool, gpu: str | None, dry_run: bool
) -> ActionReport:
    source.check(node, required=True)
    if not (exclusive_owner or node.config().adopt_existing):
        raise UsageError(
            "adopt needs the opt-in that HAMi exclusively owns the complete MIG layout on this "
            "node: --exclusive-owner or devices.nvidia.adoptExistingMIGInstances: true"
        )
    return _run(
        node,
        AdoptionReport,
        dry_run,
        source,
        lambda d, pods: plan_recovery(node, d, pods, adopt=True, only_gpu=gpu, pairs_only=True),
    )


def _run(
    node: Node,
    report: type[ActionReport],
    dry_run: bool,
    source: PodSource,
    make_plan: Callable[[Durable, PodSnapshot | None], Plan],
) -> ActionReport:
    """Under the node lock: load the records, then the pods (never older than the records
    they judge), plan and verify everything, then execute (or only report)."""
    with node.lock():
        durable = load_for_mutation(node, dry_run=dry_run)
        plan = make_plan(durable, source.load(node))
        plan.check()
        actions, failures = execute_plan(node, plan, dry_run)
    return report(
        dry_run=dry_run,
        actions=tuple(actions),
        failed="; ".join(failures) or None,
        exit_code=4 if failures else 0,
        skipped=tuple(plan.skipped),
        warnings=durable.warnings + tuple(plan.warnings),
    )
