"""`reconcile`: the retry pass, so what hamimig left tracked but unfinished (instances whose pods
are gone, queued CDI removals, stale specs, Error instances, the idle policy) converges without
an operator. Its plan goes on past a failed step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hamimig.engine.executor import execute, tidy_finished
from hamimig.engine.facts import (
    BUSY,
    Durable,
    GpuFacts,
    Liveness,
    cdi_device_for,
    check_live,
    has_processes,
    load_for_mutation,
)
from hamimig.engine.idle_policy import IdlePolicy, plan_idle_policy
from hamimig.engine.node import Node
from hamimig.engine.ownership import PodHolds, holding_pods, owned_by
from hamimig.engine.podsource import PodSource, changed_after, stale, stale_warning
from hamimig.engine.recovery import plan_queued_removals, refuse_foreign_spec, two_holders
from hamimig.engine.results import ActionReport, Warning_
from hamimig.engine.steps import Managed, Plan, Spec, Where
from hamimig.errors import NOTHING_CHANGED, HamimigError, UnverifiableError, UsageError
from hamimig.store.cdi import CdiStore
from hamimig.store.counters import LAST_RECONCILE
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import ActionKind, State

if TYPE_CHECKING:
    from hamimig.pods.model import Pod
    from hamimig.pods.sources import PodSnapshot

from hamimig.engine.reclaim import is_running, verified
from hamimig.engine.release import index_hint


def reconcile(node: Node, dry_run: bool = False, source: PodSource | None = None) -> ActionReport:
    """One pass: with pods, release instances whose pods are gone; retry queued CDI removals;
    make specs current; retry destroying Error instances; then, with pods, apply the idle
    policy. A real pass that ran its plan notes `lastReconcile` (docs/formats.md "Counters")."""
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
        elif policy.enabled and pods is not None:
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
            target = Managed(record, None, index_hint(record))
            plan.add(ActionKind.RELEASE_IDLE, target, reason)


def _pods_gone(durable: Durable, pods: PodSnapshot) -> list[tuple[Record, str]]:
    """Active records whose owner pod no longer holds allocations, with the reason."""
    # MIG UUID (lower case: annotations may spell it either way) -> (pod key, where) per claim
    named: dict[str, list[tuple[str, str]]] = {}
    for pod in holding_pods(pods):
        for alloc in pod.allocations:
            if alloc.mig_uuid:
                where = (
                    f"pod {pod.key} container {alloc.container_index} device {alloc.device_index}"
                )
                named.setdefault(alloc.mig_uuid.lower(), []).append((pod.key, where))
    by_key: dict[tuple[str, str], list[Pod]] = {}  # one lookup per record, not a scan of the list
    for pod in pods.pods:
        by_key.setdefault((pod.namespace, pod.name), []).append(pod)
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
            refusals.append(two_holders(mig_uuid, owners[0], wheres[0]))
    if refusals:
        raise UnverifiableError("; ".join(refusals) + f"; {NOTHING_CHANGED}")


def _plan_spec_refresh(plan: Plan, node: Node, durable: Durable) -> None:
    """Rewrite existing specs of Active and Idle instances that no longer match the base spec
    (a driver upgrade; a missing one is recover's `repair-cdi`), only once the record is verified
    live (`check_live`): a wrong record would point the spec at another tenant's device nodes, so
    the pass refuses (exit 5), as it does for a file at the spec name that is not the spec."""
    cdi = node.cdi()
    if cdi is None or not cdi.lookup().composes:
        return
    for record in sorted(durable.records.values(), key=lambda r: r.mig_uuid):
        if record.state in (State.ACTIVE, State.IDLE) and cdi.exists(record.mig_uuid):
            _plan_spec(plan, node, cdi, record)


def _plan_spec(plan: Plan, node: Node, cdi: CdiStore, record: Record) -> None:
    if refuse_foreign_spec(plan, cdi, record.mig_uuid):  # not its spec: never rewritten
        return
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
        ids = (gpu.uuid, gpu.minor, record.gpu_instance_id, record.compute_instance_id)
        dev = cdi_device_for(node, record.mig_uuid, *ids)
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
    """Retry destroying Error (and unfinished Reclaiming) instances, oldest first, skipping busy
    ones. HAMi's plugin may have handed an Error instance to a pod (annotation only), so one a
    pod claims is skipped, and with a `stale` pod list only those without a CI are retried."""
    hw = node.hardware()
    why_unknown = "no pod list" if pods is None else stale(node, pods)
    holds = PodHolds.of(pods if why_unknown is None else None)
    errors = [r for r in durable.records.values() if r.state in (State.ERROR, State.RECLAIMING)]
    for record in sorted(errors, key=lambda r: (r.updated_at or "", r.mig_uuid)):
        at = Where(record.mig_uuid, record.gpu_uuid, record.placement)
        try:
            gpu = hw.gpu_by_uuid(record.gpu_uuid)
            target = verified(node, record, GpuFacts.named(hw, gpu, hw.layout(gpu.index)))
        except HamimigError as exc:
            plan.failures.append(exc.message)
            plan.add(ActionKind.RETRY_DESTROY, at, f"skipped: {exc.message}")
            continue
        hold = holds.hold(record)
        complete = target.live is not None and target.live.status is Liveness.COMPLETE
        if hold is not None:
            skip = f"{hold.reason}; not destroyed"
        elif why_unknown is not None and complete:
            skip = (
                f"{record.state.value} instance is complete, and a pod may hold it (HAMi's "
                f"plugin hands such instances out): {why_unknown}; not destroyed"
            )
        elif is_running(node, target):
            skip = f"{record.state.value} instance is {BUSY}; not destroyed"
        else:
            reason = f"{record.state.value} since {record.updated_at}: {record.error or 'retry'}"
            plan.add(ActionKind.RETRY_DESTROY, target, reason)
            continue
        plan.add(ActionKind.SKIP, at, skip)
