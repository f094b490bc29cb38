"""The simulated node's MIG rules (profiles, placements, limits), observed through the real adapter
and through the CLI's `sim create`, `list` and `profiles`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hamimig.errors import NvmlError
from hamimig.hw.nvml import NvmlHardware
from hamimig.hw.types import ComputeInstance, Placement
from hamimig.rehearsal.simulator import sim_busy, sim_mig_mode
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore
from tests.support.cli import Cli
from tests.support.node import sim_state
from tests.support.nvml import CREATE_GI

MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def nvml_failure(err: pytest.ExceptionInfo[NvmlError]) -> tuple[str, str, int]:
    return err.value.call, err.value.name, err.value.value


def make(hw: NvmlHardware, gpu: int, profile_id: int, start: int, size: int) -> ComputeInstance:
    return hw.create_compute_instance(
        gpu, hw.create_gpu_instance(gpu, profile_id, Placement(start, size))
    )


# --- through the adapter ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile_id", "start", "size"),
    [(19, 7, 1), (20, 7, 1), (15, 1, 2), (14, 6, 2), (14, 1, 2), (9, 2, 4), (5, 4, 4), (0, 1, 8)],
)
def test_illegal_placement_start_is_invalid_argument(
    hw: NvmlHardware, sim_path: Path, profile_id: int, start: int, size: int
) -> None:
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, profile_id, Placement(start, size))
    assert nvml_failure(err) == (CREATE_GI, "INVALID_ARGUMENT", 2)
    assert sim_state(sim_path)["gpus"][0]["gpuInstances"] == []


def test_wrong_placement_size_is_invalid_argument(hw: NvmlHardware) -> None:
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 14, Placement(0, 1))
    assert nvml_failure(err) == (CREATE_GI, "INVALID_ARGUMENT", 2)


def test_unknown_profile_id_is_invalid_argument(hw: NvmlHardware) -> None:
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 99, Placement(0, 1))
    assert nvml_failure(err) == (CREATE_GI, "INVALID_ARGUMENT", 2)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((19, 0, 1), (19, 0, 1)),  # the same slot again
        ((19, 1, 1), (14, 0, 2)),  # 2g over a 1g
        ((14, 2, 2), (9, 0, 4)),  # 3g over a 2g
        ((9, 4, 4), (15, 6, 2)),  # 1g.20gb inside a 3g
        ((19, 6, 1), (0, 0, 8)),  # the full GPU over anything
        ((5, 0, 4), (20, 3, 1)),  # +me inside a 4g
    ],
)
def test_overlap_is_insufficient_resources(
    hw: NvmlHardware,
    sim_path: Path,
    first: tuple[int, int, int],
    second: tuple[int, int, int],
) -> None:
    pid, start, size = first
    gi_id = hw.create_gpu_instance(0, pid, Placement(start, size))
    pid, start, size = second
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, pid, Placement(start, size))
    assert nvml_failure(err) == (CREATE_GI, "INSUFFICIENT_RESOURCES", 23)
    assert [gi["id"] for gi in sim_state(sim_path)["gpus"][0]["gpuInstances"]] == [gi_id]


def test_adjacent_placements_do_not_overlap(hw: NvmlHardware) -> None:
    make(hw, 0, 14, 0, 2)
    make(hw, 0, 14, 2, 2)
    make(hw, 0, 9, 4, 4)
    assert [g.placement for g in hw.layout(0)] == [
        Placement(0, 2),
        Placement(2, 2),
        Placement(4, 4),
    ]


def test_more_than_max_instances_is_insufficient_resources(hw: NvmlHardware) -> None:
    make(hw, 0, 20, 0, 1)  # 1g.10gb+me: at most one per GPU
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 20, Placement(3, 1))
    assert nvml_failure(err) == (CREATE_GI, "INSUFFICIENT_RESOURCES", 23)
    # Plain 1g.10gb still fits beside it, and the other GPU has its own limit.
    make(hw, 0, 19, 3, 1)
    make(hw, 1, 20, 3, 1)


def test_gi_destroy_with_a_ci_is_in_use(hw: NvmlHardware, sim_path: Path) -> None:
    ci = make(hw, 0, 19, 2, 1)
    with pytest.raises(NvmlError) as err:
        hw.destroy_gpu_instance(0, 9)
    assert nvml_failure(err) == ("nvmlGpuInstanceDestroy", "IN_USE", 19)
    assert hw.mig_device(ci.mig_uuid) is not None
    hw.destroy_compute_instance(0, 9, ci.id)
    hw.destroy_gpu_instance(0, 9)
    assert hw.layout(0) == ()


def test_gi_held_by_a_client_fails_after_ci_destroy(hw: NvmlHardware, sim_path: Path) -> None:
    ci = make(hw, 0, 14, 4, 2)
    sim_busy(sim_path, ci.mig_uuid, True, False)
    hw.destroy_compute_instance(0, 5, ci.id)  # CI destroy succeeds ...
    with pytest.raises(NvmlError) as err:  # ... then the GI destroy fails
        hw.destroy_gpu_instance(0, 5)
    assert nvml_failure(err) == ("nvmlGpuInstanceDestroy", "IN_USE", 19)
    (gi,) = hw.layout(0)
    assert (gi.id, gi.compute_instances) == (5, ())
    assert hw.mig_device(ci.mig_uuid) is None


def test_ci_destroy_while_busy_is_in_use(hw: NvmlHardware, sim_path: Path) -> None:
    ci = make(hw, 1, 19, 0, 1)
    sim_busy(sim_path, ci.mig_uuid, False, False)
    with pytest.raises(NvmlError) as err:
        hw.destroy_compute_instance(1, 7, ci.id)
    assert nvml_failure(err) == ("nvmlComputeInstanceDestroy", "IN_USE", 19)
    assert hw.layout(1)[0].compute_instances == (ci,)
    sim_busy(sim_path, ci.mig_uuid, False, True)
    hw.destroy_compute_instance(1, 7, ci.id)
    assert hw.layout(1)[0].compute_instances == ()


def test_create_with_mig_disabled_is_not_supported(sim_path: Path) -> None:
    sim_mig_mode(sim_path, "1", False, False)
    hw = NvmlHardware(SimNvml(SimStore(sim_path)))
    hw.open()
    try:
        with pytest.raises(NvmlError) as err:
            hw.create_gpu_instance(1, 19, Placement(0, 1))
        assert nvml_failure(err) == (CREATE_GI, "NOT_SUPPORTED", 3)
        # GPU 0 keeps MIG and still creates.
        assert hw.create_gpu_instance(0, 19, Placement(0, 1)) == 7
    finally:
        hw.close()


def test_ids_are_reused_but_mig_uuid_is_not(hw: NvmlHardware) -> None:
    make(hw, 0, 19, 0, 1)
    first_gi = hw.create_gpu_instance(0, 14, Placement(2, 2))
    first = hw.create_compute_instance(0, first_gi)
    hw.destroy_compute_instance(0, first_gi, first.id)
    hw.destroy_gpu_instance(0, first_gi)
    second_gi = hw.create_gpu_instance(0, 14, Placement(2, 2))
    second = hw.create_compute_instance(0, second_gi)
    assert (second_gi, second.id) == (first_gi, first.id) == (4, 0)
    assert second.mig_uuid != first.mig_uuid
    assert MIG_UUID.match(second.mig_uuid)
    assert hw.mig_device(first.mig_uuid) is None
    recreated = hw.mig_device(second.mig_uuid)
    assert recreated is not None
    assert (recreated.gpu_instance_id, recreated.placement) == (4, Placement(2, 2))


def test_ci_id_reused_within_a_gi_after_destroy(hw: NvmlHardware) -> None:
    gi_id = hw.create_gpu_instance(0, 0, Placement(0, 8))
    first = hw.create_compute_instance(0, gi_id)
    hw.destroy_compute_instance(0, gi_id, first.id)
    again = hw.create_compute_instance(0, gi_id)
    assert again.id == first.id == 0
    assert again.mig_uuid != first.mig_uuid


def test_whole_gi_ci_takes_all_slices(hw: NvmlHardware) -> None:
    gi_id = hw.create_gpu_instance(0, 9, Placement(0, 4))
    hw.create_compute_instance(0, gi_id)
    with pytest.raises(NvmlError) as err:
        hw.create_compute_instance(0, gi_id)
    assert nvml_failure(err) == (
        "nvmlGpuInstanceCreateComputeInstance",
        "INSUFFICIENT_RESOURCES",
        23,
    )


def test_gi_without_ci_is_no_mig_device(hw: NvmlHardware, sim_path: Path) -> None:
    orphan = hw.create_gpu_instance(0, 19, Placement(0, 1))
    ci = make(hw, 0, 19, 1, 1)
    layout = hw.layout(0)
    assert [(g.id, g.compute_instances) for g in layout] == [(orphan, ()), (8, (ci,))]
    # The MIG-device walk the adapter relies on sees exactly one device: the GI with a CI.
    nv = SimNvml(SimStore(sim_path))
    nv.nvmlInit()
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(0)
        assert nv.nvmlDeviceGetMaxMigDeviceCount(handle) == 7
        mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
        assert nv.nvmlDeviceGetGpuInstanceId(mig) == 8
        assert nv.nvmlDeviceGetUUID(mig) == ci.mig_uuid
        with pytest.raises(nv.NVMLError) as err:
            nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, 1)
        assert err.value.value == 6  # NOT_FOUND
        # ... while the GI is found by enumerating GIs directly.
        assert nv.nvmlGpuInstanceGetInfo(nv.nvmlDeviceGetGpuInstanceById(handle, orphan)).id == 7
    finally:
        nv.nvmlShutdown()


def test_seven_1g_fill_a_gpu(hw: NvmlHardware, sim_path: Path) -> None:
    made = [make(hw, 0, 19, start, 1) for start in range(7)]
    assert len({ci.mig_uuid for ci in made}) == 7
    assert [g.id for g in hw.layout(0)] == [7, 8, 9, 10, 11, 12, 13]
    for start in range(7):
        with pytest.raises(NvmlError) as err:
            hw.create_gpu_instance(0, 19, Placement(start, 1))
        assert nvml_failure(err) == (CREATE_GI, "INSUFFICIENT_RESOURCES", 23)
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 15, Placement(6, 2))  # the last memory slice is not enough
    assert err.value.name == "INSUFFICIENT_RESOURCES"
    assert len(sim_state(sim_path)["gpus"][0]["gpuInstances"]) == 7
    assert hw.layout(1) == ()


def test_stale_gi_handle_after_destroy(hw: NvmlHardware, sim_path: Path) -> None:
    # A handle kept past a destroy does not reach another GI.
    nv = SimNvml(SimStore(sim_path))
    nv.nvmlInit()
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(0)
        gi_id = hw.create_gpu_instance(0, 19, Placement(0, 1))
        gi = nv.nvmlDeviceGetGpuInstanceById(handle, gi_id)
        hw.destroy_gpu_instance(0, gi_id)
        with pytest.raises(nv.NVMLError):
            nv.nvmlGpuInstanceGetInfo(gi)
    finally:
        nv.nvmlShutdown()


# --- through the CLI -------------------------------------------------------------------------


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_cli_seven_creates_then_eighth_and_overlap_fail(cli: Cli, sim_path: Path) -> None:
    for start in range(7):
        ran = cli("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", str(start))
        assert ran.exit_code == 0, ran.stderr
    eighth = cli("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "3")
    assert eighth.exit_code == 4
    line = one_line(eighth.stderr)
    assert "INSUFFICIENT_RESOURCES" in line and "1g.10gb" in line
    overlap = cli("sim", "create", "--gpu", "0", "--profile", "2g.20gb", "--placement", "2")
    assert overlap.exit_code == 4
    line = one_line(overlap.stderr)
    assert "INSUFFICIENT_RESOURCES" in line and "2g.20gb" in line
    assert len(sim_state(sim_path)["gpus"][0]["gpuInstances"]) == 7


def test_cli_list_shows_unmanaged_instances(cli: Cli) -> None:
    for start in (0, 5):
        assert (
            cli(
                "sim", "create", "--gpu", "1", "--profile", "1g.10gb", "--placement", str(start)
            ).exit_code
            == 0
        )
    assert (
        cli("sim", "create", "--gpu", "0", "--profile", "3g.40gb", "--placement", "4").exit_code
        == 0
    )
    ran = cli.json("list")
    assert ran.exit_code == 0, ran.stderr
    doc = ran.json()
    assert doc["kind"] == "InstanceList"
    rows = sorted(
        (
            i["gpuIndex"],
            i["profile"],
            i["placement"]["start"],
            i["placement"]["size"],
            i["gpuInstanceID"],
            i["computeInstanceID"],
            i["state"],
        )
        for i in doc["instances"]
    )
    assert rows == [
        (0, "3g.40gb", 4, 4, 2, 0, "Unmanaged"),
        (1, "1g.10gb", 0, 1, 7, 0, "Unmanaged"),
        (1, "1g.10gb", 5, 1, 12, 0, "Unmanaged"),
    ]
    uuids = [i["migUUID"] for i in doc["instances"]]
    assert all(MIG_UUID.match(u) for u in uuids)
    assert len(set(uuids)) == 3
    assert [g["migMode"] for g in doc["gpus"]] == ["enabled", "enabled"]


def test_cli_orphan_gi_is_listed_without_mig_uuid(cli: Cli) -> None:
    ran = cli("sim", "create", "--gpu", "0", "--profile", "2g.20gb", "--placement", "4", "--no-ci")
    assert ran.exit_code == 0, ran.stderr
    (inst,) = cli.json("list").json()["instances"]
    assert inst["state"] == "OrphanGI"
    assert inst["migUUID"] is None
    assert inst["computeInstanceID"] is None
    assert (inst["gpuInstanceID"], inst["profile"], inst["placement"]) == (
        5,
        "2g.20gb",
        {"start": 4, "size": 2},
    )


def test_cli_illegal_placement_is_a_usage_error(cli: Cli, sim_path: Path) -> None:
    ran = cli("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "7")
    assert ran.exit_code == 2
    assert "7" in one_line(ran.stderr)
    ran = cli("sim", "create", "--gpu", "0", "--profile", "2g.20gb", "--placement", "1")
    assert ran.exit_code == 2
    one_line(ran.stderr)
    assert sim_state(sim_path)["gpus"][0]["gpuInstances"] == []


def test_cli_unknown_profile_is_a_usage_error(cli: Cli, sim_path: Path) -> None:
    ran = cli("sim", "create", "--gpu", "0", "--profile", "1g.5gb", "--placement", "0")
    assert ran.exit_code == 2
    assert "1g.5gb" in one_line(ran.stderr)
    assert sim_state(sim_path)["gpus"][0]["gpuInstances"] == []


def test_cli_unknown_gpu_is_a_usage_error(cli: Cli) -> None:
    ran = cli("sim", "create", "--gpu", "2", "--profile", "1g.10gb", "--placement", "0")
    assert ran.exit_code == 2
    one_line(ran.stderr)


# As drivers report them, written out per board: name -> (ID, starts, size, max instances).
PROFILE_TABLE: dict[str, dict[str, tuple[int, tuple[int, ...], int, int]]] = {
    "A100-SXM4-40GB": {
        "1g.5gb": (19, (0, 1, 2, 3, 4, 5, 6), 1, 7),
        "1g.5gb+me": (20, (0, 1, 2, 3, 4, 5, 6), 1, 1),
        "1g.10gb": (15, (0, 2, 4, 6), 2, 4),
        "2g.10gb": (14, (0, 2, 4), 2, 3),
        "3g.20gb": (9, (0, 4), 4, 2),
        "4g.20gb": (5, (0,), 4, 1),
        "7g.40gb": (0, (0,), 8, 1),
    },
    "A100-SXM4-80GB": {
        "1g.10gb": (19, (0, 1, 2, 3, 4, 5, 6), 1, 7),
        "1g.10gb+me": (20, (0, 1, 2, 3, 4, 5, 6), 1, 1),
        "1g.20gb": (15, (0, 2, 4, 6), 2, 4),
        "2g.20gb": (14, (0, 2, 4), 2, 3),
        "3g.40gb": (9, (0, 4), 4, 2),
        "4g.40gb": (5, (0,), 4, 1),
        "7g.80gb": (0, (0,), 8, 1),
    },
    "H100-SXM5-80GB": {
        "1g.10gb": (19, (0, 1, 2, 3, 4, 5, 6), 1, 7),
        "1g.10gb+me": (20, (0, 1, 2, 3, 4, 5, 6), 1, 1),
        "1g.20gb": (15, (0, 2, 4, 6), 2, 4),
        "2g.20gb": (14, (0, 2, 4), 2, 3),
        "3g.40gb": (9, (0, 4), 4, 2),
        "4g.40gb": (5, (0,), 4, 1),
        "7g.80gb": (0, (0,), 8, 1),
    },
    "H200-SXM5-141GB": {
        "1g.18gb": (19, (0, 1, 2, 3, 4, 5, 6), 1, 7),
        "1g.18gb+me": (20, (0, 1, 2, 3, 4, 5, 6), 1, 1),
        "1g.35gb": (15, (0, 2, 4, 6), 2, 4),
        "2g.35gb": (14, (0, 2, 4), 2, 3),
        "3g.71gb": (9, (0, 4), 4, 2),
        "4g.71gb": (5, (0,), 4, 1),
        "7g.141gb": (0, (0,), 8, 1),
    },
    "B200-180GB": {
        "1g.23gb": (19, (0, 1, 2, 3, 4, 5, 6), 1, 7),
        "1g.23gb+me": (20, (0, 1, 2, 3, 4, 5, 6), 1, 1),
        "1g.45gb": (15, (0, 2, 4, 6), 2, 4),
        "2g.45gb": (14, (0, 2, 4), 2, 3),
        "3g.90gb": (9, (0, 4), 4, 2),
        "4g.90gb": (5, (0,), 4, 1),
        "7g.180gb": (0, (0,), 8, 1),
    },
}


def _profile_rows(
    profiles: list[dict[str, Any]],
) -> dict[str, tuple[int, tuple[int, ...], int, int]]:
    rows = {}
    for p in profiles:
        sizes = {pl["size"] for pl in p["placements"]}
        assert len(sizes) == 1, p
        rows[p["name"]] = (
            p["id"],
            tuple(pl["start"] for pl in p["placements"]),
            sizes.pop(),
            p["maxInstances"],
        )
    return rows


@pytest.mark.parametrize("model", sorted(PROFILE_TABLE))
def test_cli_profiles_for_every_model(tmp_path: Path, model: str) -> None:
    cli = Cli(tmp_path / "fresh" / "node.json", tmp_path / "state", tmp_path / "cdi")
    ran = cli("sim", "init", "--model", model, "--count", "2")
    assert ran.exit_code == 0, ran.stderr
    ran = cli.json("profiles")
    assert ran.exit_code == 0, ran.stderr
    doc = ran.json()
    assert doc["kind"] == "ProfileList"
    assert [g["index"] for g in doc["gpus"]] == [0, 1]
    for gpu in doc["gpus"]:
        assert _profile_rows(gpu["profiles"]) == PROFILE_TABLE[model]
    assert doc["gpus"][0]["uuid"] != doc["gpus"][1]["uuid"]


def test_cli_profiles_of_one_gpu(cli: Cli, sim_path: Path) -> None:
    uuid1 = sim_state(sim_path)["gpus"][1]["uuid"]
    doc = cli.json("profiles", "--gpu", uuid1).json()
    assert [g["index"] for g in doc["gpus"]] == [1]
    assert _profile_rows(doc["gpus"][0]["profiles"]) == PROFILE_TABLE["H100-SXM5-80GB"]
