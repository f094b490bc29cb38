"""`release`: an Active instance back to Idle once its pod is gone, keeping its GI/CI, MIG
UUID and CDI spec for the next matching request. Also the pieces `reclaim` shares: resolving a
MIG UUID prefix and running a plan of one step per instance.
"""

from __future__ import annotations

import dataclasses

from hamimig.engine.executor import Applied, StepFailed, execute, failure_text, tidy_finished
from hamimig.engine.facts import Durable, load_for_mutation
from hamimig.engine.lookup import check_reference, resolve_instance
from hamimig.engine.node import Node
from hamimig.engine.ownership import same_uid
from hamimig.engine.requests import ByPod, ByUuid, ReleaseTarget
from hamimig.engine.results import InstanceView, Release, record_view
from hamimig.engine.steps import Managed, Plan, Step
from hamimig.errors import NOTHING_CHANGED, ConflictError, NotFoundError, UsageError
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import ActionKind, Outcome, State


def resolved(node: Node, target: ByUuid, durable: Durable) -> ByUuid:
    """The instance a MIG UUID, a prefix of one or its CDI device name names (see `lookup`);
    called under the node lock, after the durable state is loaded."""
    mig_uuid = resolve_instance(node, target.mig_uuid, True, durable.records, durable.intents)
    return target if mig_uuid == target.mig_uuid else ByUuid(mig_uuid)


def index_hint(record: Record) -> int:
    return record.gpu_index if record.gpu_index is not None else -1


def release(node: Node, target: ReleaseTarget, dry_run: bool = False) -> Release:
    """Confirmed pod release: Active -> Idle, the GI/CI and CDI spec kept for reuse. Releasing
    again is `unchanged`, not an error (docs/reference.md), so a retried release is safe."""
    if isinstance(target, ByUuid):
        check_reference(target.mig_uuid, mutating=True)
    with node.lock_unless(dry_run):
        durable = load_for_mutation(node, tidy=not dry_run, dry_run=dry_run)
        if isinstance(target, ByUuid):
            target = resolved(node, target, durable)
        if already := _released_before(durable, target):
            views = tuple(
                record_view(r, index_hint(r)).with_outcome(Outcome.UNCHANGED) for r in already
            )
        elif dry_run:
            steps, now = plan_release(durable, target).steps, node.clock()
            views = tuple(_would_be_idle(s, now) for s in steps)
        else:
            views = execute_each(node, plan_release(durable, target), Outcome.RELEASED)
            tidy_finished(node, durable)
        return Release(released=views, dry_run=dry_run, warnings=durable.warnings)


def _released_before(durable: Durable, target: ReleaseTarget) -> list[Record]:
    """What a release finds released already: an Idle instance by MIG UUID, or the Idle
    instances a pod with nothing Active any more last held."""
    if isinstance(target, ByUuid):
        record = durable.records.get(target.mig_uuid)
        return [record] if record is not None and record.state is State.IDLE else []
    active, released_before = pod_records(durable, target)
    return [] if active else released_before


def execute_each(
    node: Node, plan: Plan, outcome: Outcome, notes: list[str] | None = None
) -> tuple[InstanceView, ...]:
    """Execute a plan of one step per instance, each shown with its `outcome`. A failed step is
    shown `failed` and the others still run (exit 4), so what did happen is never lost behind
    the error; a plan of one aborts, its step failing as the command does."""
    out: list[InstanceView] = []
    done = execute(node, plan, dry_run=False)
    for step, result in zip(plan.steps, done.results, strict=True):
        assert isinstance(step.target, Managed)
        if isinstance(result, Applied):
            if result.note and notes is not None:
                notes.append(result.note)
            done_with = result.record or step.target.record
            out.append(record_view(done_with, step.target.gpu_index).with_outcome(outcome))
            continue
        left = (result.record if isinstance(result, StepFailed) else None) or step.target.record
        failed = record_view(left, index_hint(left), error=failure_text(result))
        out.append(failed.with_outcome(Outcome.FAILED))
    return tuple(out)


def _would_be_idle(step: Step, now: str) -> InstanceView:
    """The instance as the release would leave it: Idle, no owner, its idle clock started."""
    assert isinstance(step.target, Managed)
    before = step.target.record
    record = dataclasses.replace(before, owner=None, idle_since=now, last_owner=before.owner)
    view = record_view(record, index_hint(record), state=State.IDLE)
    return view.with_outcome(Outcome.RELEASED)


def plan_release(durable: Durable, target: ReleaseTarget) -> Plan:
    """The Active instances a pod (or one MIG UUID) releases, in MIG UUID order; a plan of
    several goes on past a failed step, one of one aborts."""
    if isinstance(target, ByUuid):
        mig_uuid = target.mig_uuid
        record = durable.records.get(mig_uuid)
        if record is None:
            raise NotFoundError(f"no hamimig record for {mig_uuid}")
        if record.state is not State.ACTIVE:
            raise ConflictError(
                f"{mig_uuid} is {record.state.value}, not Active: nothing to release"
            )
        targets = [record]
    else:
        targets, released_before = pod_records(durable, target)
        if not targets and not released_before:
            uid = f" with UID {target.uid}" if target.uid is not None else ""
            raise NotFoundError(f"pod {target}{uid} holds no MIG instance on this node")
    steps = [
        Step(ActionKind.RELEASE, Managed(r, None, index_hint(r)), "confirmed pod release")
        for r in sorted(targets, key=lambda r: r.mig_uuid)
    ]
    return Plan(steps, abort=len(steps) == 1)


def pod_records(durable: Durable, target: ByPod) -> tuple[list[Record], list[Record]]:
    """The Active records a pod holds and the Idle ones it last held, in MIG UUID order; with a
    UID, only that incarnation's. A pod recreated under its name is another owner, so with
    several identities and something Active nothing is released (exit 2, naming the UIDs)."""

    def names_it(owner: Owner | None) -> bool:
        return (
            owner is not None
            and (owner.namespace, owner.name) == (target.namespace, target.name)
            and same_uid(owner.uid, target.uid)
        )

    records = sorted(durable.records.values(), key=lambda r: r.mig_uuid)
    active = [r for r in records if r.state is State.ACTIVE and names_it(r.owner)]
    before = [r for r in records if r.state is State.IDLE and names_it(r.last_owner)]
    holders = [(r.owner, "Active") for r in active] + [(r.last_owner, "Idle") for r in before]
    uids = sorted({(o.uid or "").lower() for o, _ in holders if o is not None})
    if active and len(uids) > 1:
        shown = ", ".join(_incarnation(uid, holders) for uid in uids)
        raise UsageError(
            f"pod {target} names more than one incarnation here ({shown}): say which by its "
            f"pod UID, or release one instance by its MIG UUID; {NOTHING_CHANGED}"
        )
    return active, before


def _incarnation(uid: str, holders: list[tuple[Owner | None, str]]) -> str:
    """One incarnation as an ambiguity shows it: `UID 1f0c… (Active)`, `no UID (Idle)`."""
    states = sorted(
        {state for o, state in holders if o is not None and (o.uid or "").lower() == uid}
    )
    return f"{'UID ' + uid if uid else 'no UID'} ({', '.join(states)})"
