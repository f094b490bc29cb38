"""The idle cache policy: how long an Idle instance may wait for reuse (`idleTTL`) and how many
a GPU keeps (`maxIdleInstancesPerGPU`), enforced by `reconcile`.

Without a policy an Idle instance lives until a placement needs its slices. With one, the
instances idle longest go first, so reuse keeps working for the profiles a node serves often
while a rarely used one stops holding slices a whole-GPU job could use.

What may go is decided here, as pure functions over values; `maintenance.reconcile` gathers the
facts (records, pods, processes, the node's clock) and the executor reclaims, as it reclaims any
Idle instance. An instance is never evicted while a pod's allocation annotation names it or its
slot (HAMi's plugin may have handed it out since hamimig last wrote its record), while processes
run on it, or while an allocation is in flight on its slices; such an instance does not count
toward the cap either, since it is not waiting for anyone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hamimig.config import Config
from hamimig.durations import exact_duration, format_duration, parse_time
from hamimig.store.records import Record, RecordState

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
        parts = []
        if self.ttl:
            parts.append(f"idleTTL {exact_duration(self.ttl)}")
        if self.cap is not None:
            parts.append(f"maxIdleInstancesPerGPU {self.cap}")
        return ", ".join(parts) or "off"


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
    if record.idle_since is not None:
        return IdleAge(parse_time(record.idle_since), SINCE_IDLE)
    if record.managed:
        return IdleAge(
            None if record.updated_at is None else parse_time(record.updated_at), SINCE_UPDATE
        )
    first = seen.get(record.mig_uuid)
    return IdleAge(None if first is None else parse_time(first), SINCE_SEEN)


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
        if why is None:
            continue
        if c.kept is not None:
            decisions.append(Decision(c, False, f"{why}, but {c.kept}; kept"))
            continue
        decisions.append(Decision(c, True, why))
        count -= 1
    return decisions


def idle_records(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if r.state is RecordState.IDLE]


def seen_after(
    seen: dict[str, str], records: Iterable[Record], unheld: set[str], now: str
) -> dict[str, str]:
    """The idle-seen map after a policy pass: HAMi's Idle records seen unheld keep their first
    sighting or get `now`; every other entry goes (its record is gone or hamimig's now, or a
    pod holds it, so its clock starts again when it is released)."""
    out: dict[str, str] = {}
    for record in records:
        if record.managed or record.state is not RecordState.IDLE:
            continue
        if record.mig_uuid in unheld:
            out[record.mig_uuid] = seen.get(record.mig_uuid, now)
    return out
