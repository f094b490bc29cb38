"""Drivers before R470 name a MIG device `MIG-GPU-<gpu uuid>/<gi>/<ci>`.

Records, lookups and pod annotations accept that form as well as `MIG-<uuid>` (docs/formats.md
"MIG UUIDs"). A simulated node made with `sim init --driver-version` before 470 names its
instances that way, so these run the old form through the CLI: a pod whose annotation names an
instance in it holds that instance, matched by identity and without regard to case.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli, idle, instances, ok, refused, state_of
from tests.support.pods import PodsFile, entry, kube_pod

OLD_DRIVER = "460.91.03"
OLD_FORM = re.compile(r"MIG-GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}/[0-9]+/[0-9]+")
ALLOCATE = ["allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb"]


@pytest.fixture
def old(tmp_path: Path) -> Cli:
    """A node whose driver predates R470, made as an operator would."""
    cli = Cli(tmp_path / "old" / "node.json", tmp_path / "state", tmp_path / "cdi")
    args = ("sim", "init", "--model", "H100-SXM5-80GB", "--driver-version", OLD_DRIVER)
    ok(cli.json(*args))
    return cli


def instance(cli: Cli, mig: str) -> dict[str, Any]:
    [found] = [i for i in instances(cli) if i["migUUID"] == mig]
    return found


def test_an_old_driver_names_instances_by_their_place(old: Cli) -> None:
    mig = idle(old, "ns/a", "1g.10gb", "0")
    inst = instance(old, mig)
    assert OLD_FORM.fullmatch(mig), mig
    assert mig == f"MIG-{inst['gpuUUID']}/{inst['gpuInstanceID']}/{inst['computeInstanceID']}"
    assert "predates R470" in old("doctor").stdout


def test_a_driver_version_that_is_not_one_is_refused(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "node.json", tmp_path / "state", tmp_path / "cdi")
    args = ("sim", "init", "--model", "H100-SXM5-80GB", "--driver-version", "R460")
    assert "the driver version 'R460' is not one" in refused(cli.json(*args), 2, "usage")


@pytest.mark.parametrize("spelling", [str, str.upper], ids=["as-printed", "upper-case"])
def test_an_annotation_in_the_old_form_holds_the_instance(
    old: Cli, pods_file: PodsFile, spelling: Any
) -> None:
    mig = idle(old, "ns/old", "1g.10gb", "0")
    # Another slot in the entry: the instance is held because the annotation names it.
    named = entry(instance(old, mig), migUUID=spelling(mig), placement={"start": 5, "size": 1})
    pods = pods_file(kube_pod("ns/holder", [named]))
    message = refused(old.json("reclaim", "--mig-uuid", mig, "--pods", pods), 3, "conflict")
    assert "held by pod ns/holder" in message
    message = refused(old.json(*ALLOCATE, "--placement", "0", "--pods", pods), 3, "conflict")
    assert "held by pod ns/holder" in message
    reclaimed = ok(old.json("reclaim", "--gpu", "0", "--all-idle", "--pods", pods))
    assert [s["migUUID"] for s in reclaimed["skipped"]] == [mig]
    fresh = ok(old.json(*ALLOCATE, "--pods", pods))["instance"]["migUUID"]
    assert fresh != mig and OLD_FORM.fullmatch(fresh)
    assert state_of(old, mig) == "Idle"


@pytest.mark.parametrize("spelling", [str, str.upper], ids=["as-printed", "upper-case"])
def test_recover_restores_an_instance_an_old_form_annotation_names(
    old: Cli, pods_file: PodsFile, spelling: Any
) -> None:
    mig = idle(old, "ns/old", "1g.10gb", "0")
    held = kube_pod("ns/holder", [entry(instance(old, mig), migUUID=spelling(mig))])
    pods = pods_file(held)
    data = ok(old.json("recover", "--pods", pods))
    [action] = [a for a in data["actions"] if a["migUUID"] == mig]
    assert action["action"] == "restore-active", action
    inst = instance(old, mig)
    assert inst["state"] == "Active"
    assert (inst["owner"]["namespace"], inst["owner"]["name"]) == ("ns", "holder")
    # Run again: the instance is the pod's and stays so.
    again = ok(old.json("recover", "--pods", pods))
    assert [a["action"] for a in again["actions"] if a["migUUID"] == mig] == ["restore-active"]
    assert state_of(old, mig) == "Active"


@pytest.mark.parametrize("spelling", [str, str.upper], ids=["as-printed", "upper-case"])
def test_reconcile_keeps_an_instance_an_old_form_annotation_names(
    old: Cli, pods_file: PodsFile, spelling: Any
) -> None:
    """Its recorded owner is gone, but a pod names it: it is held, not released."""
    mig = ok(old.json(*ALLOCATE))["instance"]["migUUID"]
    held = kube_pod("ns/holder", [entry(instance(old, mig), migUUID=spelling(mig))])
    data = ok(old.json("reconcile", "--pods", pods_file(held)))
    assert [a for a in data["actions"] if a["migUUID"] == mig] == []
    assert state_of(old, mig) == "Active"


def test_a_record_whose_mig_uuid_ends_in_a_newline_is_not_read(cli: Cli) -> None:
    """`MIG-<uuid>\\n` is not what a driver prints (a pattern's `$` would let it through)."""
    from tests.support.records import hami_record, record_path

    mig = idle(cli, "ns/a", "1g.10gb", "0")
    inst = dict(instance(cli, mig), migUUID=mig + "\n")
    record_path(cli, mig).unlink()
    hami_record(cli, inst)
    listed = ok(cli.json("list"))
    assert [i["state"] for i in listed["instances"]] == ["Unmanaged"]
    assert any("is not a MIG UUID" in str(w) for w in listed["warnings"]), listed["warnings"]


@pytest.mark.parametrize(
    "cut",
    [
        lambda mig: mig[: len("MIG-GPU-") + 8],  # 8 hex digits, all of them the GPU's
        lambda mig: mig.rsplit("/", 2)[0] + "/1",  # a GI that is not there (/13 begins /1)
        lambda mig: mig.rsplit("/", 1)[0],  # the GI without its CI
    ],
    ids=["gpu-digits", "gi-digit", "no-ci"],
)
def test_a_change_needs_an_old_form_uuid_whole(old: Cli, cut: Any) -> None:
    """Every instance on a GPU shares an old-form UUID's hex digits, so no prefix of one tells
    them apart: a command that changes something takes it whole (a prefix once released and
    reclaimed the GPU's one instance, named by the GPU's digits or by a GI that is not there)."""
    mig = allocated_at(old, "6")
    text = cut(mig)
    for args in (
        ["release", "--mig-uuid", text],
        ["reclaim", "--mig-uuid", text, "--assume-no-pods"],
        ["forget", text],
    ):
        message = refused(old.json(*args), 2, "usage")
        assert "whole MIG-GPU-<GPU UUID>/<GI>/<CI>" in message, message
    assert state_of(old, mig) == "Active"
    assert ok(old.json("show", text))["migUUID"] == mig  # reading may still use a prefix


def test_an_old_form_uuid_in_capitals_names_that_instance_only(old: Cli) -> None:
    mig = allocated_at(old, "6")
    other = allocated_at(old, "1", "ns/other")
    released = ok(old.json("release", "--mig-uuid", mig.upper()))
    assert [i["migUUID"] for i in released["released"]] == [mig]
    assert state_of(old, other) == "Active"


def allocated_at(cli: Cli, placement: str, pod: str = "ns/a") -> str:
    args = [*ALLOCATE[:1], "--pod", pod, *ALLOCATE[3:], "--placement", placement]
    mig: str = ok(cli.json(*args, "--assume-no-pods"))["instance"]["migUUID"]
    return mig
