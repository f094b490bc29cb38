"""The simulator's home (`hamimig/sim/`): reads that leave the node's file alone, call counts that
still add up across processes, and the file-operation names the store and `sim fault add`
share."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hamimig.hw.types import Placement
from hamimig.sim import state as state_module
from hamimig.sim.backend import SimBackend
from hamimig.sim.nvml import WRITES, SimNvml
from hamimig.sim.state import FILE_OPS, SimStore
from hamimig.vocabulary import FileOpName
from tests.support.cli import Cli
from tests.support.node import node_dir, open_hw, sim_state
from tests.support.processes import REPO_ROOT, run_python

# Reads through the real adapter, then exits without closing it (no nvmlShutdown).
READ_AND_EXIT = """
import sys
from pathlib import Path
from hamimig.sim.backend import SimBackend
hw = SimBackend(Path(sys.argv[1])).hardware()
hw.open()
assert hw.gpu_count() == 2
hw.gpu(0)
"""


def _stamp(path: Path) -> tuple[int, int, bytes]:
    info = os.stat(path)
    return info.st_ino, info.st_mtime_ns, path.read_bytes()


def test_reads_leave_the_node_file_alone(sim_path: Path) -> None:
    hw = open_hw(sim_path)
    try:
        before = _stamp(sim_path)
        assert hw.gpu_count() == 2
        hw.gpu(1)
        hw.profiles(0)
        assert hw.layout(0) is not None
        assert _stamp(sim_path) == before  # not rewritten, not even renamed over
    finally:
        hw.close()


def test_a_mutation_publishes_the_counts_so_far(sim_path: Path) -> None:
    hw = open_hw(sim_path)
    try:
        hw.gpu_count()
        hw.create_gpu_instance(0, 19, Placement(0, 1))
        # Read the file directly: no flush, as another process would see it.
        counted = json.loads(sim_path.read_text())["calls"]
        assert counted["nvmlInit"] == 1
        assert counted["nvmlDeviceGetCount"] == 1
        assert counted["nvmlDeviceCreateGpuInstanceWithPlacement"] == 1
    finally:
        hw.close()
    assert json.loads(sim_path.read_text())["calls"]["nvmlShutdown"] == 1


def test_counts_of_a_process_that_exits_without_shutdown_are_kept(sim_path: Path) -> None:
    ran = run_python(READ_AND_EXIT, str(sim_path))
    assert ran.returncode == 0, ran.stderr
    counted = json.loads(sim_path.read_text())["calls"]
    assert counted["nvmlInit"] == 1
    assert counted["nvmlDeviceGetCount"] == 1
    assert counted["nvmlDeviceGetHandleByIndex"] == 1
    assert "nvmlShutdown" not in counted


def test_sim_show_reports_the_counts_of_finished_commands(cli: Cli) -> None:
    assert cli("list").exit_code == 0
    shown = cli.json("sim", "show").json()["calls"]
    assert shown == sim_state(cli.sim)["calls"]
    assert shown["nvmlInit"] == shown["nvmlShutdown"] == 1


def test_backend_paths_are_in_the_nodes_directory(sim_path: Path) -> None:
    backend = SimBackend(sim_path)
    assert backend.files.mig_minors == node_dir(sim_path) / "mig-minors"
    assert backend.files.mig_minors.is_file()


def test_file_op_names_are_one_list() -> None:
    assert tuple(op.value for op in FileOpName) == FILE_OPS
    store = REPO_ROOT / "hamimig" / "store"
    literal = re.compile(r"[\"'](record|cdi|intent|queue)\.(write|remove)[\"']")
    for source in store.glob("*.py"):
        assert not literal.search(source.read_text()), f"{source.name} names a file op by string"
    used = "".join(p.read_text() for p in store.glob("*.py"))
    assert all(f"FileOpName.{op.name}" in used for op in FileOpName)


def test_a_file_fault_names_its_op_as_sim_fault_add_does(sim_path: Path) -> None:
    backend = SimBackend(sim_path)
    added = subprocess.run(
        [sys.executable, "-m", "hamimig", "--sim", str(sim_path), "sim", "fault", "add",
         "--op", "cdi.write", "--error", "EIO"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    try:
        backend.file_op(FileOpName.CDI_WRITE, lambda: None)
    except OSError as exc:
        assert exc.filename == "<simulated fault on cdi.write>"
    else:
        raise AssertionError("the fault did not fire")


def test_fault_add_help_lists_every_file_op(cli: Cli) -> None:
    ran = cli("sim", "fault", "add", "--help")
    assert ran.exit_code == 0
    text = " ".join(ran.stdout.split())
    for op in FileOpName:
        assert op.value in text, op.value


def test_no_read_only_call_changes_the_state_it_is_given(
    cli: Cli, sim_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process reuses the node it parsed while the file's text is unchanged; that is sound
    only if a call that does not write the node back never changes it. Every read-only call of
    the simulated module runs here with the check on (a changed state raises)."""
    monkeypatch.setattr(state_module, "CHECK_READS", True)
    gpu1 = cli.json("list").json()["gpus"][1]["uuid"]
    for args in (
        ["sim", "create", "--gpu", "1", "--profile", "1g.10gb", "--placement", "6"],
        ["sim", "create", "--gpu", "1", "--profile", "2g.20gb", "--placement", "0", "--no-ci"],
        ["allocate", "--pod", "ns/a", "--gpu", "0", "--profile", "3g.40gb"],
        ["allocate", "--pod", "ns/b", "--gpu", gpu1, "--profile", "1g.10gb", "--placement", "4"],
        ["release", "--pod", "ns/b"],
    ):
        assert cli.json(*args).exit_code == 0, args
    mig = cli.json("list").json()["instances"][0]["migUUID"]
    for args in (
        ["list"],
        ["show", mig],
        ["profiles"],
        ["profiles", "--gpu", gpu1],
        ["doctor"],
        ["metrics"],
        ["recover", "--assume-no-pods", "--dry-run"],
        ["reconcile"],
    ):
        assert cli.json(*args).exit_code in (0, 1), args
    _every_read_directly(sim_path)
    called = set(sim_state(sim_path)["calls"])
    functions = {v: k for k, v in reversed(list(vars(SimNvml).items())) if k.startswith("nvml")}
    reads = set(functions.values()) - WRITES  # an alias (`…V`, `…_v2`) counts as its original
    assert reads - called == set()


