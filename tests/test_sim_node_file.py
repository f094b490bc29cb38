"""The simulated node's file as its models declare it: written byte for byte as it always was,
and read as strictly as hamimig's own files (a hand-edited value of the wrong JSON type is a
malformed node, never silently converted)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hamimig.sim.state import SimStore
from tests.support.cli import Cli, ok, refused

Edit = Callable[[dict[str, Any]], object]


def _gi(doc: dict[str, Any]) -> dict[str, Any]:
    gi: dict[str, Any] = doc["gpus"][0]["gpuInstances"][0]
    return gi


def _edit(path: Path, edit: Edit) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc)
    path.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")


def test_a_rewrite_of_the_node_keeps_its_bytes(cli: Cli) -> None:
    """Every optional key (heldFor, clockOffsetSeconds, home, a fault's null gpu, busy kinds in
    their order) comes back as it was written: loading and saving changes nothing."""
    mig = ok(cli.json("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0"))
    uuid = mig["instance"]["migUUID"]
    for args in (["--kind", "mps"], ["--kind", "compute"], ["--gi-only"]):
        ok(cli.json("sim", "busy", "--mig-uuid", uuid, *args))
    ok(cli.json("sim", "fault", "add", "--op", "cdi.write"))
    ok(cli.json("sim", "fault", "add", "--op", "nvmlInit", "--error", "nvml_error_in_use"))
    ok(cli.json("sim", "clock", "--advance", "90s"))
    before = cli.sim.read_bytes()
    with SimStore(cli.sim).edit():
        pass
    assert cli.sim.read_bytes() == before
    ci = _gi(json.loads(before))["computeInstances"][0]
    assert ci["busy"] == ["compute", "mps"]


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda doc: _gi(doc)["placement"].update(start="0"), "placement.start"),
        (lambda doc: _gi(doc).update(id=7.0), "gpuInstances.0.id"),
        (lambda doc: doc["gpus"][0].update(minor=True), "gpus.0.minor"),
        (lambda doc: doc["calls"].update(nvmlInit="1"), "calls.nvmlInit"),
        (lambda doc: doc.update(gpus={}), "gpus"),
    ],
    ids=["string start", "float id", "bool minor", "string count", "gpus not a list"],
)
def test_a_value_of_the_wrong_json_type_is_a_malformed_node(
    cli: Cli, edit: Edit, where: str
) -> None:
    ok(cli.json("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0"))
    _edit(cli.sim, edit)
    message = refused(cli.json("list"), 2, "usage")
    assert f"{cli.sim} is malformed: " in message and where in message, message


def test_a_hand_written_fault_is_kept_as_sim_fault_add_spells_it(cli: Cli) -> None:
    """`sim fault add` takes `in_use` or `NVML_ERROR_IN_USE` for IN_USE; a fault written into
    the file by hand the same way is read as that error, not kept as an unknown name."""
    fault = {"op": "nvmlInit", "error": "nvml_error_in_use", "action": "raise"}
    _edit(cli.sim, lambda doc: doc["faults"].append({**fault, "times": 1, "skip": 0}))
    shown = ok(cli.json("sim", "show"))["faults"]
    assert [f["error"] for f in shown] == ["IN_USE"]
