"""`hw/nvml.py`'s NvmlHardware, unchanged, over the simulated pynvml module (`hw/sim.py`).

Expected geometry is written out here by hand, as NVIDIA's drivers report it, never derived from
`hamimig/hw/models.py`, so a wrong table in the simulator fails these tests.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import types
import uuid
from pathlib import Path
from typing import Any

import pytest

from hamimig.errors import HardwareError, NvmlError, NvmlUnavailableError, UsageError
from hamimig.hw.nvml import NvmlHardware, bindings
from hamimig.hw.types import (
    CapabilityMinors,
    ComputeInstance,
    GpuInstance,
    MigDevice,
    MigMode,
    Placement,
)
from hamimig.rehearsal.simulator import sim_busy, sim_create, sim_init, sim_mig_mode
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore
from hamimig.vocabulary import Setting
from tests.support.node import node_dir, open_hw, sim_state
from tests.support.nvml import call_diff, calls

REPO_ROOT = Path(__file__).resolve().parent.parent
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

# As drivers report it: profile ID -> (slice count, placement starts, placement size, max count).
GEOMETRY: dict[int, tuple[int, tuple[int, ...], int, int]] = {
    19: (1, (0, 1, 2, 3, 4, 5, 6), 1, 7),
    20: (1, (0, 1, 2, 3, 4, 5, 6), 1, 1),
    15: (1, (0, 2, 4, 6), 2, 4),
    14: (2, (0, 2, 4), 2, 3),
    9: (3, (0, 4), 4, 2),
    5: (4, (0,), 4, 1),
    0: (7, (0,), 8, 1),
}
# As drivers report them: board -> profile names for IDs 19, 20, 15, 14, 9, 5, 0.
NAMES: dict[str, tuple[str, ...]] = {
    "A100-SXM4-40GB": (
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ),
    "A100-SXM4-80GB": (
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ),
    "H100-SXM5-80GB": (
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ),
    "H200-SXM5-141GB": (
        "1g.18gb",
        "1g.18gb+me",
        "1g.35gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb",
    ),
    "B200-180GB": (
        "1g.23gb",
        "1g.23gb+me",
        "1g.45gb",
        "2g.45gb",
        "3g.90gb",
        "4g.90gb",
        "7g.180gb",
    ),
}
ID_ORDER = (19, 20, 15, 14, 9, 5, 0)
# What the driver reports as the device name for each board.
NVML_NAMES = {
    "A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "H100-SXM5-80GB": "NVIDIA H100 80GB HBM3",
    "H200-SXM5-141GB": "NVIDIA H200",
    "B200-180GB": "NVIDIA B200",
}


# --- GPUs ------------------------------------------------------------------------------------


def test_driver_version_and_gpu_count(hw: NvmlHardware) -> None:
    assert hw.driver_version() == "550.127.05"
    assert hw.gpu_count() == 2


def test_gpu_facts_match_the_node(hw: NvmlHardware, sim_path: Path) -> None:
    node = sim_state(sim_path)
    for index in (0, 1):
        gpu = hw.gpu(index)
        assert gpu.index == index
        assert gpu.uuid == node["gpus"][index]["uuid"]
        assert GPU_UUID.match(gpu.uuid)
        assert gpu.model == "NVIDIA H100 80GB HBM3"
        assert gpu.minor == index
        assert gpu.mig_mode is MigMode.ENABLED
        assert gpu.mig_pending is MigMode.ENABLED
        assert gpu.reset_pending is False
    assert hw.gpu(0).uuid != hw.gpu(1).uuid


def test_gpu_with_mig_disabled(sim_path: Path) -> None:
    sim_mig_mode(sim_path, "1", False, False)
    hw = open_hw(sim_path)
    try:
        gpu = hw.gpu(1)
        assert (gpu.mig_mode, gpu.mig_pending) == (MigMode.DISABLED, MigMode.DISABLED)
        assert gpu.reset_pending is False
        assert hw.layout(1) == ()
        assert hw.gpu(0).mig_mode is MigMode.ENABLED
    finally:
        hw.close()


def test_gpu_with_pending_mig_change(sim_path: Path) -> None:
    sim_mig_mode(sim_path, "0", False, True)
    hw = open_hw(sim_path)
    try:
        gpu = hw.gpu(0)
        assert gpu.mig_mode is MigMode.ENABLED
        assert gpu.mig_pending is MigMode.DISABLED
        assert gpu.reset_pending is True
    finally:
        hw.close()
    sim_mig_mode(sim_path, "1", False, False)
    sim_mig_mode(sim_path, "1", True, True)
    hw = open_hw(sim_path)
    try:
        gpu = hw.gpu(1)
        assert (gpu.mig_mode, gpu.mig_pending) == (MigMode.DISABLED, MigMode.ENABLED)
        assert gpu.reset_pending is True
    finally:
        hw.close()


def test_gpu_by_uuid(hw: NvmlHardware, sim_path: Path) -> None:
    uuid1 = sim_state(sim_path)["gpus"][1]["uuid"]
    gpu = hw.gpu_by_uuid(uuid1)
    assert (gpu.index, gpu.uuid, gpu.minor) == (1, uuid1, 1)
    assert hw.gpu_by_uuid(uuid1) == gpu  # cached path gives the same answer


def test_gpu_by_unknown_uuid_is_a_usage_error(hw: NvmlHardware) -> None:
    with pytest.raises(UsageError, match="GPU-00000000"):
        hw.gpu_by_uuid("GPU-00000000-0000-0000-0000-000000000000")


def test_gpu_by_uuid_rejects_a_mig_uuid(hw: NvmlHardware, sim_path: Path) -> None:
    mig = sim_create(sim_path, "0", "1g.10gb", "0", False).created
    assert mig is not None and mig.mig_uuid is not None
    with pytest.raises(UsageError):
        hw.gpu_by_uuid(mig.mig_uuid)


@pytest.mark.parametrize("index", [2, 7, 31])
def test_unknown_gpu_index_is_a_usage_error(hw: NvmlHardware, index: int) -> None:
    with pytest.raises(UsageError, match=str(index)):
        hw.gpu(index)
    with pytest.raises(UsageError):
        hw.layout(index)
    with pytest.raises(UsageError):
        hw.create_gpu_instance(index, 19, Placement(0, 1))


# --- profiles --------------------------------------------------------------------------------


@pytest.mark.parametrize("model", sorted(NAMES))
def test_profiles_of_every_model(tmp_path: Path, model: str) -> None:
    path = tmp_path / model / "node.json"
    sim_init(path, model, 2)
    hw = open_hw(path)
    try:
        assert hw.gpu(0).model == NVML_NAMES[model]
        for gpu in (0, 1):
            profiles = hw.profiles(gpu)
            assert sorted(p.id for p in profiles) == sorted(ID_ORDER)
            by_id = {p.id: p for p in profiles}
            for pid, name in zip(ID_ORDER, NAMES[model], strict=True):
                slices, starts, size, max_count = GEOMETRY[pid]
                profile = by_id[pid]
                assert profile.name == name
                assert profile.slice_count == slices
                assert profile.placements == tuple(Placement(s, size) for s in starts)
                assert profile.max_instances == max_count
                assert profile.memory_mb > 0
    finally:
        hw.close()


def test_profile_indexes_are_nvml_constants(hw: NvmlHardware) -> None:
    # NVML's profile constants: 1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4,
    # 1_SLICE_REV1 7, 1_SLICE_REV2 9.
    index_by_id = {p.id: p.index for p in hw.profiles(0)}
    assert index_by_id == {19: 0, 14: 1, 9: 2, 5: 3, 0: 4, 20: 7, 15: 9}


@pytest.mark.parametrize(
    ("model", "memory"),
    [
        # The exact MiB figures these boards' drivers report.
        ("A100-SXM4-40GB", {19: 4864, 15: 9856, 14: 9856, 9: 19968, 5: 19968, 0: 40192}),
        ("H100-SXM5-80GB", {19: 9984, 9: 40448, 5: 40448}),
        # H200 and B200: NVIDIA's NVML mock's nominal figures, until a real board shows them.
        ("H200-SXM5-141GB", {19: 18432, 20: 18432, 15: 35840, 14: 35840, 9: 72704, 0: 144384}),
        ("B200-180GB", {19: 23552, 20: 23552, 15: 46080, 14: 46080, 9: 92160, 0: 184320}),
    ],
)
def test_profile_memory_figures(tmp_path: Path, model: str, memory: dict[int, int]) -> None:
    path = tmp_path / "node.json"
    sim_init(path, model, 1)
    hw = open_hw(path)
    try:
        got = {p.id: p.memory_mb for p in hw.profiles(0)}
        assert {pid: got[pid] for pid in memory} == memory
    finally:
        hw.close()


@pytest.mark.parametrize("model", sorted(NAMES))
def test_profile_memory_matches_the_profile_name(tmp_path: Path, model: str) -> None:
    """`1g.18gb` holds about 18 GiB: the driver reports up to 15 % under the name's figure
    (A100's 1g.5gb is 5 % under) and never more than 5 % over."""
    path = tmp_path / "node.json"
    sim_init(path, model, 1)
    hw = open_hw(path)
    try:
        profiles = hw.profiles(0)
    finally:
        hw.close()
    assert len(profiles) == 7
    for p in profiles:
        named_gb = int(p.name.split(".")[1].removesuffix("+me").removesuffix("gb"))
        ratio = p.memory_mb / (named_gb * 1024)
        assert 0.85 <= ratio <= 1.05, (model, p.name, p.memory_mb)


def test_find_profile(hw: NvmlHardware, sim_path: Path) -> None:
    found = hw.find_profile(0, "2g.20gb")
    assert found is not None
    assert (found.id, found.index, found.slice_count, found.max_instances) == (14, 1, 2, 3)
    assert found.placements == (Placement(0, 2), Placement(2, 2), Placement(4, 2))
    plus_me = hw.find_profile(1, "1g.10gb+me")
    assert plus_me is not None and plus_me.id == 20
    assert hw.find_profile(0, "1g.5gb") is None
    assert hw.find_profile(0, "MIG 1g.10gb") is None
    # Same answer from the cached full table.
    assert next(p for p in hw.profiles(0) if p.name == "2g.20gb") == found
    assert hw.find_profile(0, "2g.20gb") == found
    assert hw.find_profile(0, "nope") is None


def test_find_profile_reads_only_until_found(hw: NvmlHardware, sim_path: Path) -> None:
    before = calls(sim_path)
    assert hw.find_profile(0, "1g.10gb") is not None
    used = call_diff(before, calls(sim_path), ignored=())
    # index 0 is 1g.10gb: one profile info and its placements, plus the device handle.
    assert used == {
        "nvmlDeviceGetHandleByIndex": 1,
        "nvmlDeviceGetGpuInstanceProfileInfo": 1,
        "nvmlDeviceGetGpuInstancePossiblePlacements": 1,
    }


def test_profile_name(hw: NvmlHardware, sim_path: Path) -> None:
    before = calls(sim_path)
    assert hw.profile_name(0, 14) == "2g.20gb"
    # One by-ID lookup (plus the device handle), not a walk over the profile indexes.
    used = call_diff(before, calls(sim_path), ignored=())
    assert "nvmlDeviceGetGpuInstanceProfileInfo" not in used
    assert sum(used.values()) <= 2, used
    assert hw.profile_name(1, 20) == "1g.10gb+me"
    assert hw.profile_name(0, 0) == "7g.80gb"
    assert hw.profile_name(0, 99) is None
    hw.profiles(0)
    assert hw.profile_name(0, 15) == "1g.20gb"


# --- layout and MIG devices ------------------------------------------------------------------


def test_layout_of_an_empty_gpu(hw: NvmlHardware) -> None:
    assert hw.layout(0) == ()
    assert hw.layout(1) == ()


def test_layout_lists_gis_cis_and_orphans_in_placement_order(
    hw: NvmlHardware, sim_path: Path
) -> None:
    gpu_uuid = hw.gpu(0).uuid
    gi_3g = hw.create_gpu_instance(0, 9, Placement(4, 4))
    ci_3g = hw.create_compute_instance(0, gi_3g)
    gi_2g = hw.create_gpu_instance(0, 14, Placement(0, 2))
    ci_2g = hw.create_compute_instance(0, gi_2g)
    orphan = hw.create_gpu_instance(0, 19, Placement(3, 1))
    gi_1g = hw.create_gpu_instance(0, 19, Placement(2, 1))
    ci_1g = hw.create_compute_instance(0, gi_1g)
    # The IDs drivers are observed to give: 3g at 4 -> 2, 2g at 0 -> 3, 1g at s -> 7+s.
    assert (gi_3g, gi_2g, orphan, gi_1g) == (2, 3, 10, 9)
    assert hw.layout(0) == (
        GpuInstance(0, gpu_uuid, 3, 14, Placement(0, 2), (ci_2g,)),
        GpuInstance(0, gpu_uuid, 9, 19, Placement(2, 1), (ci_1g,)),
        GpuInstance(0, gpu_uuid, 10, 19, Placement(3, 1), ()),
        GpuInstance(0, gpu_uuid, 2, 9, Placement(4, 4), (ci_3g,)),
    )
    assert hw.layout(1) == ()
    # The layout agrees with the simulator's own file.
    gis = {gi["id"]: gi for gi in sim_state(sim_path)["gpus"][0]["gpuInstances"]}
    assert sorted(gis) == [2, 3, 9, 10]
    assert gis[10]["computeInstances"] == []
    assert gis[2]["computeInstances"][0]["migUUID"] == ci_3g.mig_uuid


def test_layout_sees_instances_made_behind_its_back(hw: NvmlHardware, sim_path: Path) -> None:
    made = sim_create(sim_path, "1", "7g.80gb", "0", False).created
    assert made is not None
    (gi,) = hw.layout(1)
    assert (gi.id, gi.profile_id, gi.placement) == (0, 0, Placement(0, 8))
    assert gi.compute_instances == (ComputeInstance(0, str(made.mig_uuid)),)


def test_create_gpu_and_compute_instance(hw: NvmlHardware, sim_path: Path) -> None:
    gi_id = hw.create_gpu_instance(1, 15, Placement(6, 2))
    assert isinstance(gi_id, int)
    (gi,) = hw.layout(1)
    assert (gi.id, gi.profile_id, gi.placement, gi.compute_instances) == (
        gi_id,
        15,
        Placement(6, 2),
        (),
    )
    ci = hw.create_compute_instance(1, gi_id)
    assert ci.id == 0
    assert MIG_UUID.match(ci.mig_uuid), ci.mig_uuid
    assert "/" not in ci.mig_uuid
    (gi,) = hw.layout(1)
    assert gi.compute_instances == (ci,)
    stored = sim_state(sim_path)["gpus"][1]["gpuInstances"][0]["computeInstances"]
    assert [c["migUUID"] for c in stored] == [ci.mig_uuid]


@pytest.mark.parametrize(
    ("profile_id", "start", "size"),
    [(19, 0, 1), (20, 6, 1), (15, 2, 2), (14, 4, 2), (9, 4, 4), (5, 0, 4), (0, 0, 8)],
)
def test_every_profile_creates_a_whole_gi_compute_instance(
    hw: NvmlHardware, profile_id: int, start: int, size: int
) -> None:
    gi_id = hw.create_gpu_instance(0, profile_id, Placement(start, size))
    ci = hw.create_compute_instance(0, gi_id)
    assert MIG_UUID.match(ci.mig_uuid)
    device = hw.mig_device(ci.mig_uuid)
    assert device is not None
    assert (device.profile_id, device.placement) == (profile_id, Placement(start, size))
    assert (device.gpu_instance_id, device.compute_instance_id) == (gi_id, ci.id)


def test_mig_device_reads_one_instance_back(hw: NvmlHardware) -> None:
    gpu1 = hw.gpu(1)
    gi_id = hw.create_gpu_instance(1, 14, Placement(2, 2))
    ci = hw.create_compute_instance(1, gi_id)
    assert hw.mig_device(ci.mig_uuid) == MigDevice(
        mig_uuid=ci.mig_uuid,
        gpu_uuid=gpu1.uuid,
        gpu_index=1,
        gpu_minor=1,
        gpu_instance_id=4,
        compute_instance_id=0,
        profile_id=14,
        placement=Placement(2, 2),
    )


def test_mig_device_unknown_is_none(hw: NvmlHardware) -> None:
    hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(0, 1)))
    assert hw.mig_device(f"MIG-{uuid.uuid4()}") is None
    assert hw.mig_device("MIG-GPU-deadbeef/1/0") is None
    # A GPU UUID names a device, but not a MIG device.
    assert hw.mig_device(hw.gpu(0).uuid) is None


