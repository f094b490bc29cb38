"""A CDI spec is removed only when it is ours, by content (docs/formats.md "CDI specs").

A file at our spec name whose kind differs, that does not define exactly one device named the
instance's `mig-<sha256>`, whose `hami.io/mig-uuid` annotation names another instance, or that
cannot be parsed is kept and reported: reclaim, forget and a queued removal's retry carry a
warning, recover refuses (exit 5, nothing changed), doctor fails with a hint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hamimig.store.cdi import device_name, spec_file_name
from tests.support.cli import Cli, allocated, fault, idle, ok, refused, sim
from tests.support.unchanged import Unchanged

OTHER = "MIG-00000000-1111-2222-3333-444444444444"


def _kind(spec: dict[str, Any], mig: str) -> None:
    spec["kind"] = "example.com/other"


def _other_device(spec: dict[str, Any], mig: str) -> None:
    spec["devices"][0]["name"] = device_name(OTHER)


def _two_devices(spec: dict[str, Any], mig: str) -> None:
    second = json.loads(json.dumps(spec["devices"][0]))
    second["name"] = device_name(OTHER)
    spec["devices"].append(second)


def _annotation(spec: dict[str, Any], mig: str) -> None:
    spec["devices"][0]["annotations"] = {"hami.io/mig-uuid": OTHER}
    spec["cdiVersion"] = "0.6.0"


FOREIGN: dict[str, Callable[[dict[str, Any], str], None] | None] = {
    "kind": _kind,
    "other-device": _other_device,
    "two-devices": _two_devices,
    "annotation": _annotation,
    "unparsable": None,
}


def plant(cli: Cli, mig: str, how: str, name: str | None = None) -> Path:
    """Replace the spec of `mig` (at `name`, default its own) with foreign content."""
    source = cli.cdi_dir / spec_file_name(mig)
    path = cli.cdi_dir / (name or spec_file_name(mig))
    change = FOREIGN[how]
    if change is None:
        path.write_bytes(b'{"cdiVersion": "0.3.0", "kind": ')
    else:
        spec = json.loads(source.read_text())
        change(spec, mig)
        path.write_text(json.dumps(spec, indent=2) + "\n")
    path.chmod(0o644)
    return path


def queue_entries(cli: Cli) -> list[str]:
    path = cli.state_dir / "cdi-removal-queue.json"
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    items = doc.get("removals", doc) if isinstance(doc, dict) else doc
    return [item["migUUID"] for item in items]


CASES = sorted(FOREIGN)


@pytest.mark.parametrize("how", CASES)
def test_reclaim_keeps_a_foreign_spec_and_warns(cli: Cli, how: str) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    path = plant(cli, mig, how)
    content = path.read_bytes()
    data = ok(cli.json("reclaim", "--mig-uuid", mig))
    assert path.read_bytes() == content
    assert any(str(path) in note and "kept" in note for note in data["notes"]), data
    assert mig not in {i["migUUID"] for i in ok(cli.json("list"))["instances"]}


def test_reclaim_still_removes_our_own_spec(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    data = ok(cli.json("reclaim", "--mig-uuid", mig))
    assert not (cli.cdi_dir / spec_file_name(mig)).exists()
    assert not data.get("notes")


@pytest.mark.parametrize("how", CASES)
def test_recover_refuses_a_foreign_orphan_spec_and_changes_nothing(cli: Cli, how: str) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    stray = "MIG-99999999-8888-7777-6666-555555555555"
    path = plant(cli, mig, how, name=spec_file_name(stray))
    frozen = Unchanged(cli)
    message = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    assert str(path) in message and "not hamimig's" in message
    frozen.check()


def test_recover_still_removes_an_orphan_spec_of_ours(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0", gpu="1")
    stray = cli.cdi_dir / spec_file_name(mig)
    content = stray.read_bytes()
    ok(cli.json("forget", mig))
    sim(cli, "reset", "--gpu", "1")  # the instance is gone too: a true orphan spec of ours
    stray.write_bytes(content)
    data = ok(cli.json("recover", "--assume-no-pods"))
    assert not stray.exists(), data
    assert "remove-orphan-cdi" in data["summary"]["byAction"], data


@pytest.mark.parametrize("how", CASES)
def test_forget_keeps_a_foreign_spec_and_warns(cli: Cli, how: str) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    path = plant(cli, mig, how)
    content = path.read_bytes()
    ran = cli.json("forget", mig)
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert str(path) in ran.stdout and "kept" in ran.stdout
    assert path.read_bytes() == content
    assert queue_entries(cli) == []


@pytest.mark.parametrize("how", CASES)
def test_reconcile_retry_keeps_a_foreign_spec_and_drops_the_entry(cli: Cli, how: str) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    fault(cli, "cdi.remove", error="EIO")
    ok(cli.json("reclaim", "--mig-uuid", mig))
    assert queue_entries(cli) == [mig]
    path = plant(cli, mig, how)
    content = path.read_bytes()
    ran = cli.json("reconcile")
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert str(path) in ran.stdout and "kept" in ran.stdout
    assert path.read_bytes() == content
    assert queue_entries(cli) == []


@pytest.mark.parametrize("how", CASES)
def test_doctor_fails_on_a_foreign_spec_with_a_hint(cli: Cli, how: str) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    stray = "MIG-99999999-8888-7777-6666-555555555555"
    path = plant(cli, mig, how, name=spec_file_name(stray))
    ran = cli.json("doctor")
    assert ran.exit_code != 0
    failed = [c for c in ran.json()["checks"] if c["status"] == "fail"]
    assert any(str(path) in c["message"] for c in failed), failed
    assert any("out of the CDI directory" in (c.get("hint") or "") for c in failed), failed


@pytest.mark.parametrize("how", CASES)
def test_recover_refuses_a_queued_removal_of_a_foreign_spec(cli: Cli, how: str) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    fault(cli, "cdi.remove", error="EIO")
    ok(cli.json("reclaim", "--mig-uuid", mig))
    path = plant(cli, mig, how)
    frozen = Unchanged(cli)
    message = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    assert str(path) in message and "not hamimig's" in message
    frozen.check()
    assert queue_entries(cli) == [mig]
