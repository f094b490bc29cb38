"""A record checked against the hardware: `facts.check_record` (against a GPU's live layout) and
`facts.check_reuse` (against the MIG device its UUID names) as rules.

An instance's identity is GPU + profile + placement + GI ID + CI ID + MIG UUID; the GPU's NVML
index is only a hint. The rules:

Against the live layout (`check_record`)
- Complete: a GI with the recorded parent GPU, GI ID, placement and profile, holding a CI with
  the recorded CI ID and MIG UUID; the check carries that GI.
- GI only: the recorded GI (GPU, GI ID, placement, profile) without any CI, as a destroy that
  stopped between the CI and the GI leaves it.
- Absent: nothing overlaps the recorded placement; other instances elsewhere on the GPU do not
  count.
- The record's MIG UUID live elsewhere on the GPU makes it a mismatch, never absent nor "GI
  only": the record is wrong, and a GI at its placement that lost its CI is another's. The
  mismatch names each field that differs with both values.
- Mismatch when anything at the placement differs: the profile (1g.10gb+me is not 1g.10gb, and a
  profile the GPU does not name matches nothing), the placement, the GI ID, the CI ID, the MIG
  UUID or the parent GPU. A mismatch says what is there instead.
- A GI without a CI is identified by GPU, placement, profile and GI ID: one that differs in any
  of them is a mismatch, never "GI only".
- The GPU index hint is not part of the identity.

Against the MIG device (`check_reuse`)
- An Idle record may be handed out only when its MIG UUID names a live device with the recorded
  parent GPU, GI ID, CI ID, placement and profile; the reason it may not names both sides.
- A MIG UUID that names no live device is never handed out.
- The GPU index hint is not part of the identity.
"""

from __future__ import annotations

import dataclasses

import pytest

from hamimig.engine.facts import Liveness, check_record, check_reuse
from hamimig.hw.types import ComputeInstance, GpuInstance, MigDevice, Placement
from hamimig.store.records import Record
from hamimig.vocabulary import State