def test_destroy_compute_then_gpu_instance(hw: NvmlHardware, sim_path: Path) -> None:
    keep = hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(0, 1)))
    gi_id = hw.create_gpu_instance(0, 19, Placement(5, 1))
    ci = hw.create_compute_instance(0, gi_id)
    hw.destroy_compute_instance(0, gi_id, ci.id)
    assert hw.mig_device(ci.mig_uuid) is None
    assert [(g.id, g.compute_instances) for g in hw.layout(0)] == [(7, (keep,)), (gi_id, ())]
    hw.destroy_gpu_instance(0, gi_id)
    assert [g.id for g in hw.layout(0)] == [7]
    assert [g["id"] for g in sim_state(sim_path)["gpus"][0]["gpuInstances"]] == [7]
    assert hw.mig_device(keep.mig_uuid) is not None


def test_compute_instance_on_a_gi_id_reused_by_another_profile(
    hw: NvmlHardware, sim_path: Path
) -> None:
    # This adapter creates and destroys a 4g GI; the same GI ID then comes back, made by
    # someone else, as a 1-slice GI: the CI must fit the GI that exists now.
    gi_id = hw.create_gpu_instance(0, 5, Placement(0, 4))
    hw.destroy_gpu_instance(0, gi_id)
    made = sim_create(sim_path, "0", "1g.20gb", "6", True).created
    assert made is not None and made.gpu_instance_id == gi_id == 1
    ci = hw.create_compute_instance(0, gi_id)
    device = hw.mig_device(ci.mig_uuid)
    assert device is not None
    assert (device.gpu_instance_id, device.profile_id, device.placement) == (1, 15, Placement(6, 2))


