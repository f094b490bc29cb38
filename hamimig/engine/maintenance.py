"""`release`, `reclaim` and `reconcile`: moving instances to Idle, destroying Idle and Error
instances on request, and the retry pass for what failed before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hamimig.engine import validate
from hamimig.engine.executor import (
    DestroyFailed,
    cdi_device_for,
    destroy_managed,
    set_state,
)
from hamimig.engine.facts import (
    Durable,
    LiveCheck,
    Liveness,
    check_record,
    has_processes,
    load_for_mutation,
    tidy_finished,
)
from hamimig.engine.inventory import record_view
from hamimig.engine.node import Node, resolve_gpu
from hamimig.engine.plans import same_uid
from hamimig.engine.podsource import PodSource, changed_after
from hamimig.engine.views import (
    Action,
    ActionReport,
    InstanceView,
    Reclaim,
    Release,
    SkippedInstance,
    Warning_,
)
from hamimig.errors import (
    ConflictError,
    HamimigError,
    HardwareError,
    NotFoundError,
    UnverifiableError,
    UsageError,
)
from hamimig.hw.types import Gpu, GpuInstance, Placement
from hamimig.store.records import Owner, Record, RecordState

if TYPE_CHECKING:
    from hamimig.pods.model import Pod
    from hamimig.pods.sources import PodSnapshot


def release(node: Node, pod: tuple[str, str] | None, mig_uuid: str | None) -> Release:
    """Confirmed pod release: Active -> Idle. The GI/CI and CDI spec stay for reuse."""
    if (pod is None) == (mig_uuid is None):
        raise UsageError("say which instance to release: --pod NS/NAME or --mig-uuid UUID")
    with node.lock():
        durable = load_for_mutation(node, tidy=True)
        if mig_uuid is not None:
            record = durable.records.get(mig_uuid)
            if record is None:
                raise NotFoundError(f"no hamimig record for {mig_uuid}")
            if record.state is RecordState.IDLE:
                return Release(released=(record_view(record, _index_hint(record)),))
            if record.state is not RecordState.ACTIVE:
                raise ConflictError(
                    f"{mig_uuid} is {record.state.value}, not Active: nothing to release"
                )
            targets = [record]
        else:
            assert pod is not None
            targets = [
                r
                for r in durable.records.values()
                if r.state is RecordState.ACTIVE
                and r.owner is not None
                and (r.owner.namespace, r.owner.name) == pod
            ]
            if not targets:
                raise NotFoundError(f"pod {pod[0]}/{pod[1]} holds no MIG instance on this node")
        released: list[InstanceView] = []
        for record in sorted(targets, key=lambda r: r.mig_uuid):
            try:
                idle = set_state(node, record, RecordState.IDLE, owner=None)
            except OSError as exc:
                raise HardwareError(
                    f"cannot write the record of {record.mig_uuid}: {exc}"
                ) from None
            released.append(record_view(idle, _index_hint(idle)))
        tidy_finished(node, durable)
        return Release(released=tuple(released))


def _index_hint(record: Record) -> int:
    return record.gpu_index if record.gpu_index is not None else -1


@dataclass(frozen=True)
class Target:
    record: Record
    live: LiveCheck
    gpu_index: int


def _verified(
    record: Record, layout: tuple[GpuInstance, ...], names: dict[int, str], gpu: Gpu
) -> Target:
    live = check_record(record, layout, names)
    state = record.state
    if live.status is Liveness.MISMATCH:
        raise UnverifiableError(f"{record.mig_uuid}: {live.detail}; nothing was changed")
    if live.status is not Liveness.COMPLETE and state is RecordState.IDLE:
        raise UnverifiableError(
            f"Idle record {record.mig_uuid} does not match the hardware ({live.detail}); "
            "run 'hamimig recover'; nothing was changed"
        )
    return Target(record, live, gpu.index)


def _names(node: Node, gpu: Gpu, layout: tuple[GpuInstance, ...]) -> dict[int, str]:
    hw = node.hardware()
    return {gi.profile_id: hw.profile_name(gpu.index, gi.profile_id) or "" for gi in layout}


def reclaim(
    node: Node,
    mig_uuid: str | None,
    gpu_ref: str | None,
    placement: str | None,
    all_idle: bool,
    dry_run: bool,
) -> Reclaim:
    """Destroy Idle (or Error) instances; never Active, never anything without a record."""
    if (mig_uuid is None) == (gpu_ref is None):
        raise UsageError(
            "say what to reclaim: --mig-uuid UUID, or --gpu GPU with --placement or --all-idle"
        )
    if gpu_ref is not None and (placement is None) == (not all_idle):
        raise UsageError("with --gpu, give exactly one of --placement P or --all-idle")
    if mig_uuid is not None and (placement is not None or all_idle):
        raise UsageError("--mig-uuid names one instance: drop --placement/--all-idle")
    hw = node.hardware()
    with node.lock():
        durable = load_for_mutation(node, tidy=not dry_run, dry_run=dry_run)
        if mig_uuid is not None:
            targets = _targets_by_uuid(node, durable, mig_uuid)
        else:
            assert gpu_ref is not None
            gpu = resolve_gpu(hw, gpu_ref)
            layout = hw.layout(gpu.index)
            names = _names(node, gpu, layout)
            records = durable.on_gpu(gpu.uuid)
            if all_idle:
                chosen = [
                    r
                    for r in records
                    if r.state in (RecordState.IDLE, RecordState.ERROR, RecordState.RECLAIMING)
                ]
            else:
                assert placement is not None
                slices = validate.slice_count(hw.profiles(gpu.index))
                window = validate.reclaim_window(placement, slices)
                chosen = _window_targets(window, records, layout, names)
            targets = [_verified(r, layout, names, gpu) for r in chosen]
        targets.sort(key=lambda t: (t.record.updated_at or "", t.record.mig_uuid))
        busy = [t for t in targets if _busy(node, t)]
        if mig_uuid is not None and busy:
            raise ConflictError(
                f"{mig_uuid} is busy: processes run on it; hamimig never reclaims it"
            )
        skipped = tuple(SkippedInstance(t.record.mig_uuid, BUSY) for t in busy)
        targets = [t for t in targets if t not in busy]
        views = tuple(record_view(t.record, t.gpu_index) for t in targets)
        if dry_run:
            return Reclaim(
                dry_run=True, reclaimed=views, skipped=skipped, warnings=durable.warnings
            )
        notes: list[str] = []
        for target in targets:
            notes.extend(destroy_managed(node, target.record, target.live, target.gpu_index))
        tidy_finished(node, durable)
        return Reclaim(dry_run=False, reclaimed=views, notes=tuple(notes), skipped=skipped)


BUSY = "busy: processes run on it"


def _busy(node: Node, target: Target) -> bool:
    """Only a live instance can have processes; a GI whose CI is gone has no MIG device."""
    if target.live.status is not Liveness.COMPLETE:
        return False
    return has_processes(node.hardware(), target.record.mig_uuid)


def _targets_by_uuid(node: Node, durable: Durable, mig_uuid: str) -> list[Target]:
    hw = node.hardware()
    record = durable.records.get(mig_uuid)
    if record is None:
        if hw.mig_device(mig_uuid) is not None:
            raise ConflictError(
                f"{mig_uuid} has no hamimig record (Unmanaged): hamimig never reclaims it"
            )
        raise NotFoundError(f"no MIG instance {mig_uuid} on this node and no record of it")
    state = record.state
    if state is RecordState.ACTIVE:
        owner = f" (held by {record.owner})" if record.owner else ""
        raise ConflictError(f"{mig_uuid} is Active{owner}: hamimig never reclaims it")
    gpu = hw.gpu_by_uuid(record.gpu_uuid)
    layout = hw.layout(gpu.index)
    return [_verified(record, layout, _names(node, gpu, layout), gpu)]


def _window_targets(
    window: Placement, records: list[Record], layout: tuple[GpuInstance, ...], names: dict[int, str]
) -> list[Record]:
    """Idle/Error records overlapping the window; refuse if anything else is live there."""
    chosen = [
        r
        for r in records
        if r.placement.overlaps(window)
        and r.state in (RecordState.IDLE, RecordState.ERROR, RecordState.RECLAIMING)
    ]
    owned = {(r.gpu_instance_id, r.placement) for r in chosen}
    blocked = []
    for gi in layout:
        if gi.placement.overlaps(window) and (gi.id, gi.placement) not in owned:
            active = next(
                (r for r in records if r.gpu_instance_id == gi.id and r.placement == gi.placement),
                None,
            )
            what = (
                active.state.value
                if active
                else ("Unmanaged" if gi.compute_instances else "OrphanGI")
            )
            name = names.get(gi.profile_id, str(gi.profile_id))
            blocked.append(f"GI {gi.id} ({name} at {gi.placement}) is {what}")
    if blocked:
        raise ConflictError(
            f"slices {window} hold instances hamimig never reclaims: " + "; ".join(blocked)
        )
    return chosen


def _holders(pods: PodSnapshot) -> list[Pod]:
    """The pods that hold allocations, once the list is known to be complete and readable."""
    if not pods.complete:
        raise UnverifiableError(
            f"the pod list from {pods.source} is incomplete; reconcile changed nothing"
        )
    bad = [p for p in pods.pods if p.annotation_error and p.holds_allocations]
    if bad:
        raise UnverifiableError(
            f"pod {bad[0].key} has a malformed hami.io/vgpu-mig-allocations annotation "
            f"({bad[0].annotation_error}); reconcile changed nothing"
        )
    return [p for p in pods.pods if p.holds_allocations]


def _owner_pods(owner: Owner, by_key: dict[tuple[str, str], list[Pod]]) -> list[Pod]:
    return [p for p in by_key.get((owner.namespace, owner.name), []) if same_uid(owner.uid, p.uid)]


def _check_holders(
    durable: Durable,
    by_key: dict[tuple[str, str], list[Pod]],
    named: dict[str, list[tuple[str, str]]],
) -> None:
    """Two holders of one instance are a conflict nobody here can settle (exit 5): two
    annotations naming it, or an annotation naming an instance whose recorded owner is
    another pod that still holds allocations."""
    refusals: list[str] = []
    for mig_uuid, claims in sorted(named.items()):
        wheres = [where for _, where in claims]
        if len(claims) > 1:
            refusals.append(f"{mig_uuid} is named by {' and by '.join(wheres)}")
            continue
        record = durable.records.get(mig_uuid)
        if record is None or record.state is not RecordState.ACTIVE or record.owner is None:
            continue
        owners = [p for p in _owner_pods(record.owner, by_key) if p.holds_allocations]
        claimant = claims[0][0]
        if owners and all(p.key != claimant for p in owners):
            refusals.append(
                f"{mig_uuid} is held by pod {owners[0].key} (its record's owner) and named by "
                f"{wheres[0]}: two pods cannot hold one instance"
            )
    if refusals:
        raise UnverifiableError("; ".join(refusals) + "; reconcile changed nothing")


def _pods_gone(durable: Durable, pods: PodSnapshot) -> list[tuple[Record, str]]:
    """Active records whose owner pod no longer holds allocations, with the reason."""
    by_key: dict[tuple[str, str], list[Pod]] = {}
    for pod in pods.pods:
        by_key.setdefault((pod.namespace, pod.name), []).append(pod)
    named: dict[str, list[tuple[str, str]]] = {}  # MIG UUID -> (pod key, where) per claim
    for pod in _holders(pods):
        for alloc in pod.allocations:
            if alloc.mig_uuid:
                where = (
                    f"pod {pod.key} container {alloc.container_index} device {alloc.device_index}"
                )
                named.setdefault(alloc.mig_uuid, []).append((pod.key, where))
    _check_holders(durable, by_key, named)
    gone: list[tuple[Record, str]] = []
    for record in durable.records.values():
        if record.state is not RecordState.ACTIVE or record.owner is None:
            continue
        if record.mig_uuid in named:
            continue
        owner = record.owner
        candidates = _owner_pods(owner, by_key)
        if not candidates:
            gone.append((record, f"owner pod {owner.namespace}/{owner.name} no longer exists"))
        elif not any(p.holds_allocations for p in candidates):
            pod = candidates[0]
            why = "is being deleted" if pod.deletion_timestamp else f"has phase {pod.phase}"
            gone.append((record, f"owner pod {pod.key} {why}"))
    return gone


def _release_gone(node: Node, durable: Durable, pods: PodSnapshot, dry_run: bool) -> list[Action]:
    """Release (Active -> Idle) what pods no longer hold: never a record written after the
    pods were listed, never an instance that processes still run on."""
    hw = node.hardware()
    actions: list[Action] = []
    for record, reason in sorted(_pods_gone(durable, pods), key=lambda g: g[0].mig_uuid):
        where = (record.mig_uuid, record.gpu_uuid, record.placement)
        newer = changed_after(record, pods)
        if newer:
            actions.append(Action("skip", *where, f"{reason}, but the record {newer}"))
            continue
        if has_processes(hw, record.mig_uuid):
            actions.append(Action("skip", *where, f"{reason}, but {BUSY}; left Active"))
            continue
        if not dry_run:
            set_state(node, record, RecordState.IDLE, owner=None)
        actions.append(Action("release-idle", *where, reason))
    return actions


def reconcile(node: Node, dry_run: bool = False, source: PodSource | None = None) -> ActionReport:
    """One pass: with pods, release instances whose pods are gone; retry queued CDI removals;
    retry destroying Error instances."""
    source = source or PodSource()
    source.check(node, required=False)
    hw = node.hardware()
    actions: list[Action] = []
    failures: list[str] = []
    with node.lock():
        durable = load_for_mutation(node, tidy=not dry_run, dry_run=dry_run)
        pods = source.load(node)
        if pods is not None:
            actions += _release_gone(node, durable, pods, dry_run)
        cdi = node.cdi()
        queue = node.queue()
        for item in durable.removals:
            queued_for = durable.records.get(item.mig_uuid)
            if queued_for is not None and queued_for.state is not RecordState.RECLAIMING:
                reason = "the instance has a record again; its spec is kept"
                actions.append(Action("retry-cdi-removal", item.mig_uuid, None, None, reason))
                if not dry_run:
                    queue.drop(item.mig_uuid)
                continue
            reason = f"queued since {item.since} after {item.attempts} failed attempt(s)"
            if not dry_run:
                try:
                    if cdi is not None:
                        cdi.remove(item.mig_uuid)
                    queue.drop(item.mig_uuid)
                except OSError as exc:
                    queue.add(item.mig_uuid, str(exc.strerror or exc), node.clock())
                    failures.append(f"CDI spec of {item.mig_uuid}: {exc.strerror or exc}")
                    reason += f"; failed again: {exc.strerror or exc}"
            actions.append(Action("retry-cdi-removal", item.mig_uuid, None, None, reason))
        specs, kept, spec_failures = _refresh_specs(node, durable, dry_run)
        actions += specs
        failures += spec_failures
        errors = [
            r
            for r in durable.records.values()
            if r.state in (RecordState.ERROR, RecordState.RECLAIMING)
        ]
        for record in sorted(errors, key=lambda r: (r.updated_at or "", r.mig_uuid)):
            try:
                gpu = hw.gpu_by_uuid(record.gpu_uuid)
                layout = hw.layout(gpu.index)
                target = _verified(record, layout, _names(node, gpu, layout), gpu)
                if _busy(node, target):
                    actions.append(
                        Action(
                            "skip",
                            record.mig_uuid,
                            record.gpu_uuid,
                            record.placement,
                            f"{record.state.value} instance is {BUSY}; not destroyed",
                        )
                    )
                    continue
            except HamimigError as exc:
                failures.append(exc.message)
                actions.append(
                    Action(
                        "retry-destroy",
                        record.mig_uuid,
                        record.gpu_uuid,
                        record.placement,
                        f"skipped: {exc.message}",
                    )
                )
                continue
            reason = f"{record.state.value} since {record.updated_at}: {record.error or 'retry'}"
            if not dry_run:
                try:
                    notes = destroy_managed(node, record, target.live, gpu.index)
                    reason += "; destroyed" + ("; " + "; ".join(notes) if notes else "")
                except DestroyFailed as exc:
                    failures.append(exc.message)
                    reason += f"; still failing: {exc.record.error}"
            actions.append(
                Action("retry-destroy", record.mig_uuid, record.gpu_uuid, record.placement, reason)
            )
        if actions and not dry_run:
            tidy_finished(node, durable)
    failed = "; ".join(failures) if failures else None
    return ActionReport(
        dry_run=dry_run,
        actions=tuple(actions),
        failed=failed,
        exit_code=4 if failures else 0,
        warnings=durable.warnings + tuple(kept),
    )


def _refresh_specs(
    node: Node, durable: Durable, dry_run: bool
) -> tuple[list[Action], list[Warning_], list[str]]:
    """Rewrite the specs of Active and Idle instances that no longer match the NVIDIA base
    spec (a driver upgrade changes library paths), as reuse and recover do.

    Only existing specs are looked at (a missing one is recover's `repair-cdi`), and the
    instance is taken as its record says: reconcile verifies nothing it does not destroy.
    With no usable base spec every spec is kept as it is, with a warning.
    """
    cdi = node.cdi()
    if cdi is None or not cdi.lookup().composes:
        return [], [], []
    records = sorted(
        (
            r
            for r in durable.records.values()
            if r.state in (RecordState.ACTIVE, RecordState.IDLE) and cdi.exists(r.mig_uuid)
        ),
        key=lambda r: r.mig_uuid,
    )
    actions: list[Action] = []
    kept: list[Warning_] = []
    failures: list[str] = []
    hw = node.hardware() if records else None
    for record in records:
        path = str(cdi.path_of(record.mig_uuid))
        where = (record.mig_uuid, record.gpu_uuid, record.placement)
        try:
            assert hw is not None
            gpu = hw.gpu_by_uuid(record.gpu_uuid)
        except HamimigError:
            continue  # its GPU is gone: recover's business
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
                continue
            if not dry_run:
                cdi.write(dev)
        except UsageError as exc:
            kept.append(Warning_(path, f"kept as it is, not compared: {exc.message}"))
            continue
        except (HamimigError, OSError) as exc:
            why = exc.message if isinstance(exc, HamimigError) else str(exc.strerror or exc)
            failures.append(f"CDI spec of {record.mig_uuid}: {why}")
            actions.append(Action("repair-cdi", *where, f"failed: {why}"))
            continue
        base = cdi.lookup().base
        reason = f"its CDI spec differs from what the NVIDIA CDI spec {base.path if base else ''}"
        reason += " and the instance need (a driver upgrade changes library paths)"
        actions.append(Action("repair-cdi", *where, reason + ("" if dry_run else "; rewritten")))
    return actions, kept, failures