def _every_read_directly(sim_path: Path) -> None:
    """The read-only calls no command makes, made with the arguments NVML takes."""
    import ctypes

    nv = SimNvml(SimStore(sim_path))
    nv.nvmlInit()
    try:
        gpu = nv.nvmlDeviceGetHandleByIndex(1)
        nv.nvmlDeviceGetHandleByUUID(nv.nvmlDeviceGetUUID(gpu))
        nv.nvmlDeviceGetIndex(gpu)
        nv.nvmlDeviceGetGpuInstanceProfileInfoById(gpu, 19)
        nv.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 19)
        count = ctypes.c_uint(8)
        gis = (nv.c_nvmlGpuInstance_t * 8)()
        nv.nvmlDeviceGetGpuInstances(gpu, 19, gis, ctypes.byref(count))
        gi = nv.nvmlDeviceGetGpuInstanceById(gpu, nv.nvmlGpuInstanceGetInfo(gis[0]).id)
        nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0)
        cis = (nv.c_nvmlComputeInstance_t * 8)()
        count.value = 8
        nv.nvmlGpuInstanceGetComputeInstances(gi, 0, cis, ctypes.byref(count))
        ci_id = nv.nvmlComputeInstanceGetInfo(cis[0]).id
        nv.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
        nv.nvmlDeviceGetMaxMigDeviceCount(gpu)
        mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        nv.nvmlDeviceIsMigDeviceHandle(mig)
        nv.nvmlDeviceGetGpuInstanceId(mig)
        nv.nvmlDeviceGetComputeInstanceId(mig)
        nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        nv.nvmlDeviceGetComputeRunningProcesses(mig)
    finally:
        nv.nvmlShutdown()


@pytest.mark.parametrize("lock_file", [True, False], ids=["lock-file", "no-lock-file"])
def test_a_node_in_a_read_only_directory_serves_the_commands_that_only_read(
    lock_file: bool,
) -> None:
    """Reads take the lock through the lock file opened read-only (flock needs no write
    access), or go without it where there is none (the node file is replaced by atomic
    rename, so a read sees one whole version); a write still fails, at exit 4. Run as another
    user when the tests run as root, whom a mode 0555 does not stop."""
    import shutil
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="hamimig-ro-"))  # reachable by that other user
    try:
        home.chmod(0o755)
        node = home / "ro" / "node.json"
        node.parent.mkdir(mode=0o755)
        assert Cli(node, home / "state", home / "cdi")("sim", "init", "--model",
            "H100-SXM5-80GB").exit_code == 0  # fmt: skip
        lock = node_dir(node) / "node.lock"
        if not lock_file:
            lock.unlink()
        node.parent.chmod(0o555)
        as_user: list[str] = []
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                pytest.skip("runs as root, and setpriv (to run as another user) is missing")
            as_user = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*as_user, sys.executable, "-m", "hamimig", "--sim", str(node), *args],
                capture_output=True, text=True, timeout=120, cwd=home, check=False,
                env={k: v for k, v in os.environ.items() if not k.startswith("HAMIMIG_")},
            )  # fmt: skip

        before = _stamp(node)
        for args in (["list"], ["profiles"], ["metrics"], ["sim", "show"]):
            ran = run(*args)
            assert ran.returncode == 0, (args, ran.stderr)
            assert ran.stderr == "", (args, ran.stderr)
        assert _stamp(node) == before and lock.exists() == lock_file
        ran = run("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0")
        assert ran.returncode == 4, ran.stderr
        assert ran.stderr.startswith("hamimig: error: ") and "Traceback" not in ran.stderr
        assert _stamp(node) == before
    finally:
        node.parent.chmod(0o755)
        shutil.rmtree(home, ignore_errors=True)