def test_destroying_what_is_gone_is_not_found(hw: NvmlHardware) -> None:
    gi_id = hw.create_gpu_instance(0, 19, Placement(1, 1))
    with pytest.raises(NvmlError) as ci_err:
        hw.destroy_compute_instance(0, gi_id, 0)
    assert (ci_err.value.call, ci_err.value.name, ci_err.value.value) == (
        "nvmlGpuInstanceGetComputeInstanceById",
        "NOT_FOUND",
        6,
    )
    hw.destroy_gpu_instance(0, gi_id)
    with pytest.raises(NvmlError) as gi_err:
        hw.destroy_gpu_instance(0, gi_id)
    assert (gi_err.value.call, gi_err.value.name) == ("nvmlDeviceGetGpuInstanceById", "NOT_FOUND")


# --- processes -------------------------------------------------------------------------------


def test_processes_follow_busy_marks(hw: NvmlHardware, sim_path: Path) -> None:
    a = hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(0, 1)))
    b = hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(1, 1)))
    assert hw.gpu_has_processes(0) is False
    assert hw.instance_process_count(a.mig_uuid) == 0
    sim_busy(sim_path, a.mig_uuid, False, False)
    assert hw.gpu_has_processes(0) is True
    assert hw.gpu_has_processes(1) is False
    assert hw.instance_process_count(a.mig_uuid) == 1
    assert hw.instance_process_count(b.mig_uuid) == 0
    sim_busy(sim_path, a.mig_uuid, False, True)
    assert hw.gpu_has_processes(0) is False
    assert hw.instance_process_count(a.mig_uuid) == 0


