"""The idle policy's rules as pure functions (hamimig/engine/idle_policy.py): who goes first,
what counts toward the cap, where an idle age comes from, and the idle clock across every
transition, so that a policy change gets feedback in milliseconds."""

from __future__ import annotations

import dataclasses

import pytest

from hamimig.durations import parse_time
from hamimig.engine.idle_policy import (
    SINCE_IDLE,
    SINCE_SEEN,
    SINCE_UPDATE,
    Candidate,
    IdleAge,
    IdlePolicy,
    decide,
    idle_age_of,
    seen_after,
)
from hamimig.engine.states import idle_since_after
from hamimig.hw.types import Placement
from hamimig.store.records import Record
from hamimig.vocabulary import State

NOW = 1_000_000.0
T0 = "2026-01-01T00:00:00.000+00:00"
T1 = "2026-01-01T01:00:00.000+00:00"


def rec(n: int, **changes: object) -> Record:
    base = Record(
        mig_uuid=f"MIG-{n:08d}-0000-0000-0000-000000000000",
        gpu_uuid="GPU-0",
        profile="1g.10gb",
        placement=Placement(n, 1),
        gpu_instance_id=9 + n,
        compute_instance_id=0,
        state=State.IDLE,
        created_at=T0,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def cand(n: int, idle_for: float | None, kept: str | None = None, **changes: object) -> Candidate:
    since = None if idle_for is None else NOW - idle_for
    return Candidate(rec(n, **changes), IdleAge(since, SINCE_IDLE), kept)


def chosen(policy: IdlePolicy, *cands: Candidate, joining: int = 0) -> list[tuple[int, bool]]:
    return [
        (d.candidate.record.placement.start, d.evict)
        for d in decide(policy, NOW, 0, cands, joining)
    ]


def test_no_policy_evicts_nothing() -> None:
    assert not IdlePolicy().enabled
    assert chosen(IdlePolicy(), cand(0, 1e9), cand(1, 5)) == []


def test_ttl_takes_everything_older_than_it_and_nothing_exactly_at_it() -> None:
    policy = IdlePolicy(ttl=3600)
    assert chosen(policy, cand(0, 3601), cand(1, 3600), cand(2, 7200)) == [(2, True), (0, True)]


def test_cap_takes_the_longest_idle_until_the_cap_holds() -> None:
    policy = IdlePolicy(cap=1)
    assert chosen(policy, cand(0, 10), cand(1, 30), cand(2, 20)) == [(1, True), (2, True)]


def test_ttl_evictions_count_toward_meeting_the_cap() -> None:
    policy = IdlePolicy(ttl=100, cap=2)
    assert chosen(policy, cand(0, 500), cand(1, 50), cand(2, 40)) == [(0, True)]


def test_kept_candidates_neither_go_nor_count() -> None:
    policy = IdlePolicy(ttl=100, cap=1)
    decisions = decide(policy, NOW, 0, [cand(0, 500, "busy"), cand(1, 50), cand(2, 40)], 0)
    assert [(d.candidate.record.placement.start, d.evict) for d in decisions] == [
        (0, False),
        (1, True),
    ]
    assert decisions[0].reason.endswith("but busy; kept")
    assert decisions[1].reason == "GPU 0 holds 2 Idle > 1"


def test_joining_instances_count_but_are_not_candidates() -> None:
    assert chosen(IdlePolicy(cap=1), cand(0, 50), joining=1) == [(0, True)]
    assert chosen(IdlePolicy(cap=2), cand(0, 50), joining=1) == []


def test_an_unknown_age_is_never_over_a_ttl_and_goes_last_under_a_cap() -> None:
    assert chosen(IdlePolicy(ttl=1), cand(0, None)) == []
    assert chosen(IdlePolicy(cap=1), cand(0, None), cand(1, 5)) == [(1, True)]


def test_ties_go_to_the_older_creation_then_the_smaller_mig_uuid() -> None:
    policy = IdlePolicy(cap=0)
    a = cand(1, 10, created_at=T1)
    b = cand(2, 10, created_at=T0)
    c = cand(0, 10, created_at=T0)
    assert chosen(policy, a, b, c) == [(0, True), (2, True), (1, True)]


def test_reasons_name_the_age_and_the_limit() -> None:
    (ttl,) = decide(IdlePolicy(ttl=3600), NOW, 0, [cand(0, 11520)], 0)
    assert ttl.reason == "idle 3h12m > idleTTL 1h"
    old = Candidate(rec(0), IdleAge(NOW - 7200, SINCE_UPDATE))
    (counted,) = decide(IdlePolicy(ttl=3600), NOW, 0, [old], 0)
    assert counted.reason == "idle 2h > idleTTL 1h, counted from updatedAt"
    decisions = decide(IdlePolicy(cap=4), NOW, 3, [cand(n, 10 * n) for n in range(5)], 0)
    assert [d.reason for d in decisions] == ["GPU 3 holds 5 Idle > 4"]
    assert str(IdlePolicy(5400, 0)) == "idleTTL 1h30m, maxIdleInstancesPerGPU 0"


def test_idle_age_comes_from_idle_since_then_updated_at_then_first_sighting() -> None:
    assert idle_age_of(rec(0, idle_since=T1, updated_at=T0), {}) == IdleAge(
        parse_time(T1), SINCE_IDLE
    )
    assert idle_age_of(rec(0, updated_at=T0), {}) == IdleAge(parse_time(T0), SINCE_UPDATE)
    hamis = rec(0, managed=False)
    assert idle_age_of(hamis, {}) == IdleAge(None, SINCE_SEEN)
    assert idle_age_of(hamis, {hamis.mig_uuid: T1}) == IdleAge(parse_time(T1), SINCE_SEEN)


def test_the_seen_map_keeps_first_sightings_of_unheld_hami_records_only() -> None:
    hamis, held, ours = rec(0, managed=False), rec(1, managed=False), rec(2)
    gone = rec(3).mig_uuid
    seen = {hamis.mig_uuid: T0, held.mig_uuid: T0, ours.mig_uuid: T0, gone: T0}
    unheld = {hamis.mig_uuid, ours.mig_uuid}
    assert seen_after(seen, [hamis, held, ours], unheld, T1) == {hamis.mig_uuid: T0}
    assert seen_after({}, [hamis], unheld, T1) == {hamis.mig_uuid: T1}


@pytest.mark.parametrize(
    ("state", "target", "expected"),
    [
        (None, State.IDLE, "now"),  # adopted
        (State.ACTIVE, State.IDLE, "now"),  # released, or restored Idle by recovery
        (State.IDLE, State.IDLE, T1),  # re-confirmed: the clock keeps running
        (State.IDLE, State.ACTIVE, None),  # reused
        (State.IDLE, State.RECLAIMING, None),
        (State.ERROR, State.RECLAIMING, None),
    ],
)
def test_the_idle_clock_across_transitions(
    state: State | None, target: State, expected: str | None
) -> None:
    record = None if state is None else rec(0, state=state, idle_since=T1, updated_at=T0)
    assert idle_since_after(record, target, "now") == expected


def test_a_record_from_before_the_clock_keeps_its_last_update_as_idle_since() -> None:
    assert idle_since_after(rec(0, updated_at=T0), State.IDLE, "now") == T0
    assert idle_since_after(rec(0, managed=False), State.IDLE, "now") == "now"
