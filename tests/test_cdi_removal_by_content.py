"""A CDI spec is removed or overwritten only when it is ours, by content (docs/formats.md
"CDI specs").

A file at our spec name whose kind differs, that does not define exactly one device named the
instance's `mig-<sha256>`, whose `hami.io/mig-uuid` annotation names another instance, or that
cannot be parsed is kept and reported: reclaim, forget and a queued removal's retry carry a
warning, recover refuses (exit 5, nothing changed), doctor fails with a hint.

Nor is such a file, when it parses, ever overwritten: a reuse of the Idle instance, recover's
and reconcile's repair-cdi and an adoption refuse it (exit 5, nothing changed, a dry run
alike), and `CdiStore.write` itself refuses it should a planner miss it. A damaged file (not
JSON) at a spec name is no one's spec: it is rewritten, as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hamimig.store.cdi import DEFAULT_KIND, CdiDevice, build_spec, device_name, spec_file_name
from tests.support.cli import (
    Cli,
    Ran,
    alloc,
    allocated,
    fault,
    idle,
    ok,
    refused,
    sim,
    sim_create,
)
from tests.support.node import gpus
from tests.support.pods import PodsFile, kube_pod
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


# ---------------------------------------------------------------------------------------------
# Never overwritten: reuse, repair-cdi (recover, reconcile), adoption


WRITE_CASES = sorted(how for how, change in FOREIGN.items() if change is not None)
"""The files that parse and are demonstrably not the instance's spec (a damaged one is
rewritten: `test_a_damaged_spec_of_its_own_is_rewritten`)."""
DRY = [pytest.param((), id="run"), pytest.param(("--dry-run",), id="dry-run")]


def never_overwritten(cli: Cli, path: Path, message: str) -> None:
    assert str(path) in message and "not hamimig's" in message, message
    assert "never overwritten" in message and "nothing was changed" in message, message


WRITERS: dict[str, Callable[[Cli, tuple[str, ...]], Ran]] = {
    "reuse": lambda cli, dry: alloc(cli, "ns/b", "1g.10gb", "0", "0", *dry),
    "recover": lambda cli, dry: cli.json("recover", "--assume-no-pods", *dry),
    "reconcile": lambda cli, dry: cli.json("reconcile", *dry),
}
"""The commands that would write the spec of an Idle instance: a reuse, recover's repair-cdi,
reconcile's spec refresh."""


@pytest.mark.parametrize("dry", DRY)
@pytest.mark.parametrize("how", WRITE_CASES)
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_no_command_overwrites_the_foreign_spec_of_an_idle_instance(
    cli: Cli, writer: str, how: str, dry: tuple[str, ...]
) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    path = plant(cli, mig, how)
    frozen = Unchanged(cli)
    message = refused(WRITERS[writer](cli, dry), 5, "unverifiable")
    never_overwritten(cli, path, message)
    assert mig in message
    frozen.check()


