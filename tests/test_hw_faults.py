"""Injected faults (docs/simulator.md): NVML calls through the real adapter, and the
file operations of `run_file_op`; crash faults end real subprocesses with status 137."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from hamimig.errors import GpuInstanceUnreadable, NvmlError, UsageError
from hamimig.hw.nvml import NvmlHardware
from hamimig.hw.types import Placement
from hamimig.rehearsal.simulator import sim_fault_add, sim_fault_clear
from hamimig.sim.state import SimStore, run_file_op
from tests.support.cli import Cli
from tests.support.node import open_hw, sim_state
from tests.support.nvml import CREATE_GI
from tests.support.processes import run_python

NVML_ERRORS = {
    "IN_USE": 19,
    "INSUFFICIENT_RESOURCES": 23,
    "UNKNOWN": 999,
    "GPU_IS_LOST": 15,
    "NO_PERMISSION": 4,
    "NOT_FOUND": 6,
}

# Opens the real adapter over the simulated node named by argv[1], then runs the test's body.
ADAPTER_SCRIPT = """
import sys
from pathlib import Path
from hamimig.hw.nvml import NvmlHardware
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore
from hamimig.hw.types import Placement
store = SimStore(Path(sys.argv[1]))
hw = NvmlHardware(SimNvml(store), store.files.mig_minors)
hw.open()
"""

FILE_OP_SCRIPT = """
import sys
from pathlib import Path
from hamimig.sim.state import SimStore, run_file_op
target = Path(sys.argv[2])
def perform():
    target.write_text("written")
