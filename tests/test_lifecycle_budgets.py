"""NVML call budgets of one `hamimig allocate` (docs/performance.md).

Counted by the simulated node (`calls`: one count per pynvml function since `sim init`), with
nvmlInit and nvmlShutdown left out, around exactly one CLI allocate:

- a reuse verifies the one instance it hands out (11 calls: its identity, and that its compute
  instance spans its GPU instance, since one GPU instance is one tenant), and that no process
  runs on it (3 calls: compute, graphics and MPS processes, as HAMi counts busy), and reads the
  GPU's MIG mode (1 call: a pending change is warned of), in at most 15 calls, none of them
  mutating
  (no nvml*Create*/nvml*Destroy*), and never scans the node's layout (no
  nvmlDeviceGetGpuInstances, no nvmlDeviceGetMigDeviceHandleByIndex);
- a create on a GPU that already holds 6 instances stays under 80 calls;
- neither grows with the number of GPUs on the node: a 1-GPU and an 8-GPU node give identical
  counts, call by call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hamimig.rehearsal.simulator import sim_init
from tests.support.cli import Cli, allocate
from tests.support.nvml import CREATE_CI, CREATE_GI, call_diff, calls, mutating

REUSE_BUDGET = 15
PROCESS_LISTS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
)
CREATE_BUDGET = 80  # strictly under
SPAN_CHECK = "nvmlDeviceGetAttributes"
"""A MIG device's own profile: whether its compute instance spans its GPU instance."""
LAYOUT_SCAN = ("nvmlDeviceGetGpuInstances", "nvmlDeviceGetMigDeviceHandleByIndex")


def node(tmp_path: Path, gpus: int, model: str = "H100-SXM5-80GB") -> Cli:
    sim = tmp_path / f"sim{gpus}" / "node.json"
    sim_init(sim, model, gpus)
    return Cli(sim, tmp_path / f"state{gpus}", tmp_path / f"cdi{gpus}")


def measured(cli: Cli, pod: str, placement: str, gpu: str = "0") -> tuple[dict[str, Any], Any]:
    """One allocate and the NVML calls it made, by function (init/shutdown left out)."""
    before = calls(cli)
    data = allocate(cli, pod, "1g.10gb", placement, gpu)
    return data, call_diff(before, calls(cli))


def create_then_reuse(cli: Cli, gpu: str = "0") -> tuple[dict[str, int], dict[str, int]]:
    """Calls of two allocates on a GPU holding six 1g.10gb (0..5) allocated to other pods:
    a create of a 1g.10gb at 6, then, after its pod released it, its reuse by another pod."""
    for start in range(6):
        allocate(cli, f"ns/other{start}", "1g.10gb", str(start), gpu)
    data, create = measured(cli, "ns/first", "6", gpu)
    assert (data["created"], data["reused"], data["reclaimed"]) == (True, False, [])
    assert data["instance"]["placement"] == {"start": 6, "size": 1}
    assert data["instance"]["gpuIndex"] == int(gpu)
    mig = data["instance"]["migUUID"]
    assert cli.json("release", "--pod", "ns/first").exit_code == 0
    data, reuse = measured(cli, "ns/second", "6", gpu)
    assert (data["created"], data["reused"]) == (False, True)
    assert data["instance"]["migUUID"] == mig
    return create, reuse


@pytest.fixture(scope="module")
def counted(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """(create, reuse) counts on GPU 0 of a 1-GPU node, and on GPU 0 and GPU 7 of 8-GPU nodes."""
    return {
        "1": create_then_reuse(node(tmp_path_factory.mktemp("one"), 1)),
        "8": create_then_reuse(node(tmp_path_factory.mktemp("eight"), 8)),
        "8@7": create_then_reuse(node(tmp_path_factory.mktemp("eight-last"), 8), gpu="7"),
    }


Counted = dict[str, tuple[dict[str, int], dict[str, int]]]
WHERE = ["1", "8", "8@7"]


@pytest.mark.parametrize("where", WHERE)
def test_reuse_budget(counted: Counted, where: str) -> None:
    reuse = counted[where][1]
    assert mutating(reuse) == {}
    assert [n for n in LAYOUT_SCAN if n in reuse] == []
    assert sum(reuse.values()) <= REUSE_BUDGET, reuse
    assert {n: reuse.get(n) for n in PROCESS_LISTS} == dict.fromkeys(PROCESS_LISTS, 1)
    assert reuse[SPAN_CHECK] == 1  # its compute instance spans its GPU instance


@pytest.mark.parametrize("where", WHERE)
def test_a_layout_scan_checks_each_mig_device_once_for_its_span(
    counted: Counted, where: str
) -> None:
    """docs/design.md "One GPU instance is one tenant": the create scanned six MIG devices."""
    assert counted[where][0][SPAN_CHECK] == 6


def test_reuse_counts_do_not_grow_with_the_number_of_gpus(counted: Counted) -> None:
    assert counted["8"][1] == counted["1"][1]
    assert counted["8@7"][1] == counted["1"][1]  # nor with the GPU's position among them


@pytest.mark.parametrize("where", WHERE)
def test_create_makes_exactly_one_gi_and_one_ci(counted: Counted, where: str) -> None:
    assert mutating(counted[where][0]) == {CREATE_GI: 1, CREATE_CI: 1}


@pytest.mark.parametrize("where", WHERE)
def test_create_budget_next_to_six_instances(counted: Counted, where: str) -> None:
    create = counted[where][0]
    assert sum(create.values()) < CREATE_BUDGET, (sum(create.values()), create)


def test_create_counts_do_not_grow_with_the_number_of_gpus(counted: Counted) -> None:
    assert counted["8"][0] == counted["1"][0]
    assert counted["8@7"][0] == counted["1"][0]