def test_a_gi_hold_is_not_a_process(hw: NvmlHardware, sim_path: Path) -> None:
    a = hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(0, 1)))
    sim_busy(sim_path, a.mig_uuid, True, False)
    assert hw.instance_process_count(a.mig_uuid) == 0
    assert hw.gpu_has_processes(0) is False


def test_processes_of_an_unknown_instance(hw: NvmlHardware) -> None:
    assert hw.instance_process_count(f"MIG-{uuid.uuid4()}") == 0


# --- capability minors -----------------------------------------------------------------------


def test_mig_minors_file_follows_the_driver_layout(sim_path: Path) -> None:
    lines = (node_dir(sim_path) / "mig-minors").read_text().splitlines()
    assert lines[:6] == [
        "config 1",
        "monitor 2",
        "gpu0/gi0/access 3",
        "gpu0/gi0/ci0/access 4",
        "gpu0/gi0/ci1/access 5",
        "gpu0/gi0/ci2/access 6",
    ]
    table = dict(line.rsplit(" ", 1) for line in lines)
    assert table["gpu0/gi0/ci7/access"] == "11"
    assert table["gpu0/gi1/access"] == "12"
    assert table["gpu0/gi14/ci7/access"] == "137"
    assert table["gpu1/gi0/access"] == "138"
    assert len(set(table.values())) == len(table)  # every minor is unique