run_file_op(SimStore(Path(sys.argv[1])), "record.write", perform)
print("returned", flush=True)
"""


def add_fault(
    path: Path,
    op: str,
    error: str | None = None,
    action: str = "raise",
    times: int = 1,
    skip: int = 0,
    gpu: str | None = None,
) -> None:
    sim_fault_add(path, op, error, action, times, skip, gpu)


def faults(path: Path) -> list[dict[str, object]]:
    pending: list[dict[str, object]] = sim_state(path)["faults"]
    return pending


def gi_ids(path: Path, gpu: int = 0) -> list[int]:
    return [gi["id"] for gi in sim_state(path)["gpus"][gpu]["gpuInstances"]]


# --- raise: every error name on every mutating call ------------------------------------------


@pytest.mark.parametrize("name", sorted(NVML_ERRORS))
def test_raise_on_create_gpu_instance(hw: NvmlHardware, sim_path: Path, name: str) -> None:
    add_fault(sim_path, CREATE_GI, name)
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert (err.value.call, err.value.name, err.value.value) == (CREATE_GI, name, NVML_ERRORS[name])
    assert name in str(err.value) and CREATE_GI in str(err.value)
    assert gi_ids(sim_path) == []  # a raised fault changes nothing
    assert faults(sim_path) == []
    assert hw.create_gpu_instance(0, 19, Placement(0, 1)) == 7  # fired once, then gone


@pytest.mark.parametrize("name", sorted(NVML_ERRORS))
def test_create_call_refused_is_not_an_unreadable_gi(
    hw: NvmlHardware, sim_path: Path, name: str
) -> None:
    """Nothing was made: the caller has nothing to roll back."""
    add_fault(sim_path, CREATE_GI, name)
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert not isinstance(err.value, GpuInstanceUnreadable)


@pytest.mark.parametrize("name", sorted(NVML_ERRORS))
def test_gi_read_back_failure_is_an_unreadable_gi(
    hw: NvmlHardware, sim_path: Path, name: str
) -> None:
    """The GI was made but its ID is unknown: a distinct type tells the caller to roll back."""
    add_fault(sim_path, "nvmlGpuInstanceGetInfo", name)
    with pytest.raises(GpuInstanceUnreadable) as err:
        hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert (err.value.call, err.value.name, err.value.value) == (
        "nvmlGpuInstanceGetInfo",
        name,
        NVML_ERRORS[name],
    )
    assert err.value.message == (
        f"NVML call nvmlGpuInstanceGetInfo failed: {name} (code {NVML_ERRORS[name]})"
    )
    assert err.value.exit_code == 4 and err.value.code == "hardware"
    assert len(gi_ids(sim_path)) == 1  # the GI exists


@pytest.mark.parametrize("name", sorted(NVML_ERRORS))
def test_raise_on_create_compute_instance(hw: NvmlHardware, sim_path: Path, name: str) -> None:
    gi_id = hw.create_gpu_instance(0, 14, Placement(2, 2))
    add_fault(sim_path, "nvmlGpuInstanceCreateComputeInstance", name)
    with pytest.raises(NvmlError) as err:
        hw.create_compute_instance(0, gi_id)
    assert (err.value.call, err.value.name, err.value.value) == (
        "nvmlGpuInstanceCreateComputeInstance",
        name,
        NVML_ERRORS[name],
    )
    (gi,) = hw.layout(0)
    assert gi.compute_instances == ()  # left as an orphan GI
    assert hw.create_compute_instance(0, gi_id).id == 0


@pytest.mark.parametrize("name", sorted(NVML_ERRORS))
def test_raise_on_destroy_compute_instance(hw: NvmlHardware, sim_path: Path, name: str) -> None:
    gi_id = hw.create_gpu_instance(0, 19, Placement(5, 1))
    ci = hw.create_compute_instance(0, gi_id)
    add_fault(sim_path, "nvmlComputeInstanceDestroy", name)
    with pytest.raises(NvmlError) as err:
        hw.destroy_compute_instance(0, gi_id, ci.id)
    assert (err.value.call, err.value.name, err.value.value) == (
        "nvmlComputeInstanceDestroy",
        name,
        NVML_ERRORS[name],
    )
    assert hw.mig_device(ci.mig_uuid) is not None
    hw.destroy_compute_instance(0, gi_id, ci.id)
    assert hw.mig_device(ci.mig_uuid) is None


@pytest.mark.parametrize("name", sorted(NVML_ERRORS))
def test_raise_on_destroy_gpu_instance(hw: NvmlHardware, sim_path: Path, name: str) -> None:
    gi_id = hw.create_gpu_instance(0, 0, Placement(0, 8))
    add_fault(sim_path, "nvmlGpuInstanceDestroy", name)
    with pytest.raises(NvmlError) as err:
        hw.destroy_gpu_instance(0, gi_id)
    assert (err.value.call, err.value.name, err.value.value) == (
        "nvmlGpuInstanceDestroy",
        name,
        NVML_ERRORS[name],
    )
    assert gi_ids(sim_path) == [0]
    hw.destroy_gpu_instance(0, gi_id)
    assert gi_ids(sim_path) == []


@pytest.mark.parametrize("name", ["UNKNOWN", "GPU_IS_LOST"])
def test_raise_on_reads(hw: NvmlHardware, sim_path: Path, name: str) -> None:
    add_fault(sim_path, "nvmlDeviceGetGpuInstances", name)
    with pytest.raises(NvmlError) as err:
        hw.layout(0)
    assert (err.value.call, err.value.name) == ("nvmlDeviceGetGpuInstances", name)
    add_fault(sim_path, "nvmlDeviceGetComputeRunningProcesses", name)
    with pytest.raises(NvmlError) as err:
        hw.gpu_has_processes(0)
    assert (err.value.call, err.value.name) == ("nvmlDeviceGetComputeRunningProcesses", name)
    assert hw.layout(0) == ()
    assert hw.gpu_has_processes(0) is False


def test_default_error_is_unknown(hw: NvmlHardware, sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI)
    assert faults(sim_path)[0]["error"] == "UNKNOWN"
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert (err.value.name, err.value.value) == ("UNKNOWN", 999)


def test_error_name_may_carry_the_prefix(sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, "nvml_error_in_use")
    assert faults(sim_path)[0]["error"] == "IN_USE"


# --- times, skip, gpu ------------------------------------------------------------------------


def test_times_fires_n_times_then_disappears(hw: NvmlHardware, sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, "INSUFFICIENT_RESOURCES", times=2)
    for remaining in (1, 0):
        with pytest.raises(NvmlError) as err:
            hw.create_gpu_instance(0, 19, Placement(0, 1))
        assert err.value.name == "INSUFFICIENT_RESOURCES"
        assert [f["times"] for f in faults(sim_path)] == ([remaining] if remaining else [])
    assert hw.create_gpu_instance(0, 19, Placement(0, 1)) == 7


def test_skip_lets_the_first_calls_through(hw: NvmlHardware, sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, "NO_PERMISSION", skip=1)
    assert hw.create_gpu_instance(0, 19, Placement(0, 1)) == 7
    assert faults(sim_path)[0]["skip"] == 0
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 19, Placement(1, 1))
    assert err.value.name == "NO_PERMISSION"
    assert hw.create_gpu_instance(0, 19, Placement(1, 1)) == 8
    assert faults(sim_path) == []


def test_skip_and_times_together(hw: NvmlHardware, sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, "UNKNOWN", times=2, skip=2)
    outcomes = []
    for start in range(6):
        try:
            hw.create_gpu_instance(0, 19, Placement(start, 1))
            outcomes.append("ok")
        except NvmlError as exc:
            outcomes.append(exc.name)
    assert outcomes == ["ok", "ok", "UNKNOWN", "UNKNOWN", "ok", "ok"]
    assert gi_ids(sim_path) == [7, 8, 11, 12]


def test_gpu_filter_fires_only_on_that_gpu(hw: NvmlHardware, sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, "GPU_IS_LOST", gpu="1")
    assert faults(sim_path)[0]["gpu"] == 1
    assert hw.create_gpu_instance(0, 19, Placement(0, 1)) == 7
    assert hw.create_gpu_instance(0, 19, Placement(1, 1)) == 8
    assert len(faults(sim_path)) == 1
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(1, 19, Placement(0, 1))
    assert (err.value.name, err.value.value) == ("GPU_IS_LOST", 15)
    assert faults(sim_path) == []
    assert hw.create_gpu_instance(1, 19, Placement(0, 1)) == 7


def test_gpu_filter_accepts_a_uuid(sim_path: Path) -> None:
    uuid1 = sim_state(sim_path)["gpus"][1]["uuid"]
    add_fault(sim_path, CREATE_GI, "UNKNOWN", gpu=uuid1)
    assert faults(sim_path)[0]["gpu"] == 1


def test_fault_on_another_op_does_not_fire(hw: NvmlHardware, sim_path: Path) -> None:
    add_fault(sim_path, "nvmlGpuInstanceDestroy", "IN_USE")
    gi_id = hw.create_gpu_instance(0, 19, Placement(0, 1))
    hw.create_compute_instance(0, gi_id)
    assert len(faults(sim_path)) == 1


def test_consumption_is_persisted_for_other_adapters(sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, "IN_USE")
    first = open_hw(sim_path)
    second = open_hw(sim_path)  # opened before the fault fires
    try:
        with pytest.raises(NvmlError):
            first.create_gpu_instance(0, 19, Placement(0, 1))
        assert faults(sim_path) == []
        assert second.create_gpu_instance(0, 19, Placement(0, 1)) == 7
    finally:
        first.close()
        second.close()


def test_consumption_is_persisted_for_other_processes(sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, "IN_USE")
    body = """
