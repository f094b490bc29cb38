"""Busy means what HAMi means: compute, graphics and MPS compute processes all hold an instance.

NVML lists each kind with its own call. A graphics or MPS list that NVML does not offer
(NOT_SUPPORTED, e.g. a MIG device without graphics; FUNCTION_NOT_FOUND, a driver or bindings
without the call) means no process of that kind; any other failure of any list counts as busy,
so an Idle instance is then neither reused nor reclaimed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hamimig.engine.facts import BUSY
from hamimig.errors import NvmlError
from hamimig.hw.nvml import NvmlHardware
from hamimig.hw.types import Placement
from hamimig.rehearsal.simulator import sim_busy
from hamimig.sim.ops import BusyKind
from hamimig.sim.state import SimStore
from tests.support.cli import Cli, alloc, allocate, allocated, idle, ok, refused, sim
from tests.support.node import live
from tests.support.nvml import older_bindings
from tests.support.records import ext
from tests.support.unchanged import Unchanged

COMPUTE = "nvmlDeviceGetComputeRunningProcesses"
GRAPHICS = "nvmlDeviceGetGraphicsRunningProcesses"
MPS = "nvmlDeviceGetMPSComputeRunningProcesses"
KINDS = ["compute", "graphics", "mps"]


def busy(cli: Cli, mig: str, kind: str) -> None:
    sim(cli, "busy", "--mig-uuid", mig, "--kind", kind)


def sticky_fault(cli: Cli, op: str, error: str) -> None:
    """A fault on every call of `op` (100 of them) until `sim fault clear`."""
    sim(cli, "fault", "add", "--op", op, "--error", error, "--times", "100")


def fired(cli: Cli, op: str) -> int:
    """How often the sticky fault on `op` fired so far."""
    left = [f["times"] for f in sim(cli, "show")["faults"] if f["op"] == op]
    return 100 - (left[0] if left else 0)


def busy_marks(cli: Cli, mig: str) -> list[str]:
    for gpu in sim(cli, "show")["gpus"]:
        for gi in gpu["gpuInstances"]:
            for ci in gi["computeInstances"]:
                if ci["migUUID"] == mig:
                    marks: list[str] = ci["busy"]
                    return marks
    raise AssertionError(f"{mig} is not on the simulated node")


def assert_held(cli: Cli, loud: str, quiet: str) -> None:
    """`loud` (Idle, at placement 1) is busy: allocation at its slices is refused, reclaim
    refuses it by name and skips it among all Idle ones; `quiet` (at 0) is reclaimed."""
    before = Unchanged(cli)
    message = refused(alloc(cli, "ns/new", "1g.10gb", "1"), 3, "conflict")
    assert loud in message and "busy" in message
    message = refused(cli.json("reclaim", "--mig-uuid", loud), 3, "conflict")
    assert loud in message and "busy" in message
    before.check()
    data = ok(cli.json("reclaim", "--gpu", "0", "--all-idle"))
    assert [i["migUUID"] for i in data["reclaimed"]] == [quiet]
    assert data["skipped"] == [{"migUUID": loud, "reason": BUSY}]
    assert [m for _, _, m in live(cli)] == [loud]
    assert ext(cli, loud)["state"] == "Idle"


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_process_holds_an_idle_instance(cli: Cli, kind: str) -> None:
    quiet = idle(cli, "ns/a", "1g.10gb", "0")
    loud = idle(cli, "ns/b", "1g.10gb", "1")
    busy(cli, loud, kind)
    assert busy_marks(cli, loud) == [kind]
    assert_held(cli, loud, quiet)


@pytest.mark.parametrize("kind", ["graphics", "mps"])
def test_allocate_without_placement_passes_over_an_instance_busy_with_kind(
    cli: Cli, kind: str
) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "2")
    busy(cli, mig, kind)
    data = allocate(cli, "ns/new", "1g.10gb")
    assert (data["created"], data["reused"]) == (True, False)
    assert data["instance"]["migUUID"] != mig
    assert ext(cli, mig)["state"] == "Idle"


@pytest.mark.parametrize("op", [GRAPHICS, MPS])
@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "FUNCTION_NOT_FOUND"])
def test_a_process_list_nvml_does_not_offer_means_none_of_that_kind(
    cli: Cli, op: str, error: str
) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "2")
    sticky_fault(cli, op, error)
    data = allocate(cli, "ns/new", "1g.10gb", "2")
    assert (data["reused"], data["instance"]["migUUID"]) == (True, mig)
    ok(cli.json("release", "--mig-uuid", mig))
    data = ok(cli.json("reclaim", "--mig-uuid", mig))
    assert [i["migUUID"] for i in data["reclaimed"]] == [mig]
    assert live(cli) == []
    assert fired(cli, op) >= 2  # the list was asked for, and refused, both times


@pytest.mark.parametrize("op", [GRAPHICS, MPS])
def test_any_other_failure_of_a_process_list_counts_as_busy(cli: Cli, op: str) -> None:
    quiet = idle(cli, "ns/a", "1g.10gb", "0")
    loud = idle(cli, "ns/b", "1g.10gb", "1")
    sticky_fault(cli, op, "UNKNOWN")
    # The fault fires on every instance's query; `quiet` is shown idle by nothing then either.
    before = Unchanged(cli)
    message = refused(cli.json("reclaim", "--mig-uuid", loud), 3, "conflict")
    assert loud in message and "busy" in message
    data = ok(cli.json("reclaim", "--gpu", "0", "--all-idle"))
    assert data["reclaimed"] == []
    assert sorted(s["migUUID"] for s in data["skipped"]) == sorted([quiet, loud])
    before.check()
    assert fired(cli, op) >= 3
    sim(cli, "fault", "clear")
    busy(cli, loud, "compute")  # the same instance, now busy for real: the same outcome
    assert_held(cli, loud, quiet)


def test_the_compute_list_is_never_optional(cli: Cli) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "2")
    sticky_fault(cli, COMPUTE, "FUNCTION_NOT_FOUND")
    message = refused(cli.json("reclaim", "--mig-uuid", mig), 3, "conflict")
    assert "busy" in message
    data = allocate(cli, "ns/new", "1g.10gb")
    assert data["reused"] is False and data["instance"]["migUUID"] != mig


def test_list_and_show_count_every_kind(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    quiet = allocated(cli, "ns/q", "1g.10gb", "1")
    for kind in KINDS:
        busy(cli, mig, kind)
    listed = ok(cli.json("list"))["instances"]
    counted = {i["migUUID"]: (i["processes"], i["processCount"]) for i in listed}
    assert counted == {mig: (True, 3), quiet: (False, 0)}
    shown = ok(cli.json("show", mig))
    assert (shown["processes"], shown["processCount"]) == (True, 3)
    # A list NVML does not offer counts none; the others still count.
    sticky_fault(cli, GRAPHICS, "NOT_SUPPORTED")
    shown = ok(cli.json("show", mig))
    assert (shown["processes"], shown["processCount"]) == (True, 2)
    # Any other failure: NVML cannot say.
    sim(cli, "fault", "clear")
    sticky_fault(cli, MPS, "UNKNOWN")
    shown = ok(cli.json("show", mig))
    assert (shown["processes"], shown["processCount"]) == (None, None)


def test_sim_busy_marks_and_clears_each_kind(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    sim(cli, "busy", "--mig-uuid", mig)  # no kind: compute
    busy(cli, mig, "mps")
    busy(cli, mig, "graphics")
    assert busy_marks(cli, mig) == KINDS
    table = cli("sim", "show").stdout
    assert "compute processes, graphics processes, mps processes" in table
    sim(cli, "busy", "--mig-uuid", mig, "--kind", "graphics", "--clear")
    assert busy_marks(cli, mig) == ["compute", "mps"]
    sim(cli, "busy", "--mig-uuid", mig, "--clear")
    assert busy_marks(cli, mig) == []
    message = refused(
        cli.json("sim", "busy", "--mig-uuid", mig, "--gi-only", "--kind", "mps"), 2, "usage"
    )
    assert "--kind" in message
    assert cli("sim", "busy", "--mig-uuid", mig, "--kind", "opengl").exit_code == 2


def _stored_cis(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        ci for gpu in doc["gpus"] for gi in gpu["gpuInstances"] for ci in gi["computeInstances"]
    ]


def _rewrite_busy(path: Path, mig: str, mark: Any) -> None:
    """Edit the node file as an older hamimig wrote it (or a hand edit)."""
    doc = json.loads(path.read_text())
    for ci in _stored_cis(doc):
        if ci["migUUID"] == mig:
            ci["busy"] = mark
    path.write_text(json.dumps(doc))


def _stored_busy(path: Path, mig: str) -> Any:
    return next(
        ci["busy"] for ci in _stored_cis(json.loads(path.read_text())) if ci["migUUID"] == mig
    )


def test_a_node_file_from_before_kinds_still_reads(cli: Cli) -> None:
    quiet = idle(cli, "ns/a", "1g.10gb", "0")
    loud = idle(cli, "ns/b", "1g.10gb", "1")
    _rewrite_busy(cli.sim, loud, True)  # the boolean mark of older files: compute
    _rewrite_busy(cli.sim, quiet, False)
    assert (busy_marks(cli, loud), busy_marks(cli, quiet)) == (["compute"], [])
    message = refused(cli.json("reclaim", "--mig-uuid", loud), 3, "conflict")
    assert loud in message and "busy" in message
    sim(cli, "fault", "clear")  # a write: the file now holds the marks as lists
    assert _stored_busy(cli.sim, loud) == ["compute"]
    assert_held(cli, loud, quiet)
    _rewrite_busy(cli.sim, loud, ["opengl"])
    message = refused(cli.json("sim", "show"), 2, "usage")
    assert str(cli.sim) in message and "malformed" in message and "opengl" in message


# --- the adapter over bindings that lack a call ------------------------------------------------


def _over(store: SimStore, lacking: tuple[str, ...]) -> NvmlHardware:
    assert store.files is not None
    hw = NvmlHardware(older_bindings(store, lacking), store.files.mig_minors)
    hw.open()
    return hw


def test_bindings_without_the_graphics_and_mps_calls_see_none_of_those_kinds(
    sim_path: Path,
) -> None:
    store = SimStore(sim_path)
    hw = _over(store, (GRAPHICS, MPS))
    made = hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(0, 1)))
    sim_busy(sim_path, made.mig_uuid, False, False, BusyKind.GRAPHICS)
    sim_busy(sim_path, made.mig_uuid, False, False, BusyKind.MPS)
    assert hw.instance_process_count(made.mig_uuid) == 0
    assert hw.gpu_has_processes(0) is False
    sim_busy(sim_path, made.mig_uuid, False, False, BusyKind.COMPUTE)
    assert hw.instance_process_count(made.mig_uuid) == 1
    assert hw.gpu_has_processes(0) is True
    hw.close()
    # Bindings with every call see all three.
    full = _over(store, ())
    assert full.instance_process_count(made.mig_uuid) == 3
    full.close()


def test_bindings_without_the_compute_call_cannot_show_anything_idle(sim_path: Path) -> None:
    store = SimStore(sim_path)
    hw = _over(store, (COMPUTE,))
    made = hw.create_compute_instance(0, hw.create_gpu_instance(0, 19, Placement(0, 1)))
    with pytest.raises(NvmlError) as err:
        hw.instance_process_count(made.mig_uuid)
    assert (err.value.call, err.value.name) == (COMPUTE, "FUNCTION_NOT_FOUND")
    hw.close()