def test_capability_minors(hw: NvmlHardware) -> None:
    # gpu<m>/gi<g>/access = 3 + 135m + 9g and its ci<c> = that + 1 + c.
    assert hw.capability_minors(0, 7, 0) == CapabilityMinors(gi_access=66, ci_access=67)
    assert hw.capability_minors(0, 0, 0) == CapabilityMinors(3, 4)
    assert hw.capability_minors(0, 13, 0) == CapabilityMinors(120, 121)
    assert hw.capability_minors(1, 2, 3) == CapabilityMinors(156, 160)


def test_capability_minors_missing_entry(hw: NvmlHardware) -> None:
    with pytest.raises(HardwareError, match="gpu0/gi15/access"):
        hw.capability_minors(0, 15, 0)


def test_capability_minors_without_the_file(sim_path: Path) -> None:
    hw = NvmlHardware(SimNvml(SimStore(sim_path)), sim_path.parent / "no-such-mig-minors")
    hw.open()
    try:
        with pytest.raises(HardwareError, match="no-such-mig-minors"):
            hw.capability_minors(0, 7, 0)
    finally:
        hw.close()


# --- session and call counting ---------------------------------------------------------------


def test_open_inits_and_close_shuts_down(sim_path: Path) -> None:
    before = calls(sim_path)
    hw = NvmlHardware(SimNvml(SimStore(sim_path)))
    hw.open()
    assert hw.gpu_count() == 2
    hw.close()
    assert call_diff(before, calls(sim_path), ignored=()) == {
        "nvmlInit": 1,
        "nvmlDeviceGetCount": 1,
        "nvmlShutdown": 1,
    }


