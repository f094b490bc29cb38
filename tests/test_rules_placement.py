"""Where a new instance goes, and what may stand in its way: `plans.plan_create` as rules.

Inputs are plain values (the GPU's live layout, its records and intents), as the planner gets
them; the geometry is an 80 GB H100's (1g.10gb at any start 0-6, 2g.20gb at 0, 2 and 4). The rules:

Choosing a placement
- On an empty GPU the lowest legal placement is chosen, as a free placement.
- A free legal placement is preferred to one that would reclaim an Idle instance, even a lower one.
- A placement blocked by Idle instances is chosen only when no free one exists, and its plan
  reclaims them before the create.
- Of the placements blocked by Idle instances, the one reclaiming the fewest wins.
- Between equally good placements the lowest start wins.
- Instances in the way are reclaimed oldest first (by their last update).

What blocks a placement for good (hamimig never reclaims these)
- An Active instance.
- An Unmanaged instance (a live GI/CI pair without a record).
- An OrphanGI (a GI without a CI and without a record).
- An Idle or Error instance that processes run on (busy); busyness is asked only of live
  instances hamimig could reclaim, never of Active ones.
- When every placement is blocked for good, the request is refused (ConflictError).

What is reclaimed rather than refused
- An Error instance in the way: its destruction is retried.
- A Reclaiming instance in the way (its CI already gone): its reclaim is finished.
- A Reclaiming or Error record over the placement whose hardware is already gone: its files are
  finished first, so that it cannot name the new instance's slot.

An exact placement request
- The requested placement is used even when a lower one is free.
- Idle instances in the way of the requested placement are reclaimed.
- A requested placement blocked for good is refused with a ConflictError naming every such
  blocker (and only those): Active with its MIG UUID, Unmanaged, OrphanGI, busy.

What stops planning before any choice (UnverifiableError: nothing may be changed)
- An interrupted allocation (an intent) on this GPU; an intent on another GPU, or one whose MIG
  UUID already has a record (only its removal failed), does not.
- An Idle or Active record whose instance is not verified live, or any record that the hardware
  contradicts.

How blockers describe themselves
- Unmanaged, OrphanGI, or the record's state and MIG UUID, with "busy" when processes run on it;
  a profile the GPU does not name is shown by its ID.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from hamimig.engine.facts import LiveCheck, Liveness
from hamimig.engine.placement import Blocker, CreatePlan, plan_create
from hamimig.errors import ConflictError, UnverifiableError
from hamimig.hw.types import ComputeInstance, GpuInstance, Placement
from hamimig.store.intents import Intent
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import State

GPU = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
OTHER_GPU = "GPU-bbbbbbbb-0000-0000-0000-000000000000"

P_1G, P_2G = 19, 14
NAMES = {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 0: "7g.80gb"}
SIZE = {19: 1, 20: 1, 15: 2, 14: 2, 9: 4, 0: 8}
ONE_G = tuple(Placement(s, 1) for s in range(7))
TWO_G = tuple(Placement(s, 2) for s in (0, 2, 4))

_ids = iter(range(1, 10_000))


def mig(n: int) -> str:
    return f"MIG-{n:08x}-0000-0000-0000-000000000000"


class Board:
    """One GPU's live layout and records, built instance by instance."""

    def __init__(self) -> None:
        self.layout: list[GpuInstance] = []
        self.records: list[Record] = []

    def _gi(self, start: int, profile_id: int, ci: bool) -> GpuInstance:
        n = next(_ids)
        cis = (ComputeInstance(0, mig(n)),) if ci else ()
        gi = GpuInstance(0, GPU, n, profile_id, Placement(start, SIZE[profile_id]), cis)
        self.layout.append(gi)
        return gi

    def instance(
        self,
        start: int,
        state: State,
        profile_id: int = P_1G,
        updated_at: str | None = None,
    ) -> Record:
        """A live GI/CI pair with its record (Reclaiming: the CI already gone)."""
        gi = self._gi(start, profile_id, ci=state is not State.RECLAIMING)
        record = Record(
            mig_uuid=mig(gi.id),
            gpu_uuid=GPU,
            profile=NAMES[profile_id],
            placement=gi.placement,
            gpu_instance_id=gi.id,
            compute_instance_id=0,
            state=state,
            owner=Owner("ns", f"pod-{gi.id}") if state is State.ACTIVE else None,
            updated_at=updated_at,
        )
        self.records.append(record)
        return record

    def idle(self, start: int, profile_id: int = P_1G, updated_at: str | None = None) -> Record:
        return self.instance(start, State.IDLE, profile_id, updated_at)

    def active(self, start: int, profile_id: int = P_1G) -> Record:
        return self.instance(start, State.ACTIVE, profile_id)

    def unmanaged(self, start: int, profile_id: int = P_1G) -> GpuInstance:
        return self._gi(start, profile_id, ci=True)

    def orphan_gi(self, start: int, profile_id: int = P_1G) -> GpuInstance:
        return self._gi(start, profile_id, ci=False)

    def gone(self, start: int, state: State, profile_id: int = P_1G) -> Record:
        """A record whose hardware is already destroyed."""
        n = next(_ids)
        record = Record(
            mig_uuid=mig(n),
            gpu_uuid=GPU,
            profile=NAMES[profile_id],
            placement=Placement(start, SIZE[profile_id]),
            gpu_instance_id=n,
            compute_instance_id=0,
            state=state,
        )
        self.records.append(record)
        return record

    def plan(
        self,
        placements: tuple[Placement, ...] = ONE_G,
        requested: Placement | None = None,
        intents: tuple[Intent, ...] = (),
        is_busy: Callable[[Record], bool] = lambda _record: False,
    ) -> CreatePlan:
        return plan_create(
            GPU,
            placements,
            requested,
            list(self.records),
            list(intents),
            tuple(self.layout),
            NAMES,
            is_busy,
        )


