"""Which Idle instance a request may reuse, which slot an instance is held by, and which pods hold
anything: `plans.reuse_candidates`, `held_by`, `same_slot`, `owned_by` and `holding_pods` as rules.

Reuse candidates
- Only Idle records are candidates: Active, Reclaiming and Error ones never are.
- The profile must be the requested one: 1g.10gb and 1g.10gb+me are different profiles.
- A requested placement start must match, and so must a requested size; an unrequested one
  matches any.
- A GPU named by UUID admits only records of that GPU.
- A GPU named by index is a hint: records last seen at that index come first, records without a
  hint next, records hinted at another index last (kept: the live check decides).
- Among equally likely records the lowest placement start comes first, then the oldest update.
- A record HAMi wrote (no hamimig fields) is Idle and a candidate.

The slot an instance is held by
- A pod slot is held by the Active record whose owner names the same namespace, pod name,
  container index and device index.
- A record in any other state holds no slot.
- Pod UIDs must agree when both sides have one; either side without one matches; case is
  ignored.

The pod an owner names
- Namespace and name must match, and the UID when both have one; container and device indexes
  do not matter.

Pods that hold allocations
- A pod holds its allocations unless it has a deletionTimestamp or its phase is Succeeded or
  Failed; Pending, Running and an unknown phase hold.
- A pod list known to be incomplete cannot say who holds what: UnverifiableError.
- A holding pod whose allocation annotation is malformed stops the command (UnverifiableError,
  naming the pod); a pod that holds nothing is not judged by its annotation.
"""

from __future__ import annotations

import dataclasses

import pytest

from hamimig.engine.ownership import held_by, holding_pods, owned_by, same_slot, same_uid
from hamimig.engine.placement import reuse_candidates
from hamimig.errors import UnverifiableError
from hamimig.hw.types import Placement
from hamimig.pods.model import Pod, PodSnapshot
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import State

GPU0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
GPU1 = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
UID = "0a1b2c3d-0000-4000-8000-00000000abcd"


def mig(n: int) -> str:
    return f"MIG-{n:08x}-0000-0000-0000-000000000000"


def record(
    n: int,
    profile: str = "1g.10gb",
    start: int = 0,
    size: int = 1,
    state: State = State.IDLE,
    gpu_uuid: str = GPU0,
    gpu_index: int | None = 0,
    updated_at: str | None = None,
    owner: Owner | None = None,
) -> Record:
    return Record(
        mig_uuid=mig(n),
        gpu_uuid=gpu_uuid,
        profile=profile,
        placement=Placement(start, size),
        gpu_instance_id=n,
        compute_instance_id=0,
        state=state,
        owner=owner,
        updated_at=updated_at,
        gpu_index=gpu_index,
    )


def by_uuid(*records: Record) -> dict[str, Record]:
    return {r.mig_uuid: r for r in records}


def candidates(
    *records: Record,
    gpu: int | str = 0,
    profile: str = "1g.10gb",
    start: int | None = None,
    size: int | None = None,
) -> list[str]:
    return [r.mig_uuid for r in reuse_candidates(by_uuid(*records), gpu, profile, start, size)]


def pod(
    name: str = "p",
    namespace: str = "ns",
    uid: str | None = UID,
    phase: str | None = "Running",
    deletion_timestamp: str | None = None,
    annotation_error: str | None = None,
) -> Pod:
    return Pod(
        namespace=namespace,
        name=name,
        uid=uid,
        node_name="n1",
        phase=phase,
        deletion_timestamp=deletion_timestamp,
        allocations=(),
        annotation_error=annotation_error,
    )


# --------------------------------------------------------------------------------------------
# Reuse candidates


def test_an_idle_record_of_the_requested_profile_is_a_candidate() -> None:
    assert candidates(record(1)) == [mig(1)]


@pytest.mark.parametrize("state", [State.ACTIVE, State.RECLAIMING, State.ERROR])
def test_only_idle_records_are_candidates(state: State) -> None:
    assert candidates(record(1, state=state)) == []


def test_an_error_instance_is_never_a_reuse_candidate() -> None:
    assert candidates(record(1, state=State.ERROR), record(2)) == [mig(2)]


def test_a_media_extension_profile_is_not_reused_for_the_plain_profile() -> None:
    assert candidates(record(1, profile="1g.10gb+me"), profile="1g.10gb") == []


def test_the_plain_profile_is_not_reused_for_a_media_extension_request() -> None:
    assert candidates(record(1, profile="1g.10gb"), profile="1g.10gb+me") == []


def test_a_requested_start_must_match() -> None:
    assert candidates(record(1, start=0), record(2, start=3), start=3) == [mig(2)]


def test_a_requested_size_must_match() -> None:
    one = record(1, profile="1g.20gb", start=2, size=2)
    assert candidates(one, profile="1g.20gb", start=2, size=2) == [mig(1)]
    assert candidates(one, profile="1g.20gb", start=2, size=1) == []


def test_an_unrequested_placement_matches_any_start() -> None:
    assert set(candidates(record(1, start=0), record(2, start=5))) == {mig(1), mig(2)}


def test_a_gpu_named_by_uuid_admits_only_its_own_records() -> None:
    mine = record(1, gpu_uuid=GPU1, gpu_index=1)
    theirs = record(2, gpu_uuid=GPU0, gpu_index=1)  # the index hint does not matter here
    assert candidates(mine, theirs, gpu=GPU1) == [mig(1)]


