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
)
from hamimig.engine.facts import Durable, LiveCheck, Liveness, check_record, load_for_mutation
from hamimig.engine.node import Node, resolve_gpu
from hamimig.engine.states import Creating, check_transition
from hamimig.engine.views import Action, ActionReport, SkippedGpu
from hamimig.errors import HamimigError, NvmlError, UnverifiableError, UsageError
from hamimig.hw.types import ComputeInstance, Gpu, GpuInstance, MigHardware, MigMode, Placement
from hamimig.store.intents import Intent
from hamimig.store.records import Owner, Record, RecordState

if TYPE_CHECKING:
    from hamimig.pods.model import Pod
    from hamimig.pods.sources import PodSnapshot


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
    steps: list[Step] = field(default_factory=list)
    skipped: list[SkippedGpu] = field(default_factory=list)

    def add(self, step: Step) -> None:
        self.steps.append(step)


def _state(record: Record) -> RecordState:
    return record.state if record.managed else RecordState.IDLE


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
        raise UnverifiableError(
            f"the pod list from {pods.source} is incomplete; nothing was changed"
        )
    holding = [p for p in pods.pods if p.holds_allocations]
    for pod in holding:
        if pod.annotation_error:
            raise UnverifiableError(
                f"pod {pod.key} has a malformed hami.io/vgpu-mig-allocations annotation "
                f"({pod.annotation_error}); nothing was changed"
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
    if record.owner is None or _state(record) is not RecordState.ACTIVE:
        return None
    for pod in pods:
        if (pod.namespace, pod.name) == (record.owner.namespace, record.owner.name) and (
            record.owner.uid is None or pod.uid is None or record.owner.uid == pod.uid
        ):
            return pod
    return None


def plan_recovery(
    node: Node,
    durable: Durable,
    pods: PodSnapshot | None,
    adopt: bool,
    only_gpu: str | None = None,
    pairs_only: bool = False,
) -> Plan:
    """Build and verify the whole plan; raises UnverifiableError before anything changes.

    `pairs_only` is `adopt`: claim unmarked complete pairs (and pod-referenced ones), leave
    records, intents and orphan GIs to `recover`.
    """
    hw = node.hardware()
    plan = Plan()
    facts = _facts(hw, plan, only_gpu)
    holding = _active_pods(pods)
    claimed: dict[str, str] = {}  # MIG UUID -> what claims it (pod key or record)
    held_gi: set[tuple[str, int]] = set()  # (GPU UUID, GI ID) accounted for
    busy_gpus: set[str] = set()  # GPUs with a live pod allocation

    # 1. Runtime identities referenced by active pods.
    for pod in holding:
        for alloc in pod.allocations:
            busy_gpus.add(alloc.gpu_uuid)
            if not alloc.has_runtime_identity:
                continue
            assert alloc.mig_uuid is not None
            where = f"pod {pod.key} container {alloc.container_index} device {alloc.device_index}"
            gpu = facts.get(alloc.gpu_uuid)
            if gpu is None:
                if only_gpu:
                    continue
                raise UnverifiableError(
                    f"{where} names {alloc.mig_uuid} on GPU {alloc.gpu_uuid}, which is not a "
                    "MIG-enabled GPU of this node; nothing was changed"
                )
            pair = _find_pair(
                gpu, alloc.gpu_instance_id or 0, alloc.compute_instance_id or 0, alloc.mig_uuid
            )
            if (
                pair is None
                or pair[0].placement != alloc.placement
                or gpu.names.get(pair[0].profile_id) != alloc.profile
            ):
                raise UnverifiableError(
                    f"{where} names {alloc.mig_uuid} ({alloc.profile} at {alloc.placement}, GI "
                    f"{alloc.gpu_instance_id}, CI {alloc.compute_instance_id}) but the live "
                    "layout differs; nothing was changed"
                )
            if alloc.mig_uuid in claimed:
                raise UnverifiableError(
                    f"{alloc.mig_uuid} is claimed by {claimed[alloc.mig_uuid]} and by {where}; "
                    "nothing was changed"
                )
            claimed[alloc.mig_uuid] = where
            held_gi.add((alloc.gpu_uuid, pair[0].id))
            owner = Owner(
                pod.namespace, pod.name, pod.uid, alloc.container_index, alloc.device_index
            )
            record = durable.records.get(alloc.mig_uuid)
            if record is not None and (
                record.gpu_uuid,
                record.gpu_instance_id,
                record.compute_instance_id,
                record.placement,
                record.profile,
            ) != (
                alloc.gpu_uuid,
                alloc.gpu_instance_id,
                alloc.compute_instance_id,
                alloc.placement,
                alloc.profile,
            ):
                raise UnverifiableError(
                    f"the record of {alloc.mig_uuid} disagrees with {where}; nothing was changed"
                )
            if record is not None and _state(record) in (RecordState.RECLAIMING, RecordState.ERROR):
                raise UnverifiableError(
                    f"{where} holds {alloc.mig_uuid}, whose record is {_state(record).value}; "
                    "nothing was changed"
                )
            plan.add(_activate(gpu, pair[0], pair[1], alloc.profile, owner, record, where))
            if record is not None:
                _plan_cdi_repair(node, plan, gpu, pair[0], pair[1])

    if pairs_only:
        # adopt claims only what nobody accounts for: records and in-flight allocations
        # (intents) belong to `recover`, which alone may restore or undo them.
        for record in durable.records.values():
            claimed.setdefault(record.mig_uuid, "record")
            held_gi.add((record.gpu_uuid, record.gpu_instance_id))
        for intent in durable.intents:
            intent_gpu = facts.get(intent.gpu_uuid)
            for gi in intent_gpu.layout if intent_gpu else ():
                if gi.placement.overlaps(intent.placement):
                    held_gi.add((intent.gpu_uuid, gi.id))
        _plan_unknown(
            node, plan, facts, durable, claimed, held_gi, busy_gpus, adopt=True, pairs_only=True
        )
        return plan

    # 2. Durable records reconciled with the live layout, and leftover intents.
    for record in sorted(durable.records.values(), key=lambda r: r.mig_uuid):
        if record.mig_uuid in claimed:
            continue
        gpu = facts.get(record.gpu_uuid)
        if gpu is None:
            skipped = next((s for s in plan.skipped if s.uuid == record.gpu_uuid), None)
            if only_gpu:
                continue
            if skipped is None:
                raise UnverifiableError(
                    f"record {record.mig_uuid} names GPU {record.gpu_uuid}, which is not on this "
                    "node; nothing was changed"
                )
            if _owner_holds(record, holding):
                raise UnverifiableError(
                    f"record {record.mig_uuid} is held by a running pod but its GPU has "
                    f"MIG {skipped.mig_mode}; nothing was changed"
                )
            plan.add(_drop(record, f"its GPU has MIG {skipped.mig_mode}: no instance can exist"))
            claimed[record.mig_uuid] = "record"
            continue
        live = check_record(record, gpu.layout, gpu.names)
        if live.status is Liveness.MISMATCH:
            raise UnverifiableError(
                f"record {record.mig_uuid} ({record.profile} at {record.placement}, GI "
                f"{record.gpu_instance_id}) does not match the hardware: {live.detail}; nothing "
                "was changed"
            )
        owner_pod = _owner_holds(record, holding)
        state = _state(record)
        if owner_pod is not None:
            if live.status is not Liveness.COMPLETE:
                raise UnverifiableError(
                    f"pod {owner_pod.key} holds {record.mig_uuid} but {live.detail}; nothing "
                    "was changed"
                )
            claimed[record.mig_uuid] = f"pod {owner_pod.key}"
            held_gi.add((record.gpu_uuid, record.gpu_instance_id))
            busy_gpus.add(record.gpu_uuid)
            assert live.gi is not None and record.owner is not None
            ci = next(c for c in live.gi.compute_instances if c.mig_uuid == record.mig_uuid)
            plan.add(
                _activate(
                    gpu,
                    live.gi,
                    ci,
                    record.profile,
                    record.owner,
                    record,
                    f"its owner pod {owner_pod.key}",
                )
            )
            _plan_cdi_repair(node, plan, gpu, live.gi, ci)
            continue
        claimed[record.mig_uuid] = "record"
        if live.gi is not None:
            held_gi.add((record.gpu_uuid, live.gi.id))
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

    for intent in durable.intents:
        plan.add(_plan_intent(intent, durable, facts, claimed, held_gi, only_gpu))

    # 3. Instances nobody knows.
    _plan_unknown(node, plan, facts, durable, claimed, held_gi, busy_gpus, adopt, pairs_only=False)

    # 4. CDI: repair specs of kept instances, retry queued removals.
    cdi = node.cdi()
    if cdi is not None:
        for item in durable.removals:
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
    return plan


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
        cdi_name = _ensure_cdi(node, facts, gi, ci)
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
        check_transition(_state(record) if record else None, RecordState.ACTIVE, ci.mig_uuid)
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
        return None

    return Step(action, ci.mig_uuid, facts.gpu.uuid, gi.placement, reason, run)


def _plan_cdi_repair(
    node: Node, plan: Plan, facts: GpuFacts, gi: GpuInstance, ci: ComputeInstance
) -> None:
    """Report a kept instance's missing or different CDI spec; the restore step rewrites it."""
    cdi = node.cdi()
    if cdi is None:
        return
    dev = cdi_device_for(node, ci.mig_uuid, facts.gpu.minor, gi.id, ci.id)
    if cdi.matches(dev):
        return
    why = "missing" if not cdi.exists(ci.mig_uuid) else "different from what the instance needs"
    plan.add(
        Step(
            "repair-cdi",
            ci.mig_uuid,
            facts.gpu.uuid,
            gi.placement,
            f"its CDI spec is {why}; rewritten",
        )
    )


def _ensure_cdi(node: Node, facts: GpuFacts, gi: GpuInstance, ci: ComputeInstance) -> str | None:
    """Write the instance's CDI spec when missing or different; returns its qualified name."""
    cdi = node.cdi()
    if cdi is None:
        return None
    dev = cdi_device_for(node, ci.mig_uuid, facts.gpu.minor, gi.id, ci.id)
    if not cdi.matches(dev):
        cdi.write(dev)
    return cdi.qualified_name(ci.mig_uuid)


def _restore_idle(record: Record, facts: GpuFacts) -> Step:
    state = _state(record)
    was = "" if state is RecordState.IDLE else f" (was {state.value})"
    reason = f"verified live; no pod holds it{was}"

    def run(node: Node) -> str | None:
        gi = next(g for g in facts.layout if g.id == record.gpu_instance_id)
        ci = next(c for c in gi.compute_instances if c.id == record.compute_instance_id)
        cdi_name = _ensure_cdi(node, facts, gi, ci)
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
        check_transition(_state(record), None, record.mig_uuid)
        note = remove_cdi_after_destroy(node, record.mig_uuid)
        node.records().remove(record.mig_uuid)
        return note

    action = "finish-reclaim" if _state(record) is RecordState.RECLAIMING else "drop-missing"
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
    intent: Intent,
    durable: Durable,
    facts: dict[str, GpuFacts],
    claimed: dict[str, str],
    held_gi: set[tuple[str, int]],
    only_gpu: str | None,
) -> Step:
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
        raise UnverifiableError(
            f"intent {intent.id} names GPU {intent.gpu_uuid}, which is not a MIG-enabled GPU of "
            "this node; nothing was changed"
        )
    here = [g for g in gpu.layout if g.placement.overlaps(intent.placement)]
    created: GpuInstance | None = None
    for gi in here:
        ours = (
            gi.placement == intent.placement
            and gi.profile_id == intent.profile_id
            and intent.gpu_instance_id in (None, gi.id)
            and (intent.gpu_uuid, gi.id) not in held_gi
            and not any(c.mig_uuid in claimed for c in gi.compute_instances)
        )
        if ours and created is None:
            created = gi
            continue
        if (intent.gpu_uuid, gi.id) in held_gi:
            continue  # a GI a record or pod accounts for: not created by this request
        raise UnverifiableError(
            f"intent {intent.id} ({intent.profile} at {intent.placement}) overlaps GI {gi.id} "
            "that it cannot have created; nothing was changed"
        )
    if created is not None:
        held_gi.add((intent.gpu_uuid, created.id))
        for ci in created.compute_instances:
            claimed[ci.mig_uuid] = f"intent {intent.id}"
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


