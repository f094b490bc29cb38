"""Several processes on one simulated node see each other's changes, and the node's file lock
keeps concurrent NVML calls consistent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hamimig.hw.nvml import NvmlHardware
from hamimig.hw.types import Placement
from tests.support.cli import run_hamimig
from tests.support.node import open_hw, sim_state
from tests.support.processes import REPO_ROOT, run_python

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

CREATE_BODY = """
gpu, profile_id, start, size = (int(a) for a in sys.argv[2:6])
gi = hw.create_gpu_instance(gpu, profile_id, Placement(start, size))
ci = hw.create_compute_instance(gpu, gi)
print(gi, ci.id, ci.mig_uuid, flush=True)
hw.close()
"""

# Waits at a barrier (ready file, then go file) so the creates really run at the same time.
RACE_BODY = """
ready, go = Path(sys.argv[3]), Path(sys.argv[4])
start = int(sys.argv[2])
hw.gpu(0)
ready.touch()
import time
while not go.exists():
    time.sleep(0.002)
gi = hw.create_gpu_instance(0, 19, Placement(start, 1))
ci = hw.create_compute_instance(0, gi)
print(start, gi, ci.id, ci.mig_uuid, flush=True)
hw.close()
"""


@pytest.mark.slow
def test_parent_sees_a_subprocess_adapter_create(hw: NvmlHardware, sim_path: Path) -> None:
    assert hw.layout(1) == ()
    ran = run_python(ADAPTER_SCRIPT + CREATE_BODY, str(sim_path), "1", "14", "2", "2")
    assert ran.returncode == 0, ran.stderr
    gi_id, ci_id, mig_uuid = ran.stdout.split()
    (gi,) = hw.layout(1)  # the same, still open adapter
    assert (gi.id, gi.profile_id, gi.placement) == (int(gi_id), 14, Placement(2, 2))
    assert [(c.id, c.mig_uuid) for c in gi.compute_instances] == [(int(ci_id), mig_uuid)]
    device = hw.mig_device(mig_uuid)
    assert device is not None and device.gpu_minor == 1


@pytest.mark.slow
def test_parent_sees_a_subprocess_cli_create(hw: NvmlHardware, sim_path: Path) -> None:
    ran = run_hamimig(
        "--sim",
        str(sim_path),
        "-o",
        "json",
        "sim",
        "create",
        "--gpu",
        "0",
        "--profile",
        "3g.40gb",
        "--placement",
        "0",
    )
    assert ran.returncode == 0, ran.stderr
    created = json.loads(ran.stdout)["instance"]
    (gi,) = hw.layout(0)
    assert (gi.id, gi.profile_id, gi.placement) == (1, 9, Placement(0, 4))
    assert gi.compute_instances[0].mig_uuid == created["migUUID"]


@pytest.mark.slow
def test_subprocess_sees_the_parents_changes(hw: NvmlHardware, sim_path: Path) -> None:
    ci = hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(6, 1)))
    orphan = hw.create_gpu_instance(1, 5, Placement(0, 4))
    ran = run_hamimig("--sim", str(sim_path), "-o", "json", "list")
    assert ran.returncode == 0, ran.stderr
    rows = sorted(
        (i["gpuIndex"], i["gpuInstanceID"], i["migUUID"], i["state"])
        for i in json.loads(ran.stdout)["instances"]
    )
    assert rows == [(0, 13, ci.mig_uuid, "Unmanaged"), (1, orphan, None, "OrphanGI")]
    # ... and a change by the parent after that is seen by the next process too.
    hw.destroy_compute_instance(0, 13, ci.id)
    hw.destroy_gpu_instance(0, 13)
    body = "print([g.id for g in hw.layout(0)], [g.id for g in hw.layout(1)])\n"
    again = run_python(ADAPTER_SCRIPT + body, str(sim_path))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"[] [{orphan}]"


@pytest.mark.slow
def test_two_open_adapters_in_one_process_share_the_node(sim_path: Path) -> None:
    a, b = open_hw(sim_path), open_hw(sim_path)
    try:
        ci = a.create_compute_instance(0, a.create_gpu_instance(0, 19, Placement(0, 1)))
        assert [c.mig_uuid for g in b.layout(0) for c in g.compute_instances] == [ci.mig_uuid]
        b.destroy_compute_instance(0, 7, ci.id)
        assert a.mig_device(ci.mig_uuid) is None
    finally:
        a.close()
        b.close()


def race(sim_path: Path, tmp_path: Path, body: str, args: list[str]) -> list[tuple[int, str]]:
    """Start one racer per argument, release them together, return (status, stdout) each."""
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{n}" for n in range(len(args))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ADAPTER_SCRIPT + body, str(sim_path), arg, str(r), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        for arg, r in zip(args, ready, strict=True)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in ready):
            assert time.monotonic() < deadline, "the racers never got ready"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        go.touch()
        results = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(not err for _, err in results), [err for _, err in results]
    return [(p.returncode, out) for p, (out, _) in zip(procs, results, strict=True)]


@pytest.mark.slow
def test_concurrent_creates_all_land(sim_path: Path, tmp_path: Path) -> None:
    results = race(sim_path, tmp_path, RACE_BODY, ["0", "2", "4", "6"])
    assert [status for status, _ in results] == [0, 0, 0, 0]
    lines = sorted(tuple(out.split()) for _, out in results)
    assert [(int(s), int(g), int(c)) for s, g, c, _ in lines] == [
        (0, 7, 0),
        (2, 9, 0),
        (4, 11, 0),
        (6, 13, 0),
    ]
    state = sim_state(sim_path)
    gis = state["gpus"][0]["gpuInstances"]
    assert [(gi["id"], gi["placement"]["start"]) for gi in gis] == [
        (7, 0),
        (9, 2),
        (11, 4),
        (13, 6),
    ]
    stored = {gi["computeInstances"][0]["migUUID"] for gi in gis}
    assert stored == {line[3] for line in lines}
    assert len(stored) == 4
    # Every call of every racer was counted: no read-modify-write was lost.
    counted = state["calls"]
    assert counted["nvmlDeviceCreateGpuInstanceWithPlacement"] == 4
    assert counted["nvmlGpuInstanceCreateComputeInstance"] == 4
    assert (counted["nvmlInit"], counted["nvmlShutdown"]) == (4, 4)
    hw = open_hw(sim_path)
    try:
        assert [len(g.compute_instances) for g in hw.layout(0)] == [1, 1, 1, 1]
    finally:
        hw.close()


ONE_SLOT_BODY = RACE_BODY.replace(
    "gi = hw.create_gpu_instance(0, 19, Placement(start, 1))",
    """try:
    gi = hw.create_gpu_instance(0, 19, Placement(3, 1))
except Exception as exc:
    print("lost", exc.name, flush=True)
    raise SystemExit(0)""",
)


@pytest.mark.slow
def test_concurrent_creates_on_one_slot_one_wins(sim_path: Path, tmp_path: Path) -> None:
    results = race(sim_path, tmp_path, ONE_SLOT_BODY, ["0", "1", "2"])
    assert [status for status, _ in results] == [0, 0, 0]
    outs = [out.strip() for _, out in results]
    lost = [o for o in outs if o.startswith("lost")]
    won = [o.split() for o in outs if not o.startswith("lost")]
    assert lost == ["lost INSUFFICIENT_RESOURCES"] * 2
    assert len(won) == 1 and won[0][1:3] == ["10", "0"]
    assert [gi["id"] for gi in sim_state(sim_path)["gpus"][0]["gpuInstances"]] == [10]
