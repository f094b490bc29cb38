"""What `recover` would do, checked by the recovery planner itself: every condition that
makes `recover` refuse (exit 5) is a failing check here, found by the same code, and no hint
sends the operator to `recover` while it would refuse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hamimig.config import Config
from hamimig.engine.facts import Durable
from hamimig.engine.node import Node
from hamimig.engine.podsource import PodSource, stale_warning
from hamimig.errors import HamimigError
from hamimig.reports.doctor.verdicts import HARDWARE, UNVERIFIABLE, fail, ok, skipped, warn
from hamimig.reports.views import Check, CheckStatus

if TYPE_CHECKING:
    from hamimig.engine.steps import Plan

_RECOVERY_CHECKS = ("recovery", "recovery/pods")
RECOVER_REFUSES = (
    "recover refuses until every recovery/N failure is resolved: stop the stray process, fix "
    "the record or the pod annotation, or drop what cannot be verified (hamimig forget "
    "MIG_UUID, or --intent ID)"
)


def with_recovery(
    checks: list[Check],
    node: Node,
    config: Config,
    durable: Durable | None,
    source: PodSource | None,
) -> list[Check]:
    """The recovery planner's own verdict, so every condition that makes `recover` exit 5 is a
    failing check here, found by the same code; no hint sends the operator to a refusing
    `recover`. When recover could not get as far (`durable` None, a state file that does not
    load), the recovery checks are `skipped` saying why, never left out."""
    from hamimig.engine.recovery import plan_recovery

    blockers = [c.name for c in checks if _blocks_recover(c)]
    if blockers or durable is None or durable.problems:
        failing = ", ".join(blockers) or "the hardware or the state directory"
        why = f"not checked while {failing} fail(s): recover cannot get that far either"
        return [*checks, *(skipped(name, why, "fix those first") for name in _RECOVERY_CHECKS)]
    found: list[Check] = []
    try:
        snapshot = None if source is None else source.load(node)
    except HamimigError as exc:
        failed = fail("recovery/pods", f"the pod list: {exc.message}", _POD_HINT)
        return [*_not_via_recover(checks), failed]
    if (old := stale_warning(node, snapshot)) is not None:
        found.append(warn("recovery/pods", old.reason, "list the pods again"))
    pods_known = snapshot is not None or (source is not None and source.assume_no_pods)
    try:
        plan = plan_recovery(node, durable, snapshot, config.adopt_existing, pods_known=pods_known)
    except HamimigError as exc:
        code = HARDWARE if exc.exit_code == HARDWARE else UNVERIFIABLE
        name = "recovery/pods" if "pod" in exc.message else "recovery"
        failed = fail(name, f"recover would fail: {exc.message}", _POD_HINT, code)
        return [*_not_via_recover(checks), failed]
    found += _verdicts(plan, pods_known, bool(found))
    return [*(_not_via_recover(checks) if plan.refusals else checks), *found]


def _blocks_recover(check: Check) -> bool:
    """A failure that makes recover fail or refuse before it plans (a missing NVIDIA base spec
    does not: recover keeps existing specs without one, and warns)."""
    return (
        check.status is CheckStatus.FAIL
        and check.name != "cdi-base"
        and (
            check.exit_code == HARDWARE
            or check.name in ("config", "state-dir", "cdi-dir", "cdi-removal-queue")
            or check.name.startswith(("record/", "intent/"))
        )
    )


def _verdicts(plan: Plan, pods_known: bool, warned: bool) -> list[Check]:
    """The planner's refusals as failing checks, else that recover can verify everything (unless
    a warning was already given); and that the pods went unchecked without a pod source."""
    found = [
        fail(f"recovery/{number}", f"recover would refuse: {refusal}", RECOVER_REFUSES)
        for number, refusal in enumerate(plan.refusals, 1)
    ]
    if not found and not warned:
        changes = sum(1 for step in plan.steps if step.changes)
        verified = f"recover can verify every record and intent ({changes} step(s))"
        found.append(ok("recovery", verified))
    if not pods_known:
        unchecked = "no pod source given, so what pods hold is not checked"
        hint = "doctor --pods FILE|- or --kube checks it too"
        found.append(skipped("recovery/pods", unchecked, hint))
    return found


def _not_via_recover(checks: list[Check]) -> list[Check]:
    """While recover refuses (or fails), no hint may send the operator to it."""
    return [
        c.model_copy(update={"hint": RECOVER_REFUSES}) if "hamimig recover" in c.hint else c
        for c in checks
    ]


_POD_HINT = "fix the pod source (kubectl get pods -o json), or check --node/NODE_NAME"