def test_calls_before_init_are_uninitialized(sim_path: Path) -> None:
    hw = NvmlHardware(SimNvml(SimStore(sim_path)))
    with pytest.raises(NvmlError) as err:
        hw.gpu_count()
    assert (err.value.call, err.value.name, err.value.value) == (
        "nvmlDeviceGetCount",
        "UNINITIALIZED",
        1,
    )


def test_gpu_facts_are_cached_per_session(hw: NvmlHardware, sim_path: Path) -> None:
    before = calls(sim_path)
    first = hw.gpu(0)
    assert hw.gpu(0) == first
    assert hw.gpu(0) == first
    assert call_diff(before, calls(sim_path), ignored=()) == {
        "nvmlDeviceGetHandleByIndex": 1,
        "nvmlDeviceGetMigMode": 1,
        "nvmlDeviceGetUUID": 1,
        "nvmlDeviceGetName": 1,
        "nvmlDeviceGetMinorNumber": 1,
    }


def test_mig_device_call_budget(hw: NvmlHardware, sim_path: Path) -> None:
    for start in range(6):
        hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(start, 1)))
    ci = hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(6, 1)))
    before = calls(sim_path)
    assert hw.mig_device(ci.mig_uuid) is not None
    used = call_diff(before, calls(sim_path), ignored=())
    assert "nvmlInit" not in used and "nvmlShutdown" not in used
    # Read back directly: no walk over the node's MIG devices, whatever their number.
    assert "nvmlDeviceGetMigDeviceHandleByIndex" not in used
    assert sum(used.values()) <= 10, used
    assert used["nvmlDeviceGetHandleByUUID"] == 1