def reclaimed(plan: CreatePlan) -> list[str]:
    return [record.mig_uuid for record, _check in plan.reclaim]


def intent(gpu_uuid: str = GPU, mig_uuid: str | None = None) -> Intent:
    return Intent(
        id="i1",
        op="allocate",
        gpu_uuid=gpu_uuid,
        gpu_index=0,
        profile="1g.10gb",
        profile_id=P_1G,
        placement=Placement(3, 1),
        owner=Owner("ns", "p"),
        created_at="2024-01-01T00:00:00Z",
        mig_uuid=mig_uuid,
    )


# --------------------------------------------------------------------------------------------
# Choosing a placement


def test_an_empty_gpu_gets_the_lowest_legal_placement_as_a_free_placement() -> None:
    plan = Board().plan()
    assert plan.placement == Placement(0, 1)
    assert plan.reclaim == ()
    assert plan.reason == "free placement"


def test_a_free_placement_is_preferred_to_reclaiming_an_idle_instance_at_a_lower_one() -> None:
    board = Board()
    board.idle(0)
    plan = board.plan()
    assert plan.placement == Placement(1, 1)
    assert plan.reclaim == ()


def test_a_placement_blocked_by_idle_is_chosen_only_when_no_free_one_exists() -> None:
    board = Board()
    idle = [board.idle(s) for s in range(7)]
    plan = board.plan()
    assert plan.placement == Placement(0, 1)
    assert reclaimed(plan) == [idle[0].mig_uuid]
    assert plan.reason == "reclaims the fewest idle instances (1)"


def test_the_placement_reclaiming_the_fewest_idle_instances_wins() -> None:
    board = Board()
    for start in (0, 1, 2, 3, 4):  # 0:2 and 2:2 each cover two Idle 1g instances, 4:2 one
        board.idle(start)
    plan = board.plan(TWO_G)
    assert plan.placement == Placement(4, 2)
    assert len(plan.reclaim) == 1
    assert plan.reason == "reclaims the fewest idle instances (1)"


