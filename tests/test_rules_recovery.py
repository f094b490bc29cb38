"""Two of recovery's judgements as rules: which live GI an interrupted allocation can have created
(`recovery.created_by`), and which pod an Active record's owner is (`recovery.owner_pod`).

What an interrupted allocation created
- Only a GI at exactly the intent's placement, of the intent's profile, can be its own; a GI of
  another profile there, or one that merely overlaps, never is.
- When the intent journaled a GI ID, only the GI with that ID is its own, with or without its CI
  (the CI is created after the GI ID is journaled).
- When it journaled none, only a GI without compute instances can be its own: a GI holding a CI
  belongs to someone else.

The pod that owns a record
- An Active record's owner pod is the pod with its namespace and name (and UID, when both
  have one).
- A record that is not Active, or has no owner, has no owner pod.
- A recreated pod (same name, another UID) is not the owner.
"""

from __future__ import annotations

import dataclasses

import pytest

from hamimig.engine.recovery import created_by, owner_pod
from hamimig.hw.types import ComputeInstance, GpuInstance, Placement
from hamimig.pods.model import Pod
from hamimig.store.intents import Intent
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import State

GPU = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
MIG = "MIG-11111111-0000-0000-0000-000000000000"
UID = "0a1b2c3d-0000-4000-8000-00000000abcd"
P_2G = 14

INTENT = Intent(
    id="i1",
    op="allocate",
    gpu_uuid=GPU,
    gpu_index=0,
    profile="2g.20gb",
    profile_id=P_2G,
    placement=Placement(2, 2),
    owner=Owner("ns", "p"),
    created_at="2024-05-01T00:00:00Z",
)


def gi(
    gi_id: int = 5,
    profile_id: int = P_2G,
    placement: Placement = INTENT.placement,
    ci: bool = False,
) -> GpuInstance:
    cis = (ComputeInstance(0, MIG),) if ci else ()
    return GpuInstance(0, GPU, gi_id, profile_id, placement, cis)


def journaled(gi_id: int) -> Intent:
    return dataclasses.replace(INTENT, gpu_instance_id=gi_id)


# --------------------------------------------------------------------------------------------
# What an interrupted allocation created


def test_a_gi_without_a_ci_at_the_intents_placement_and_profile_is_its_own() -> None:
    assert created_by(INTENT, gi())


def test_a_gi_of_another_profile_at_the_intents_placement_is_never_its_own() -> None:
    assert not created_by(INTENT, gi(profile_id=15))  # 1g.20gb, also at 2:2


@pytest.mark.parametrize("placement", [Placement(2, 1), Placement(3, 1), Placement(0, 4)], ids=str)
def test_a_gi_that_only_overlaps_the_intents_placement_is_never_its_own(
    placement: Placement,
) -> None:
    assert not created_by(INTENT, gi(placement=placement))


def test_with_a_journaled_gi_id_the_gi_with_that_id_is_its_own() -> None:
    assert created_by(journaled(5), gi(5))


def test_with_a_journaled_gi_id_its_gi_is_its_own_even_with_a_ci() -> None:
    assert created_by(journaled(5), gi(5, ci=True))


def test_with_a_journaled_gi_id_a_gi_with_another_id_is_never_its_own() -> None:
    assert not created_by(journaled(5), gi(6))


def test_with_a_journaled_gi_id_zero_only_gi_zero_is_its_own() -> None:
    assert created_by(journaled(0), gi(0))
    assert not created_by(journaled(0), gi(6))


def test_without_a_journaled_gi_id_a_gi_holding_a_ci_is_never_its_own() -> None:
    assert not created_by(INTENT, gi(ci=True))


# --------------------------------------------------------------------------------------------
# The pod that owns a record


def record(state: State = State.ACTIVE, owner: Owner | None = None) -> Record:
    return Record(
        mig_uuid=MIG,
        gpu_uuid=GPU,
        profile="1g.10gb",
        placement=Placement(0, 1),
        gpu_instance_id=7,
        compute_instance_id=0,
        state=state,
        owner=owner if owner is not None else Owner("ns", "p", UID),
    )


def pod(name: str = "p", namespace: str = "ns", uid: str | None = UID) -> Pod:
    return Pod(namespace, name, uid, "n1", "Running", None, (), None)


def test_an_active_records_owner_pod_is_the_pod_it_names() -> None:
    owner = pod()
    assert owner_pod(record(), [pod("q"), pod(namespace="other"), owner]) == owner


@pytest.mark.parametrize("state", [State.IDLE, State.RECLAIMING, State.ERROR])
def test_a_record_that_is_not_active_has_no_owner_pod(state: State) -> None:
    assert owner_pod(record(state), [pod()]) is None


def test_a_record_without_an_owner_has_no_owner_pod() -> None:
    ownerless = dataclasses.replace(record(), owner=None)
    assert owner_pod(ownerless, [pod()]) is None


def test_a_recreated_pod_with_another_uid_is_not_the_owner() -> None:
    assert owner_pod(record(), [pod(uid="ffffffff-0000-4000-8000-000000000000")]) is None


def test_an_owner_without_a_uid_is_matched_by_namespace_and_name() -> None:
    assert owner_pod(record(owner=Owner("ns", "p")), [pod()]) == pod()