try:
    hw.create_gpu_instance(0, 19, Placement(int(sys.argv[2]), 1))
    print("created")
except Exception as exc:
    print(type(exc).__name__, exc.name)
"""
    first = run_python(ADAPTER_SCRIPT + body, str(sim_path), "0")
    assert first.stdout.strip() == "NvmlError IN_USE", first.stderr
    second = run_python(ADAPTER_SCRIPT + body, str(sim_path), "0")
    assert second.stdout.strip() == "created", second.stderr
    assert gi_ids(sim_path) == [7]


def test_fault_clear(hw: NvmlHardware, sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, "IN_USE", times=5)
    add_fault(sim_path, "record.write", "EIO")
    sim_fault_clear(sim_path)
    assert faults(sim_path) == []
    assert hw.create_gpu_instance(0, 19, Placement(0, 1)) == 7


# --- invalid faults --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "error", "action", "times", "skip", "match"),
    [
        ("GpuInstanceDestroy", None, "raise", 1, 0, "op"),
        ("nvml Destroy", None, "raise", 1, 0, "op"),
        ("record.delete", None, "raise", 1, 0, "op"),
        ("nvmlGpuInstanceDestroy", None, "explode", 1, 0, "action"),
        ("nvmlGpuInstanceDestroy", "BUSY", "raise", 1, 0, "BUSY"),
        ("nvmlGpuInstanceDestroy", "EIO", "raise", 1, 0, "EIO"),
        ("record.write", "IN_USE", "raise", 1, 0, "IN_USE"),
        ("record.write", "ENOTANERRNO", "raise", 1, 0, "ENOTANERRNO"),
        ("nvmlGpuInstanceDestroy", "IN_USE", "raise", 0, 0, "times"),
        ("nvmlGpuInstanceDestroy", "IN_USE", "raise", -1, 0, "times"),
        ("nvmlGpuInstanceDestroy", "IN_USE", "raise", 1, -1, "skip"),
    ],
)
def test_invalid_fault_is_a_usage_error(
    sim_path: Path,
    op: str,
    error: str | None,
    action: str,
    times: int,
    skip: int,
    match: str,
) -> None:
    with pytest.raises(UsageError, match=match):
        add_fault(sim_path, op, error, action, times, skip)
    assert faults(sim_path) == []


def test_fault_on_unknown_gpu_is_a_usage_error(sim_path: Path) -> None:
    with pytest.raises(UsageError):
        add_fault(sim_path, CREATE_GI, "IN_USE", gpu="2")
    assert faults(sim_path) == []


@pytest.mark.parametrize(
    "extra",
    [
        ["--op", "bogus"],
        ["--op", CREATE_GI, "--action", "crash"],
        ["--op", CREATE_GI, "--error", "NOPE"],
        ["--op", CREATE_GI, "--times", "0"],
        ["--op", "cdi.write", "--error", "IN_USE"],
    ],
)
def test_cli_invalid_fault_exits_2(cli: Cli, sim_path: Path, extra: list[str]) -> None:
    ran = cli("sim", "fault", "add", *extra)
    assert ran.exit_code == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert faults(sim_path) == []


def test_cli_added_fault_reaches_the_adapter(cli: Cli, sim_path: Path) -> None:
    ran = cli(
        "sim",
        "fault",
        "add",
        "--op",
        "nvmlGpuInstanceDestroy",
        "--error",
        "IN_USE",
        "--times",
        "2",
        "--skip",
        "1",
        "--gpu",
        "1",
    )
    assert ran.exit_code == 0, ran.stderr
    assert faults(sim_path) == [
        {
            "op": "nvmlGpuInstanceDestroy",
            "error": "IN_USE",
            "action": "raise",
            "times": 2,
            "skip": 1,
            "gpu": 1,
        }
    ]
    hw = open_hw(sim_path)
    try:
        for start in range(4):
            hw.create_gpu_instance(1, 19, Placement(start, 1))
        hw.create_gpu_instance(0, 19, Placement(0, 1))
        hw.destroy_gpu_instance(0, 7)  # other GPU: not counted
        hw.destroy_gpu_instance(1, 7)  # skipped
        names = []
        for gi_id in (8, 9, 10):
            try:
                hw.destroy_gpu_instance(1, gi_id)
                names.append("ok")
            except NvmlError as exc:
                names.append(exc.name)
        assert names == ["IN_USE", "IN_USE", "ok"]
    finally:
        hw.close()
    assert gi_ids(sim_path, 1) == [8, 9]
    assert cli("sim", "fault", "clear").exit_code == 0


# --- crash faults on NVML calls (real subprocesses) ------------------------------------------

CREATE_BODY = """
gi = hw.create_gpu_instance(0, 19, Placement(2, 1))
print("survived", gi, flush=True)
"""


@pytest.mark.slow
def test_crash_before_create_leaves_no_gi(sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, action="crash-before")
    ran = run_python(ADAPTER_SCRIPT + CREATE_BODY, str(sim_path))
    assert ran.returncode == 137, ran.stderr
    assert "survived" not in ran.stdout
    state = sim_state(sim_path)
    assert state["gpus"][0]["gpuInstances"] == []
    assert state["faults"] == []
    assert state["calls"][CREATE_GI] == 1
    # The next process runs normally.
    again = run_python(ADAPTER_SCRIPT + CREATE_BODY, str(sim_path))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "survived 9"


@pytest.mark.slow
def test_crash_after_create_leaves_the_gi(sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, action="crash-after")
    ran = run_python(ADAPTER_SCRIPT + CREATE_BODY, str(sim_path))
    assert ran.returncode == 137, ran.stderr
    assert "survived" not in ran.stdout
    state = sim_state(sim_path)
    (gi,) = state["gpus"][0]["gpuInstances"]
    assert (gi["id"], gi["profileId"], gi["placement"]) == (9, 19, {"start": 2, "size": 1})
    assert gi["computeInstances"] == []  # an orphan GI, as after a real crash between calls
    assert state["faults"] == []


@pytest.mark.slow
def test_crash_after_create_ci_leaves_the_ci(sim_path: Path) -> None:
    hw = open_hw(sim_path)
    try:
        gi_id = hw.create_gpu_instance(0, 19, Placement(4, 1))
    finally:
        hw.close()
    add_fault(sim_path, "nvmlGpuInstanceCreateComputeInstance", action="crash-after", gpu="0")
    body = f"print(hw.create_compute_instance(0, {gi_id}), flush=True)\n"
    ran = run_python(ADAPTER_SCRIPT + body, str(sim_path))
    assert ran.returncode == 137
    assert ran.stdout == ""
    state = sim_state(sim_path)
    (gi,) = state["gpus"][0]["gpuInstances"]
    assert [ci["id"] for ci in gi["computeInstances"]] == [0]
    assert state["faults"] == []


@pytest.mark.slow
def test_crash_around_destroy(sim_path: Path) -> None:
    hw = open_hw(sim_path)
    try:
        gi_id = hw.create_gpu_instance(0, 14, Placement(0, 2))
        ci = hw.create_compute_instance(0, gi_id)
    finally:
        hw.close()
    body = f"""