GPU = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
OTHER_GPU = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
MIG = "MIG-11111111-0000-0000-0000-000000000000"
OTHER_MIG = "MIG-22222222-0000-0000-0000-000000000000"
NAMES = {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb"}

RECORD = Record(
    mig_uuid=MIG,
    gpu_uuid=GPU,
    profile="1g.10gb",
    placement=Placement(2, 1),
    gpu_instance_id=9,
    compute_instance_id=0,
    state=State.IDLE,
    gpu_index=0,
)

LIVE_GI = GpuInstance(
    gpu_index=0,
    gpu_uuid=GPU,
    id=9,
    profile_id=19,
    placement=Placement(2, 1),
    compute_instances=(ComputeInstance(0, MIG),),
)

LIVE_DEVICE = MigDevice(
    mig_uuid=MIG,
    gpu_uuid=GPU,
    gpu_index=0,
    gpu_minor=0,
    gpu_instance_id=9,
    compute_instance_id=0,
    profile_id=19,
    placement=Placement(2, 1),
)


def status(*layout: GpuInstance, record: Record = RECORD) -> Liveness:
    return check_record(record, layout, NAMES).status


def live(**changes: object) -> GpuInstance:
    return dataclasses.replace(LIVE_GI, **changes)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Against the live layout


def test_the_recorded_gi_and_ci_make_a_complete_instance() -> None:
    check = check_record(RECORD, (LIVE_GI,), NAMES)
    assert check.status is Liveness.COMPLETE
    assert check.gi == LIVE_GI


def test_the_recorded_gi_without_a_ci_is_gi_only() -> None:
    check = check_record(RECORD, (live(compute_instances=()),), NAMES)
    assert check.status is Liveness.GI_ONLY
    assert check.gi is not None and check.gi.id == 9


def test_nothing_at_the_recorded_placement_is_absent() -> None:
    assert status() is Liveness.ABSENT


def test_instances_elsewhere_on_the_gpu_do_not_make_the_record_live() -> None:
    elsewhere = live(
        id=3, placement=Placement(3, 1), compute_instances=(ComputeInstance(0, OTHER_MIG),)
    )
    assert status(elsewhere) is Liveness.ABSENT


def test_its_mig_uuid_live_elsewhere_on_the_gpu_is_a_mismatch_not_absent() -> None:
    check = check_record(RECORD, (live(id=3, placement=Placement(3, 1)),), NAMES)
    assert check.status is Liveness.MISMATCH
    assert check.detail == (
        "its MIG UUID is live, placement recorded 2:1 but live 3:1; GI ID recorded 9 but live 3"
    )


def test_its_mig_uuid_live_elsewhere_makes_a_gi_without_a_ci_at_its_placement_anothers() -> None:
    mine = live(id=3, placement=Placement(3, 1))
    check = check_record(RECORD, (live(compute_instances=()), mine), NAMES)
    assert check.status is Liveness.MISMATCH
    assert "GI ID recorded 9 but live 3" in check.detail


def test_another_profile_at_the_placement_is_a_mismatch() -> None:
    assert status(live(profile_id=20)) is Liveness.MISMATCH  # 1g.10gb+me, not 1g.10gb


def test_a_profile_the_gpu_does_not_name_is_a_mismatch() -> None:
    assert status(live(profile_id=99)) is Liveness.MISMATCH


def test_the_same_gi_id_at_another_placement_over_the_slices_is_a_mismatch() -> None:
    wider = live(profile_id=15, placement=Placement(2, 2))
    recorded = dataclasses.replace(RECORD, profile="1g.20gb")
    assert status(wider, record=recorded) is Liveness.MISMATCH


def test_another_gi_id_at_the_placement_is_a_mismatch() -> None:
    assert status(live(id=10)) is Liveness.MISMATCH


def test_another_ci_id_in_the_recorded_gi_is_a_mismatch() -> None:
    assert status(live(compute_instances=(ComputeInstance(1, MIG),))) is Liveness.MISMATCH


def test_another_mig_uuid_in_the_recorded_gi_is_a_mismatch() -> None:
    assert status(live(compute_instances=(ComputeInstance(0, OTHER_MIG),))) is Liveness.MISMATCH


def test_the_gi_of_another_parent_gpu_is_a_mismatch() -> None:
    assert status(live(gpu_uuid=OTHER_GPU)) is Liveness.MISMATCH


def test_a_mismatch_in_the_recorded_gi_says_which_ci_it_holds() -> None:
    check = check_record(RECORD, (live(compute_instances=(ComputeInstance(0, OTHER_MIG),)),), NAMES)
    assert check.detail == f"GI 9 holds CI 0 {OTHER_MIG}"


def test_a_mismatch_says_which_instance_occupies_the_placement() -> None:
    check = check_record(RECORD, (live(id=10, profile_id=20),), NAMES)
    assert check.detail == "GI 10 (1g.10gb+me at 2:1) occupies the recorded placement"
    assert check.gi is not None and check.gi.id == 10


@pytest.mark.parametrize(
    "changes",
    [{"id": 10}, {"profile_id": 20}, {"gpu_uuid": OTHER_GPU}],
    ids=["gi-id", "profile", "parent-gpu"],
)
def test_a_gi_without_a_ci_that_differs_in_identity_is_a_mismatch_not_gi_only(
    changes: dict[str, object],
) -> None:
    assert status(live(compute_instances=(), **changes)) is Liveness.MISMATCH


def test_the_gpu_index_hint_is_not_part_of_the_identity_against_the_layout() -> None:
    moved = dataclasses.replace(RECORD, gpu_index=3)
    assert status(LIVE_GI, record=moved) is Liveness.COMPLETE


# --------------------------------------------------------------------------------------------
# Against the MIG device


def reuse_problem(
    record: Record = RECORD, profile: str | None = "1g.10gb", **changes: object
) -> str | None:
    device = dataclasses.replace(LIVE_DEVICE, **changes)  # type: ignore[arg-type]
    return check_reuse(record, device, profile)


def test_a_verified_idle_instance_may_be_handed_out() -> None:
    assert reuse_problem() is None


def test_a_mig_uuid_that_names_no_live_device_is_never_handed_out() -> None:
    assert check_reuse(RECORD, None, None) == f"{MIG} is not a live MIG device"


@pytest.mark.parametrize(
    ("changes", "profile"),
    [
        ({"gpu_uuid": OTHER_GPU}, "1g.10gb"),
        ({"gpu_instance_id": 10}, "1g.10gb"),
        ({"compute_instance_id": 1}, "1g.10gb"),
        ({"placement": Placement(3, 1)}, "1g.10gb"),
        ({"profile_id": 20}, "1g.10gb+me"),
        ({}, None),
    ],
    ids=["parent-gpu", "gi-id", "ci-id", "placement", "profile", "unnamed-profile"],
)
def test_a_device_that_differs_in_any_identity_field_is_never_handed_out(
    changes: dict[str, object], profile: str | None
) -> None:
    assert reuse_problem(profile=profile, **changes) is not None


def test_the_reason_a_device_is_refused_names_the_recorded_and_the_live_identity() -> None:
    problem = reuse_problem(gpu_instance_id=10)
    assert problem == (
        f"{MIG}: recorded GPU/GI/CI/placement/profile {GPU}/9/0/2:1/1g.10gb "
        f"but live {GPU}/10/0/2:1/1g.10gb"
    )


def test_the_gpu_index_hint_is_not_part_of_the_identity_of_a_device() -> None:
    assert reuse_problem(gpu_index=5) is None