def test_between_equally_good_placements_the_lowest_start_wins() -> None:
    board = Board()
    board.idle(0, P_2G)
    board.idle(2, P_2G)
    board.idle(4, P_2G)
    plan = board.plan(TWO_G)
    assert plan.placement == Placement(0, 2)


def test_instances_in_the_way_are_reclaimed_oldest_first() -> None:
    board = Board()
    newer = board.idle(0, updated_at="2024-05-02T00:00:00Z")
    older = board.idle(1, updated_at="2024-05-01T00:00:00Z")
    for start in (2, 4):
        board.active(start, P_2G)
    plan = board.plan(TWO_G)
    assert plan.placement == Placement(0, 2)
    assert reclaimed(plan) == [older.mig_uuid, newer.mig_uuid]


def test_the_plan_carries_each_reclaimed_instance_with_its_verified_live_check() -> None:
    board = Board()
    for start in range(7):
        board.idle(start)
    plan = board.plan()
    [(_record, check)] = plan.reclaim
    assert check.status is Liveness.COMPLETE


# --------------------------------------------------------------------------------------------
# What blocks a placement for good


def test_an_active_instance_is_never_reclaimed_to_make_room() -> None:
    board = Board()
    for start in range(7):
        board.active(start)
    with pytest.raises(ConflictError):
        board.plan()


def test_a_placement_covering_an_active_instance_is_never_chosen() -> None:
    board = Board()
    board.active(0)
    board.idle(2)
    board.idle(3)
    board.active(4)
    plan = board.plan(TWO_G)
    assert plan.placement == Placement(2, 2)


def test_an_unmanaged_instance_blocks_its_slices() -> None:
    board = Board()
    board.unmanaged(0, P_2G)
    board.idle(2, P_2G)
    plan = board.plan(TWO_G[:2])
    assert plan.placement == Placement(2, 2)


def test_an_orphan_gi_blocks_its_slices() -> None:
    board = Board()
    board.orphan_gi(0, P_2G)
    board.idle(2, P_2G)
    plan = board.plan(TWO_G[:2])
    assert plan.placement == Placement(2, 2)


def test_a_busy_idle_instance_blocks_its_slices_like_an_active_one() -> None:
    board = Board()
    busy = board.idle(0, P_2G)
    board.idle(2, P_2G)
    plan = board.plan(TWO_G[:2], is_busy=lambda r: r.mig_uuid == busy.mig_uuid)
    assert plan.placement == Placement(2, 2)


def test_a_busy_error_instance_blocks_its_slices() -> None:
    board = Board()
    busy = board.instance(0, State.ERROR, P_2G)
    with pytest.raises(ConflictError):
        board.plan(TWO_G[:1], is_busy=lambda r: r.mig_uuid == busy.mig_uuid)


def test_busyness_is_never_asked_of_an_active_instance() -> None:
    board = Board()
    board.active(0)
    asked: list[str] = []

    def is_busy(record: Record) -> bool:
        asked.append(record.mig_uuid)
        return False

    board.plan(is_busy=is_busy)
    assert asked == []


def test_busyness_is_asked_only_of_instances_in_the_way_of_the_request() -> None:
    board = Board()
    in_the_way = board.idle(0)
    board.idle(5)
    asked: list[str] = []

    def is_busy(record: Record) -> bool:
        asked.append(record.mig_uuid)
        return False

    board.plan(requested=Placement(0, 1), is_busy=is_busy)
    assert set(asked) == {in_the_way.mig_uuid}


def test_when_every_placement_is_blocked_for_good_the_request_is_refused() -> None:
    board = Board()
    board.active(0, P_2G)
    board.unmanaged(2, P_2G)
    board.orphan_gi(4, P_2G)
    with pytest.raises(ConflictError, match="no placement for this profile is free"):
        board.plan(TWO_G)


# --------------------------------------------------------------------------------------------
# What is reclaimed rather than refused


