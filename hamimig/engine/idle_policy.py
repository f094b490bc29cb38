"""The idle cache policy (docs/idle-policy.md), enforced by `reconcile`: the instances idle
longest go first, so reuse keeps working for the profiles a node serves often while a rarely used
one stops holding slices a whole-GPU job could use. First the rules, pure functions over values;
then reconcile's pass, which gathers the facts they judge and plans evictions as reclaims.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hamimig.config import Config
from hamimig.durations import exact_duration, format_duration, parse_time
from hamimig.engine.facts import (
    BUSY,
    Durable,
    GpuFacts,
    LiveCheck,
    Liveness,
    check_record,
    has_processes,
)
from hamimig.engine.node import Node
from hamimig.engine.ownership import PodHolds
from hamimig.engine.podsource import changed_after, stale
from hamimig.engine.results import Warning_
from hamimig.engine.steps import Managed, Plan, Where
from hamimig.errors import HamimigError
from hamimig.hw.types import Gpu, MigHardware, Placement
from hamimig.store.records import Record
from hamimig.vocabulary import ActionKind, State

SINCE_IDLE = "idleSince"
SINCE_UPDATE = "updatedAt"
SINCE_SEEN = "first seen unheld"


@dataclass(frozen=True)
class IdlePolicy:
    ttl: int = 0
    """Seconds; 0: no time limit."""
    cap: int | None = None
    """Idle instances kept per GPU; None: no limit."""

    @classmethod
    def of(cls, config: Config) -> IdlePolicy:
        return cls(config.idle_ttl, config.max_idle_per_gpu)

    @property
    def enabled(self) -> bool:
        return self.ttl > 0 or self.cap is not None

    def __str__(self) -> str:
        ttl = f"idleTTL {exact_duration(self.ttl)}" if self.ttl else ""
        cap = f"maxIdleInstancesPerGPU {self.cap}" if self.cap is not None else ""
        return ", ".join(part for part in (ttl, cap) if part) or "off"


@dataclass(frozen=True)
class IdleAge:
    """Since when a record has been Idle, and what that is counted from (None: unknown, so
    the instance is never old enough for a time limit and is the last a cap takes)."""

    since: float | None
    source: str


def idle_age_of(record: Record, seen: dict[str, str]) -> IdleAge:
    """`idleSince` when hamimig wrote it; else, for a record of hamimig's, its last update
    (it has been Idle at least since then); for one HAMi wrote, when a policy pass first saw
    it unheld (`seen`: the idle-seen file)."""
    since, source = record.idle_since, SINCE_IDLE
    if since is None and record.managed:
        since, source = record.updated_at, SINCE_UPDATE
    elif since is None:
        since, source = seen.get(record.mig_uuid), SINCE_SEEN
    return IdleAge(None if since is None else parse_time(since), source)


@dataclass(frozen=True)
class Candidate:
    """An Idle record the policy may look at; `kept` says why it must stay (then it does not
    count toward the cap)."""

    record: Record
    age: IdleAge
    kept: str | None = None


@dataclass(frozen=True)
class Decision:
    """What the policy does with one candidate: evict it (`evict`), or keep it although a limit
    says it should go (`evict` False; the reason says both)."""

    candidate: Candidate
    evict: bool
    reason: str


def _order(c: Candidate) -> tuple[float, str, str]:
    """Idle longest first; ties by the older `createdAt`, then the MIG UUID. An unknown age
    sorts last: it might have been released a moment ago."""
    since = c.age.since if c.age.since is not None else float("inf")
    return since, c.record.created_at or "\uffff", c.record.mig_uuid


def decide(
    policy: IdlePolicy,
    now: float,
    gpu_index: int,
    candidates: Iterable[Candidate],
    joining: int = 0,
) -> list[Decision]:
    """The evictions on one GPU: first every instance idle longer than the TTL, then, while
    more than the cap are Idle, the one idle longest. `joining` counts instances this same pass
    makes Idle (releases): they count toward the cap but are never evicted by the pass that
    released them."""
    chosen = sorted(candidates, key=_order)
    count = joining + sum(1 for c in chosen if c.kept is None)
    decisions: list[Decision] = []
    for c in chosen:
        age = None if c.age.since is None else now - c.age.since
        why: str | None = None
        if policy.ttl and age is not None and age > policy.ttl:
            counted = "" if c.age.source == SINCE_IDLE else f", counted from {c.age.source}"
            why = f"idle {format_duration(age)} > idleTTL {exact_duration(policy.ttl)}{counted}"
        elif c.kept is None and policy.cap is not None and count > policy.cap:
            why = f"GPU {gpu_index} holds {count} Idle > {policy.cap}"
        if why is not None and c.kept is not None:
            decisions.append(Decision(c, False, f"{why}, but {c.kept}; kept"))
        elif why is not None:
            decisions.append(Decision(c, True, why))
            count -= 1
    return decisions


def idle_records(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if r.state is State.IDLE]


def seen_after(
    seen: dict[str, str], records: Iterable[Record], unheld: set[str], now: str
) -> dict[str, str]:
    """The idle-seen map after a policy pass: HAMi's Idle records seen unheld keep their first
    sighting or get `now`; every other entry goes (its record is gone or hamimig's now, or a
    pod holds it, so its clock starts again when it is released)."""
    return {
        r.mig_uuid: seen.get(r.mig_uuid, now)
        for r in records
        if not r.managed and r.state is State.IDLE and r.mig_uuid in unheld
    }


# --- reconcile's idle pass ----------------------------------------------------------------

if TYPE_CHECKING:
    from hamimig.pods.sources import PodSnapshot


def plan_idle_policy(
    plan: Plan,
    node: Node,
    durable: Durable,
    pods: PodSnapshot,
    policy: IdlePolicy,
    notes: list[str],
) -> dict[str, str] | None:
    """Add the idle policy's evictions to `plan`, after its other steps. Returns the idle-seen
    map to save when it changed (None: as it is); says in `notes` why it did nothing at all."""
    hw = node.hardware()
    now = node.now()
    if (too_old := stale(node, pods)) is not None:
        notes.append(f"idle policy ({policy}) not applied: {too_old}")
        return None
    seen, problem = node.idle_seen.load()
    if problem is not None:
        reason = f"{problem.reason}; the idle clocks of HAMi's own records start again"
        plan.warnings.append(Warning_(file=problem.file, reason=reason))
    holds = PodHolds.of(pods)
    joining = _joining(plan, holds)
    looked, kept = _looked(plan, hw, durable, holds, pods)
    # A pod or a process holding one of HAMi's records stops its clock; in flight does not.
    unheld = {u for u, why in kept.items() if why is None or why == _IN_FLIGHT}
    new_seen = seen_after(seen, durable.records.values(), unheld, node.clock())
    evicted: set[str] = set()
    for gpu, records, lives in looked:
        candidates = [Candidate(r, idle_age_of(r, new_seen), kept[r.mig_uuid]) for r in records]
        for decision in decide(policy, now, gpu.index, candidates, joining.get(gpu.uuid, 0)):
            record = decision.candidate.record
            reason = f"idle policy: {decision.reason}"
            if decision.evict:
                target = Managed(record, lives[record.mig_uuid], gpu.index)
                plan.add(ActionKind.EVICT_IDLE, target, reason)
                evicted.add(record.mig_uuid)
            else:
                at = Where(record.mig_uuid, gpu.uuid, record.placement)
                plan.add(ActionKind.SKIP, at, reason)
    # A spec about to go with its instance is not worth rewriting first.
    plan.steps = [
        s for s in plan.steps if not (s.kind is ActionKind.REPAIR_CDI and s.mig_uuid in evicted)
    ]
    return new_seen if new_seen != seen or problem is not None else None


def _joining(plan: Plan, holds: PodHolds) -> dict[str, int]:
    """Per GPU, the instances `plan` releases to Idle: they count toward the cap, except one a
    pod holds after all (it will not be waiting for anyone)."""
    released = (
        s.target.record
        for s in plan.steps
        if s.kind is ActionKind.RELEASE_IDLE and isinstance(s.target, Managed)
    )
    return Counter(r.gpu_uuid for r in released if holds.hold(r) is None)


_Looked = tuple[Gpu, list[Record], dict[str, LiveCheck]]
"""A GPU, its Idle records, and each checked against its layout."""


def _looked(
    plan: Plan, hw: MigHardware, durable: Durable, holds: PodHolds, pods: PodSnapshot
) -> tuple[list[_Looked], dict[str, str | None]]:
    """Each GPU's Idle records checked against its layout, and why each must stay (None: it
    may go). A GPU that is gone is recover's business, as for the spec refresh; one whose
    layout cannot be read is a failure of the pass."""
    in_flight = [(i.gpu_uuid, i.placement) for i in durable.intents]
    by_gpu: dict[str, list[Record]] = {}
    for record in idle_records(durable.records.values()):
        by_gpu.setdefault(record.gpu_uuid, []).append(record)
    looked: list[_Looked] = []
    kept: dict[str, str | None] = {}
    for gpu_uuid, records in sorted(by_gpu.items()):
        try:
            gpu = hw.gpu_by_uuid(gpu_uuid)
        except HamimigError:
            continue
        try:
            layout = hw.layout(gpu.index)
        except HamimigError as exc:
            plan.failures.append(f"idle policy: GPU {gpu.index}: {exc.message}")
            continue
        facts = GpuFacts.named(hw, gpu, layout)
        lives = {r.mig_uuid: check_record(r, layout, facts.names) for r in records}
        for r in records:
            kept[r.mig_uuid] = _kept_because(hw, r, lives[r.mig_uuid], holds, in_flight, pods)
        looked.append((gpu, records, lives))
    return looked, kept


_IN_FLIGHT = "an allocation is in flight on its slices"


def _kept_because(
    hw: MigHardware,
    record: Record,
    live: LiveCheck,
    holds: PodHolds,
    in_flight: list[tuple[str, Placement]],
    pods: PodSnapshot,
) -> str | None:
    """Why the policy must leave an Idle instance alone (None: it may go)."""
    held = holds.hold(record)
    if held is not None:
        return held.reason
    newer = changed_after(record, pods)
    if newer:
        return newer.removesuffix("; left as it is")
    if live.status is not Liveness.COMPLETE:
        return f"it does not match the hardware ({live.detail}): run 'hamimig recover'"
    if has_processes(hw, record.mig_uuid):
        return BUSY
    if any(g == record.gpu_uuid and p.overlaps(record.placement) for g, p in in_flight):
        return _IN_FLIGHT
    return None