def test_a_gpu_named_by_index_ranks_its_hinted_records_first_then_unhinted_then_others() -> None:
    elsewhere = record(1, gpu_index=1, start=0)
    unhinted = record(2, gpu_index=None, start=1)
    here = record(3, gpu_index=0, start=2)
    assert candidates(elsewhere, unhinted, here, gpu=0) == [mig(3), mig(2), mig(1)]


def test_records_hinted_at_another_index_are_kept_for_the_live_check_to_decide() -> None:
    assert candidates(record(1, gpu_index=1), gpu=0) == [mig(1)]


def test_the_lowest_placement_start_comes_first() -> None:
    assert candidates(record(1, start=4), record(2, start=1)) == [mig(2), mig(1)]


def test_at_one_start_the_oldest_update_comes_first() -> None:
    newer = record(1, updated_at="2024-05-02T00:00:00Z")
    older = record(2, updated_at="2024-05-01T00:00:00Z")
    assert candidates(newer, older) == [mig(2), mig(1)]


def test_a_record_hami_wrote_is_idle_and_a_candidate() -> None:
    hamis = dataclasses.replace(record(1, gpu_index=None), managed=False)
    assert candidates(hamis) == [mig(1)]


# --------------------------------------------------------------------------------------------
# The slot an instance is held by


def slot(
    name: str = "p",
    namespace: str = "ns",
    uid: str | None = UID,
    container: int = 0,
    device: int = 0,
) -> Owner:
    return Owner(namespace, name, uid, container, device)


def test_a_slot_is_held_by_the_active_record_naming_it() -> None:
    held = record(1, state=State.ACTIVE, owner=slot())
    assert held_by(by_uuid(record(2), held), slot()) == held


@pytest.mark.parametrize("state", [State.IDLE, State.RECLAIMING, State.ERROR])
def test_a_record_that_is_not_active_holds_no_slot(state: State) -> None:
    assert held_by(by_uuid(record(1, state=state, owner=slot())), slot()) is None


@pytest.mark.parametrize(
    "other",
    [
        slot(namespace="other"),
        slot(name="q"),
        slot(container=1),
        slot(device=1),
    ],
    ids=["namespace", "name", "container-index", "device-index"],
)
def test_another_namespace_pod_container_or_device_is_another_slot(other: Owner) -> None:
    assert not same_slot(slot(), other)
    assert held_by(by_uuid(record(1, state=State.ACTIVE, owner=slot())), other) is None


def test_a_slot_with_another_pod_uid_is_another_slot() -> None:
    recreated = slot(uid="ffffffff-0000-4000-8000-000000000000")
    assert not same_slot(slot(), recreated)
    assert held_by(by_uuid(record(1, state=State.ACTIVE, owner=slot())), recreated) is None


def test_a_slot_without_a_uid_on_either_side_matches_any_uid() -> None:
    assert same_slot(slot(uid=None), slot())
    assert same_slot(slot(), slot(uid=None))


def test_pod_uids_are_compared_ignoring_case() -> None:
    assert same_slot(slot(uid=UID.upper()), slot(uid=UID))
    assert same_uid(UID.upper(), UID)


def test_different_pod_uids_never_match() -> None:
    assert not same_uid(UID, UID.replace("abcd", "abce"))


# --------------------------------------------------------------------------------------------
# The pod an owner names


def test_an_owner_names_the_pod_with_its_namespace_and_name() -> None:
    assert owned_by(slot(), pod())


def test_an_owner_does_not_name_a_pod_of_another_namespace_or_name() -> None:
    assert not owned_by(slot(), pod(namespace="other"))
    assert not owned_by(slot(), pod(name="q"))


def test_an_owner_does_not_name_a_recreated_pod_with_another_uid() -> None:
    assert not owned_by(slot(), pod(uid="ffffffff-0000-4000-8000-000000000000"))


def test_an_owner_or_a_pod_without_a_uid_is_matched_by_name() -> None:
    assert owned_by(slot(uid=None), pod())
    assert owned_by(slot(), pod(uid=None))


def test_an_owners_container_and_device_indexes_do_not_matter_for_its_pod() -> None:
    assert owned_by(slot(container=3, device=2), pod())


# --------------------------------------------------------------------------------------------
# Pods that hold allocations


def holding(*pods: Pod, complete: bool = True) -> list[str]:
    return [p.name for p in holding_pods(PodSnapshot(pods, "test", complete=complete))]


@pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown", None])
def test_a_pod_that_is_not_finished_holds_its_allocations(phase: str | None) -> None:
    assert holding(pod(phase=phase)) == ["p"]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_holds_nothing(phase: str) -> None:
    assert holding(pod(phase=phase)) == []


def test_a_terminating_pod_holds_nothing() -> None:
    assert holding(pod(deletion_timestamp="2024-05-01T00:00:00Z")) == []


def test_only_the_holding_pods_of_a_list_are_returned() -> None:
    pods = (pod("a"), pod("b", phase="Succeeded"), pod("c", deletion_timestamp="x"), pod("d"))
    assert holding(*pods) == ["a", "d"]


def test_an_incomplete_pod_list_cannot_say_who_holds_what() -> None:
    with pytest.raises(UnverifiableError, match="incomplete"):
        holding(pod(), complete=False)


def test_a_holding_pod_with_a_malformed_annotation_stops_the_command_naming_it() -> None:
    bad = pod("bad", annotation_error="entry 0: gpuUUID missing")
    with pytest.raises(UnverifiableError, match="pod ns/bad has a malformed"):
        holding(pod(), bad)


def test_a_finished_pod_is_not_judged_by_its_annotation() -> None:
    done = pod("done", phase="Succeeded", annotation_error="entry 0: gpuUUID missing")
    assert holding(pod(), done) == ["p"]