def test_an_error_instance_in_the_way_has_its_destruction_retried() -> None:
    board = Board()
    error = board.instance(0, State.ERROR, P_2G)
    plan = board.plan(TWO_G[:1])
    assert plan.placement == Placement(0, 2)
    assert reclaimed(plan) == [error.mig_uuid]


def test_a_reclaiming_instance_in_the_way_has_its_reclaim_finished() -> None:
    board = Board()
    reclaiming = board.instance(0, State.RECLAIMING, P_2G)
    plan = board.plan(TWO_G[:1])
    assert reclaimed(plan) == [reclaiming.mig_uuid]
    assert plan.reclaim[0][1].status is Liveness.GI_ONLY


@pytest.mark.parametrize("state", [State.RECLAIMING, State.ERROR])
def test_a_leftover_record_whose_hardware_is_gone_is_finished_before_the_create(
    state: State,
) -> None:
    board = Board()
    leftover = board.gone(0, state)
    plan = board.plan()
    assert plan.placement == Placement(0, 1)
    assert reclaimed(plan) == [leftover.mig_uuid]
    assert plan.reclaim[0][1].status is Liveness.ABSENT


def test_a_leftover_record_elsewhere_on_the_gpu_is_left_alone() -> None:
    board = Board()
    board.gone(5, State.RECLAIMING)
    plan = board.plan()
    assert plan.placement == Placement(0, 1)
    assert plan.reclaim == ()


# --------------------------------------------------------------------------------------------
# An exact placement request


def test_the_requested_placement_is_used_even_when_a_lower_one_is_free() -> None:
    plan = Board().plan(requested=Placement(3, 1))
    assert plan.placement == Placement(3, 1)
    assert plan.reason == "requested placement"
    assert plan.reclaim == ()


def test_idle_instances_in_the_way_of_the_requested_placement_are_reclaimed() -> None:
    board = Board()
    first, second = board.idle(2), board.idle(3)
    plan = board.plan(TWO_G, requested=Placement(2, 2))
    assert plan.placement == Placement(2, 2)
    assert set(reclaimed(plan)) == {first.mig_uuid, second.mig_uuid}


def test_a_requested_placement_blocked_by_an_active_instance_is_refused_naming_it() -> None:
    board = Board()
    active = board.active(2)
    with pytest.raises(ConflictError) as refused:
        board.plan(TWO_G, requested=Placement(2, 2))
    message = refused.value.message
    assert message.startswith("placement 2:2 is blocked: ")
    assert f"is Active ({active.mig_uuid})" in message
    assert "(hamimig never reclaims these)" in message


def test_a_requested_placement_blocked_by_an_unmanaged_instance_is_refused_naming_it() -> None:
    board = Board()
    gi = board.unmanaged(2)
    with pytest.raises(ConflictError, match=rf"GI {gi.id} \(1g.10gb at 2:1\) is Unmanaged"):
        board.plan(TWO_G, requested=Placement(2, 2))


def test_a_requested_placement_blocked_by_an_orphan_gi_is_refused_naming_it() -> None:
    board = Board()
    gi = board.orphan_gi(3)
    with pytest.raises(ConflictError, match=rf"GI {gi.id} \(1g.10gb at 3:1\) is OrphanGI"):
        board.plan(TWO_G, requested=Placement(2, 2))


def test_a_requested_placement_blocked_by_a_busy_idle_instance_is_refused_naming_it() -> None:
    board = Board()
    busy = board.idle(2)
    with pytest.raises(ConflictError) as refused:
        board.plan(TWO_G, requested=Placement(2, 2), is_busy=lambda _r: True)
    assert f"is Idle ({busy.mig_uuid}, busy: processes run on it)" in refused.value.message


def test_a_refusal_names_every_blocker_hamimig_never_reclaims_and_only_those() -> None:
    board = Board()
    active = board.active(0, P_2G)
    unmanaged = board.unmanaged(2, P_2G)
    idle = board.idle(4, P_2G)
    with pytest.raises(ConflictError) as refused:
        board.plan((Placement(0, 8),), requested=Placement(0, 8))
    message = refused.value.message
    assert active.mig_uuid in message
    assert f"GI {unmanaged.id} " in message
    assert idle.mig_uuid not in message