def test_recover_refuses_to_repair_the_foreign_spec_of_an_active_instance(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    path = plant(cli, mig, "kind")
    pods = pods_file(kube_pod("ns/a"))  # its owner pod still holds it: restore-active
    frozen = Unchanged(cli)
    never_overwritten(cli, path, refused(cli.json("recover", "--pods", pods), 5, "unverifiable"))
    frozen.check()


@pytest.mark.parametrize("how", WRITE_CASES)
def test_doctor_fails_on_the_foreign_spec_of_an_instance_with_a_hint(cli: Cli, how: str) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    path = plant(cli, mig, how)
    ran = cli.json("doctor")
    assert ran.exit_code == 5
    [spec] = [c for c in ran.json()["checks"] if c["name"].startswith("cdi-spec/")]
    assert spec["status"] == "fail" and str(path) in spec["message"], spec
    assert "out of the CDI directory" in spec["hint"] and "repair-cdi" not in spec["hint"], spec


ADOPTIONS = [
    pytest.param(("recover", "--assume-no-pods", "--adopt"), id="recover-adopt"),
    pytest.param(("adopt", "--exclusive-owner", "--assume-no-pods"), id="adopt"),
    pytest.param(("adopt", "--exclusive-owner", "--assume-no-pods", "--dry-run"), id="adopt-dry"),
]


@pytest.mark.parametrize("command", ADOPTIONS)
@pytest.mark.parametrize("how", ["kind", "annotation"])
def test_adoption_refuses_to_overwrite_a_foreign_spec(
    cli: Cli, how: str, command: tuple[str, ...]
) -> None:
    mig = sim_create(cli, "1g.10gb", "0")["migUUID"]
    ours = build_spec(DEFAULT_KIND, CdiDevice(mig, 0, 1, 2))
    cli.cdi_dir.mkdir(mode=0o755)
    (cli.cdi_dir / spec_file_name(mig)).write_text(json.dumps(ours))
    path = plant(cli, mig, how)
    frozen = Unchanged(cli)
    never_overwritten(cli, path, refused(cli.json(*command), 5, "unverifiable"))
    frozen.check()


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(
            ("allocate", "--pod", "ns/b", "--gpu", "0", "--profile", "1g.10gb"), id="reuse"
        ),
        pytest.param(("recover", "--assume-no-pods"), id="recover"),
        pytest.param(("reconcile",), id="reconcile"),
    ],
)
@pytest.mark.parametrize("damage", [b'{"cdiVersion": "0.3.0", "kind": ', b"{}\n", b"[]"])
def test_a_damaged_spec_of_its_own_is_rewritten(
    cli: Cli, command: tuple[str, ...], damage: bytes
) -> None:
    """Not JSON, or naming no kind (truncated): nobody's spec, so the command repairs it."""
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    path = cli.cdi_dir / spec_file_name(mig)
    path.write_bytes(damage)
    ok(cli.json(*command))
    assert json.loads(path.read_text())["kind"] == DEFAULT_KIND
    assert [d["name"] for d in json.loads(path.read_text())["devices"]] == [device_name(mig)]


# The last line of defence: the store refuses the write should a planner let it through.


def test_a_reuse_planned_past_a_foreign_spec_still_never_overwrites_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    path = plant(cli, mig, "kind")
    monkeypatch.setattr("hamimig.engine.allocate._refuse_foreign_spec", lambda cdi, mig: None)
    frozen = Unchanged(cli)
    message = refused(alloc(cli, "ns/b", "1g.10gb", "0"), 5, "unverifiable")
    assert str(path) in message and "never overwritten" in message, message
    frozen.check()  # still Idle, its file as it was


def test_a_repair_planned_past_a_foreign_spec_fails_and_keeps_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    path = plant(cli, mig, "kind")
    content = path.read_bytes()
    monkeypatch.setattr("hamimig.engine.recovery.refuse_foreign_spec", lambda *args: False)
    ran = cli.json("recover", "--assume-no-pods")
    assert ran.exit_code == 4, (ran.stdout, ran.stderr)
    [repair] = [a for a in ran.json()["actions"] if a["action"] == "repair-cdi"]
    assert repair["result"] == "failed" and repair["error"]["code"] == "unverifiable", repair
    assert str(path) in repair["error"]["message"]
    assert path.read_bytes() == content


def test_a_creation_whose_spec_name_holds_a_foreign_file_is_rolled_back(tmp_path: Path) -> None:
    """A driver before R470 names an instance by its place, so the next instance at a slot
    has the MIG UUID (and the spec name) of the last one: a file planted there is kept, and
    the allocation is undone."""
    cli = Cli(tmp_path / "old" / "node.json", tmp_path / "state", tmp_path / "cdi")
    ok(cli.json("sim", "init", "--model", "A100-SXM4-40GB", "--driver-version", "460.91.03"))
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    path = plant(cli, mig, "kind", name="copy.json")
    ok(cli.json("reclaim", "--mig-uuid", mig))
    path = path.rename(cli.cdi_dir / spec_file_name(mig))
    content, layout = path.read_bytes(), gpus(cli)
    ran = alloc(cli, "ns/b", "1g.10gb", "0")
    assert ran.exit_code == 4, (ran.stdout, ran.stderr)
    message = ran.json()["error"]["message"]
    assert "rolled back" in message and str(path) in message, message
    assert path.read_bytes() == content
    assert gpus(cli) == layout
    assert ok(cli.json("list"))["instances"] == []