def _remove_intent(intent: Intent) -> Callable[[Node], str | None]:
    def run(node: Node) -> str | None:
        check_transition(Creating, None, intent.id)
        node.intents().remove(intent.id)
        return None

    return run


def _rollback(
    intent: Intent, facts: GpuFacts, gi: GpuInstance | None
) -> Callable[[Node], str | None]:
    def run(node: Node) -> str | None:
        hw = node.hardware()
        uuids = {intent.mig_uuid} if intent.mig_uuid else set()
        if gi is not None:
            try:
                for ci in gi.compute_instances:
                    uuids.add(ci.mig_uuid)
                    hw.destroy_compute_instance(facts.gpu.index, gi.id, ci.id)
                hw.destroy_gpu_instance(facts.gpu.index, gi.id)
            except NvmlError as exc:
                raise _Failed(
                    f"rollback of intent {intent.id} failed: {exc.message}; the intent is kept",
                    fatal=True,
                ) from None
        notes = [n for u in sorted(uuids) if (n := remove_cdi_after_destroy(node, u))]
        check_transition(Creating, None, intent.id)
        node.intents().remove(intent.id)
        return "; ".join(notes) or None

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
    durable: Durable,
    claimed: dict[str, str],
    held_gi: set[tuple[str, int]],
    busy_gpus: set[str],
    adopt: bool,
    pairs_only: bool,
) -> None:
    hw = node.hardware()
    for uuid, gpu in facts.items():
        for gi in gpu.layout:
            if (uuid, gi.id) in held_gi:
                continue
            name = gpu.names.get(gi.profile_id, f"profile {gi.profile_id}")
            if not gi.compute_instances:
                _plan_orphan(hw, plan, gpu, gi, name, busy_gpus, adopt and not pairs_only)
                continue
            for ci in gi.compute_instances:
                if ci.mig_uuid in claimed:
                    continue
                if adopt:
                    plan.add(_adopt_idle(gpu, gi, ci, name))
                else:
                    plan.add(
                        Step(
                            "preserve-unmanaged",
                            ci.mig_uuid,
                            uuid,
                            gi.placement,
                            "no ownership record; adoption is not enabled",
                        )
                    )


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
    if hw.gpu_has_processes(gpu.gpu.index):
        plan.add(
            Step(
                "preserve-orphan-gi",
                None,
                uuid,
                gi.placement,
                f"GI {gi.id} ({name}): processes run on the GPU",
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


def _adopt_idle(gpu: GpuFacts, gi: GpuInstance, ci: ComputeInstance, name: str) -> Step:
    def run(node: Node) -> str | None:
        now = node.clock()
        check_transition(None, RecordState.IDLE, ci.mig_uuid)
        cdi_name = _ensure_cdi(node, gpu, gi, ci)
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
        return None

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


def recover(node: Node, pods: PodSnapshot | None, adopt: bool, dry_run: bool) -> ActionReport:
    """`recover`: the pod source (or `--assume-no-pods`) is required by the caller."""
    adopt = adopt or node.config().adopt_existing
    return _run(node, RecoveryReport, dry_run, lambda d: plan_recovery(node, d, pods, adopt))


def adopt_pairs(
    node: Node, pods: PodSnapshot | None, exclusive_owner: bool, gpu: str | None, dry_run: bool
) -> ActionReport:
    if not (exclusive_owner or node.config().adopt_existing):
        raise UsageError(
            "adopt needs the opt-in that HAMi exclusively owns the complete MIG layout on this "
            "node: --exclusive-owner or devices.nvidia.adoptExistingMIGInstances: true"
        )
    return _run(
        node,
        AdoptionReport,
        dry_run,
        lambda d: plan_recovery(node, d, pods, adopt=True, only_gpu=gpu, pairs_only=True),
    )


def _run(
    node: Node,
    report: type[ActionReport],
    dry_run: bool,
    make_plan: Callable[[Durable], Plan],
) -> ActionReport:
    """Under the node lock: load, plan and verify everything, then execute (or only report)."""
    with node.lock():
        plan = make_plan(load_for_mutation(node))
        actions, failures = execute_plan(node, plan, dry_run)
    return report(
        dry_run=dry_run,
        actions=tuple(actions),
        failed="; ".join(failures) or None,
        exit_code=4 if failures else 0,
        skipped=tuple(plan.skipped),
    )