# --------------------------------------------------------------------------------------------
# What stops planning before any choice


def test_an_interrupted_allocation_on_this_gpu_stops_planning() -> None:
    with pytest.raises(UnverifiableError, match="run 'hamimig recover' first"):
        Board().plan(intents=(intent(),))


def test_an_interrupted_allocation_on_another_gpu_does_not_stop_planning() -> None:
    plan = Board().plan(intents=(intent(OTHER_GPU),))
    assert plan.placement == Placement(0, 1)


def test_an_intent_whose_instance_already_has_a_record_does_not_stop_planning() -> None:
    board = Board()
    done = board.active(3)
    plan = board.plan(intents=(intent(mig_uuid=done.mig_uuid),))
    assert plan.placement == Placement(0, 1)


@pytest.mark.parametrize("state", [State.IDLE, State.ACTIVE])
def test_an_idle_or_active_record_whose_instance_is_not_live_stops_planning(
    state: State,
) -> None:
    board = Board()
    board.gone(5, state)
    with pytest.raises(UnverifiableError, match="does not match the hardware"):
        board.plan()


@pytest.mark.parametrize("state", [State.IDLE, State.ACTIVE])
def test_an_idle_or_active_record_whose_ci_is_gone_stops_planning(state: State) -> None:
    board = Board()
    record = board.instance(5, State.RECLAIMING)
    board.records[-1] = dataclasses.replace(record, state=state)
    with pytest.raises(UnverifiableError, match="does not match the hardware"):
        board.plan()


@pytest.mark.parametrize("state", [State.ERROR, State.RECLAIMING])
def test_any_record_the_hardware_contradicts_stops_planning(state: State) -> None:
    board = Board()
    board.unmanaged(5)
    board.gone(5, state)  # recorded at 5:1 with a GI ID that is not the live one
    with pytest.raises(UnverifiableError, match="does not match the hardware"):
        board.plan()


# --------------------------------------------------------------------------------------------
# How blockers describe themselves


def _gi(profile_id: int = P_1G, cis: tuple[ComputeInstance, ...] = ()) -> GpuInstance:
    return GpuInstance(0, GPU, 7, profile_id, Placement(2, 1), cis)


def _record(state: State) -> Record:
    return Record(mig(7), GPU, "1g.10gb", Placement(2, 1), 7, 0, state=state)


VERIFIED = LiveCheck(Liveness.COMPLETE, "verified")


def test_a_blocker_without_a_record_and_with_a_ci_is_unmanaged() -> None:
    blocker = Blocker(_gi(cis=(ComputeInstance(0, mig(7)),)), None, None)
    assert blocker.view(NAMES).describe() == f"GI 7 (1g.10gb at 2:1) is Unmanaged ({mig(7)})"


def test_a_blocker_without_a_record_or_a_ci_is_an_orphan_gi() -> None:
    assert Blocker(_gi(), None, None).view(NAMES).describe() == "GI 7 (1g.10gb at 2:1) is OrphanGI"


def test_a_recorded_blocker_names_its_state_and_mig_uuid() -> None:
    blocker = Blocker(_gi(), _record(State.ACTIVE), VERIFIED)
    assert blocker.view(NAMES).describe() == f"GI 7 (1g.10gb at 2:1) is Active ({mig(7)})"


def test_a_busy_blocker_says_processes_run_on_it() -> None:
    blocker = Blocker(_gi(), _record(State.IDLE), VERIFIED, busy=True)
    assert blocker.view(NAMES).describe() == (
        f"GI 7 (1g.10gb at 2:1) is Idle ({mig(7)}, busy: processes run on it)"
    )


def test_a_blocker_of_a_profile_the_gpu_does_not_name_shows_the_profile_id() -> None:
    assert Blocker(_gi(profile_id=99), None, None).view(NAMES).describe() == (
        "GI 7 (profile 99 at 2:1) is OrphanGI"
    )