hw.destroy_compute_instance(0, {gi_id}, {ci.id})
hw.destroy_gpu_instance(0, {gi_id})
print("destroyed", flush=True)
"""
    # crash-after on the CI destroy: the CI is gone, the GI destroy never ran.
    add_fault(sim_path, "nvmlComputeInstanceDestroy", action="crash-after")
    ran = run_python(ADAPTER_SCRIPT + body, str(sim_path))
    assert ran.returncode == 137, ran.stderr
    (gi,) = sim_state(sim_path)["gpus"][0]["gpuInstances"]
    assert (gi["id"], gi["computeInstances"]) == (gi_id, [])
    assert "nvmlGpuInstanceDestroy" not in sim_state(sim_path)["calls"]
    # crash-before on the GI destroy: the GI survives it.
    add_fault(sim_path, "nvmlGpuInstanceDestroy", action="crash-before")
    body = f"hw.destroy_gpu_instance(0, {gi_id})\nprint('destroyed', flush=True)\n"
    ran = run_python(ADAPTER_SCRIPT + body, str(sim_path))
    assert ran.returncode == 137, ran.stderr
    assert ran.stdout == ""
    assert gi_ids(sim_path) == [gi_id]
    assert faults(sim_path) == []


@pytest.mark.slow
def test_crash_fault_on_another_gpu_does_not_fire(sim_path: Path) -> None:
    add_fault(sim_path, CREATE_GI, action="crash-before", gpu="1")
    ran = run_python(ADAPTER_SCRIPT + CREATE_BODY, str(sim_path))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "survived 9"
    assert len(faults(sim_path)) == 1


# --- file-operation faults -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["EIO", "EACCES", "ENOSPC"])
def test_file_op_raise(sim_path: Path, tmp_path: Path, name: str) -> None:
    add_fault(sim_path, "record.write", name)
    target = tmp_path / "record.json"
    performed: list[bool] = []

    def perform() -> None:
        performed.append(True)
        target.write_text("written")

    with pytest.raises(OSError) as err:
        run_file_op(SimStore(sim_path), "record.write", perform)
    assert err.value.errno == getattr(errno, name)
    assert "record.write" in str(err.value)
    assert performed == []
    assert not target.exists()
    assert faults(sim_path) == []
    run_file_op(SimStore(sim_path), "record.write", perform)
    assert performed == [True]
    assert target.read_text() == "written"


def test_file_op_default_error_is_eio(sim_path: Path) -> None:
    add_fault(sim_path, "cdi.remove")
    with pytest.raises(OSError) as err:
        run_file_op(SimStore(sim_path), "cdi.remove", lambda: None)
    assert err.value.errno == errno.EIO


def test_file_op_fault_matches_only_its_op(sim_path: Path, tmp_path: Path) -> None:
    add_fault(sim_path, "record.remove", "EACCES")
    target = tmp_path / "x"

    def perform() -> None:
        target.write_text("w")

    run_file_op(SimStore(sim_path), "record.write", perform)
    run_file_op(SimStore(sim_path), "cdi.write", lambda: None)
    assert target.read_text() == "w"
    assert len(faults(sim_path)) == 1
    # File operations are not NVML calls.
    assert sim_state(sim_path)["calls"] == {}


def test_file_op_skip_and_times(sim_path: Path) -> None:
    add_fault(sim_path, "cdi.write", "ENOSPC", times=2, skip=1)
    outcomes = []
    for _ in range(4):
        try:
            run_file_op(SimStore(sim_path), "cdi.write", lambda: None)
            outcomes.append("ok")
        except OSError as exc:
            outcomes.append(errno.errorcode[exc.errno or 0])
    assert outcomes == ["ok", "ENOSPC", "ENOSPC", "ok"]


@pytest.mark.slow
def test_file_op_crash_before(sim_path: Path, tmp_path: Path) -> None:
    add_fault(sim_path, "record.write", action="crash-before")
    target = tmp_path / "record.json"
    ran = run_python(FILE_OP_SCRIPT, str(sim_path), str(target))
    assert ran.returncode == 137, ran.stderr
    assert "returned" not in ran.stdout
    assert not target.exists()
    assert faults(sim_path) == []


@pytest.mark.slow
def test_file_op_crash_after(sim_path: Path, tmp_path: Path) -> None:
    add_fault(sim_path, "record.write", action="crash-after")
    target = tmp_path / "record.json"
    ran = run_python(FILE_OP_SCRIPT, str(sim_path), str(target))
    assert ran.returncode == 137, ran.stderr
    assert "returned" not in ran.stdout
    assert target.read_text() == "written"
    assert faults(sim_path) == []
    again = run_python(FILE_OP_SCRIPT, str(sim_path), str(tmp_path / "second.json"))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "returned"