def test_create_call_sequence(hw: NvmlHardware, sim_path: Path) -> None:
    before = calls(sim_path)
    gi_id = hw.create_gpu_instance(0, 19, Placement(4, 1))
    assert call_diff(before, calls(sim_path), ignored=()) == {
        "nvmlDeviceGetHandleByIndex": 1,
        "nvmlDeviceCreateGpuInstanceWithPlacement": 1,
        "nvmlGpuInstanceGetInfo": 1,
    }
    before = calls(sim_path)
    hw.destroy_gpu_instance(0, gi_id)
    assert call_diff(before, calls(sim_path), ignored=()) == {
        "nvmlDeviceGetGpuInstanceById": 1,
        "nvmlGpuInstanceDestroy": 1,
    }


def test_operator_actions_are_not_counted(sim_path: Path) -> None:
    made = sim_create(sim_path, "0", "1g.10gb", "0", False).created
    assert made is not None and made.mig_uuid is not None
    sim_busy(sim_path, made.mig_uuid, False, False)
    assert calls(sim_path) == {}


# --- NVML not available ----------------------------------------------------------------------


def _stub_nvml(error: type[Exception]) -> Any:
    """A pynvml-like module whose nvmlInit fails as on a node without the driver."""
    nv = bindings()

    def nvml_init() -> None:
        raise error()

    stub = types.SimpleNamespace(
        NVMLError=nv.NVMLError,
        nvmlInit=nvml_init,
        nvmlShutdown=lambda: None,
        **{a: getattr(nv, a) for a in dir(nv) if a.startswith("NVML_ERROR_")},
    )
    return stub


def test_open_without_the_library_is_nvml_unavailable() -> None:
    hw = NvmlHardware(_stub_nvml(bindings().NVMLError_LibraryNotFound))
    with pytest.raises(NvmlUnavailableError) as err:
        hw.open()
    message = str(err.value)
    assert "\n" not in message
    assert "GPU node" in message
    assert "simulated node" in message
    assert err.value.setting is Setting.SIMULATED_NODE  # the CLI names --sim
    assert "LIBRARY_NOT_FOUND" in message
    assert err.value.exit_code == 4
    assert err.value.code == "hardware"


def test_open_without_the_driver_loaded_is_nvml_unavailable() -> None:
    hw = NvmlHardware(_stub_nvml(bindings().NVMLError_DriverNotLoaded))
    with pytest.raises(NvmlUnavailableError, match="simulated node"):
        hw.open()


def test_other_init_failures_stay_nvml_errors() -> None:
    hw = NvmlHardware(_stub_nvml(bindings().NVMLError_NoPermission))
    with pytest.raises(NvmlError) as err:
        hw.open()
    assert not isinstance(err.value, NvmlUnavailableError)
    assert (err.value.call, err.value.name, err.value.value) == ("nvmlInit", "NO_PERMISSION", 4)


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _run_without_sim(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAMIMIG_")}
    env.update(
        HAMIMIG_STATE_DIR=str(tmp_path / "state"),
        HAMIMIG_CDI_DIR=str(tmp_path / "cdi"),
        HAMIMIG_CONFIG=str(tmp_path / "absent.yaml"),
        PYTHONPATH=str(REPO_ROOT),
    )
    return subprocess.run(
        [sys.executable, "-m", "hamimig", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is installed on this machine")
def test_cli_without_nvml_says_so_in_one_line(tmp_path: Path) -> None:
    ran = _run_without_sim(tmp_path, "list")
    assert ran.returncode == 4
    assert ran.stdout == ""
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert "--sim" in lines[0]
    assert "GPU node" in lines[0]
    assert "Traceback" not in ran.stderr


@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is installed on this machine")
def test_cli_without_nvml_json_error(tmp_path: Path) -> None:
    ran = _run_without_sim(tmp_path, "-o", "json", "list")
    assert ran.returncode == 4
    assert "Traceback" not in ran.stderr
    doc = json.loads(ran.stdout)
    assert isinstance(doc, dict)
    assert doc["error"]["code"] == "hardware"
    assert "--sim" in doc["error"]["message"]
