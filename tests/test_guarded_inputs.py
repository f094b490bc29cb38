"""What hamimig reads besides its own state decides too, and is guarded like a record: the
config (adoption, the idle policy, cdi.kind, cdi.baseSpec) and the directory holding it, the
state directory's parent (its owner could swap the state directory), and every file in a CDI
directory that runtimes load (one hamimig cannot parse may define our device for another
container all the same)."""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.cdi import KIND, base_dir, qualified, spec_of, spec_path
from tests.support.cli import (
    ADOPT_CONFIG,
    Cli,
    allocate_args,
    idle,
    ok,
    refused,
    sim,
)
from tests.support.records import sha
from tests.support.unchanged import Unchanged


def _failing(ran: Any) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = ran.json()["checks"]
    return [c for c in checks if c["status"] == "fail"]


def _root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")


# ---------------------------------------------------------------------------------------------
# The config


def _adopting(cli: Cli, tmp_path: Path) -> tuple[Cli, Path]:
    """The node with an instance hamimig did not make and a config (in a directory of its own)
    that turns adoption on: whoever can write that config can have the instance adopted."""
    etc = tmp_path / "etc-hamimig"
    etc.mkdir(mode=0o755)
    config = etc / "config.yaml"
    config.write_text(ADOPT_CONFIG)
    config.chmod(0o644)
    sim(cli, "create", "--gpu", "0", "--profile", "3g.40gb", "--placement", "4")
    return Cli(cli.sim, cli.state_dir, cli.cdi_dir, config=config), config


def _loosen(path: Path, how: str) -> str:
    """Make `path` forgeable by others; the fix doctor must give."""
    if how == "mode":
        path.chmod(0o777 if path.is_dir() else 0o666)
        return f"chmod go-w {path}"
    _root_only()
    os.chown(path, 1234, -1)
    return f"chown {os.geteuid()} {path}"


def _refuses_everything(cli: Cli, path: Path, fix: str) -> None:
    """doctor fails naming the fix; recover, allocate and reclaim refuse (exit 5), change
    nothing, and adopt nothing."""
    ran = cli.json("doctor")
    assert ran.exit_code == 5, ran.stdout
    assert any(c["hint"] == fix for c in _failing(ran)), _failing(ran)
    before = Unchanged(cli)
    for command in (
        ["recover", "--assume-no-pods"],
        allocate_args("evil/x", "3g.40gb"),
        ["reclaim", "--gpu", "0", "--all-idle"],
    ):
        assert str(path) in refused(cli.json(*command), 5, "unverifiable")
    before.check()


@pytest.mark.parametrize("how", ["mode", "owner"])
@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_forgeable_config_fails_doctor_and_blocks_mutation(
    cli: Cli, tmp_path: Path, what: str, how: str
) -> None:
    adopting, config = _adopting(cli, tmp_path)
    path = config if what == "file" else config.parent
    fix = _loosen(path, how)
    _refuses_everything(adopting, path, fix)


def test_a_config_behind_a_link_is_judged_by_the_file_read(cli: Cli, tmp_path: Path) -> None:
    """A ConfigMap mount is a link: the file it ends at is the one that decides."""
    _, config = _adopting(cli, tmp_path)
    link = tmp_path / "etc-link" / "config.yaml"
    link.parent.mkdir(mode=0o755)
    link.symlink_to(config)
    config.chmod(0o666)
    linked = Cli(cli.sim, cli.state_dir, cli.cdi_dir, config=link)
    _refuses_everything(linked, config, f"chmod go-w {config}")


def test_a_directory_others_can_write_is_unsafe_without_a_config_too(
    cli: Cli, tmp_path: Path
) -> None:
    """Whoever can write the directory can put a config there, and take it away again once a
    command has read it; the sticky bit keeps others from replacing a file they do not own."""
    adopting, config = _adopting(cli, tmp_path)
    config.unlink()
    config.parent.chmod(0o777)
    _refuses_everything(adopting, config.parent, f"chmod go-w {config.parent}")
    config.parent.chmod(0o1777)
    ok(adopting.json("doctor"))
    [kept] = ok(adopting.json("recover", "--assume-no-pods"))["actions"]
    assert kept["action"] == "preserve-unmanaged"  # no config: adoption is off


def test_a_guarded_config_adopts_as_configured(cli: Cli, tmp_path: Path) -> None:
    adopting, _ = _adopting(cli, tmp_path)
    ok(adopting.json("doctor"))
    [adopted] = ok(adopting.json("recover", "--assume-no-pods"))["actions"]
    assert adopted["action"] == "adopt-idle"


# ---------------------------------------------------------------------------------------------
# The state directory's parent


def test_a_state_directory_whose_parent_another_user_owns_is_unsafe(
    sim_path: Path, tmp_path: Path
) -> None:
    _root_only()
    parent = tmp_path / "hami"
    parent.mkdir(mode=0o755)
    cli = Cli(sim_path, parent / "state", tmp_path / "cdi")
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    os.chown(parent, 1234, -1)
    before = Unchanged(cli)
    for command in (["reclaim", "--mig-uuid", mig], allocate_args("ns/q", "1g.10gb")):
        message = refused(cli.json(*command), 5, "unverifiable")
        assert f"the state directory's parent {parent} is owned by uid 1234" in message
    before.check()
    hints = {c["name"]: c["hint"] for c in _failing(cli.json("doctor"))}
    assert hints["state-dir/parent"] == f"chown 0 {parent}"
    os.chown(parent, 0, -1)
    ok(cli.json("reclaim", "--mig-uuid", mig))


# ---------------------------------------------------------------------------------------------
# CDI files hamimig cannot parse


def _forgery(mig: str) -> dict[str, Any]:
    """A spec defining `mig`'s device name with another GPU's device node."""
    return {
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "devices": [
            {
                "name": f"mig-{sha(mig)}",
                "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]},
            }
        ],
    }


def _as_yaml(spec: dict[str, Any]) -> str:
    [device] = spec["devices"]
    nodes = "".join(f"    - path: {n['path']}\n" for n in device["containerEdits"]["deviceNodes"])
    return (
        f"cdiVersion: {spec['cdiVersion']}\nkind: {spec['kind']}\ndevices:\n"
        f"- name: {device['name']}\n  containerEdits:\n    deviceNodes:\n{nodes}"
    )


def _forms(spec: dict[str, Any]) -> dict[str, tuple[str, bytes]]:
    """(file name, content) of `spec` in each form runtimes load and hamimig once skipped."""
    text = json.dumps(spec)
    return {
        "yaml-in-json": ("zz-evil.json", _as_yaml(spec).encode()),
        "utf8-bom": ("zz-evil.json", codecs.BOM_UTF8 + text.encode()),
        "utf16": ("zz-evil.yaml", text.encode("utf-16")),
        "oversized": ("zz-evil.json", (text + " " * (5 << 20)).encode()),
        "second-document-broken": ("zz-evil.yaml", (_as_yaml(spec) + "---\nx: [\n").encode()),
    }


FORMS = list(_forms(_forgery("MIG-x")))


@pytest.mark.parametrize("where", ["cdi-dir", "etc-cdi"])
@pytest.mark.parametrize("form", FORMS)
def test_a_forged_spec_in_any_form_runtimes_load_blocks_reuse(
    cli: Cli, form: str, where: str
) -> None:
    """Caught as a conflict where hamimig parses it as runtimes do, else as a file it cannot
    verify; never skipped (a `--sim` node's stand-in for /etc/cdi is its NVIDIA spec dir)."""
    mig = idle(cli, "ns/old", "3g.40gb", "4")
    name, content = _forms(_forgery(mig))[form]
    path = (cli.cdi_dir if where == "cdi-dir" else base_dir(cli)) / name
    path.write_bytes(content)
    ran = cli.json("doctor")
    assert ran.exit_code == 5, ran.stdout
    [check] = _failing(ran)
    assert check["name"].startswith(("cdi-conflict/", "cdi-unreadable/")), check
    assert str(path) in check["message"]
    before = Unchanged(cli)
    for command in (allocate_args("evil/x", "3g.40gb"), ["recover", "--assume-no-pods"]):
        assert str(path) in refused(cli.json(*command), 5, "unverifiable")
    before.check()
    path.unlink()
    assert ok(cli.json(*allocate_args("ns/new", "3g.40gb")))["instance"]["migUUID"] == mig


def test_every_form_is_a_spec_to_the_reference_loader(cdi_check: Path, tmp_path: Path) -> None:
    """The forms above are forgeries, not junk: the runtimes' own loader resolves the device."""
    import subprocess

    spec = _forgery("MIG-x")
    for form, (name, content) in _forms(spec).items():
        directory = tmp_path / form
        directory.mkdir()
        (directory / name).write_bytes(content)
        ran = subprocess.run(
            [str(cdi_check), str(directory)], capture_output=True, text=True, timeout=60
        )
        report = json.loads(ran.stdout)
        assert report["devices"] == [qualified("MIG-x")], (form, report)


def test_files_runtimes_cannot_load_and_other_vendors_specs_are_fine(cli: Cli) -> None:
    """What the reference loader skips or fails to read defines nothing (a directory, a link
    to nothing or in a loop, an empty file, a name without .json/.yaml), and another vendor's
    spec in any form it loads defines no device of ours."""
    mig = idle(cli, "ns/old", "3g.40gb", "4")
    cli.cdi_dir.joinpath("dir.json").mkdir()
    cli.cdi_dir.joinpath("gone.yaml").symlink_to(cli.cdi_dir / "nowhere.yaml")
    cli.cdi_dir.joinpath("loop.json").symlink_to(cli.cdi_dir / "loop.json")
    cli.cdi_dir.joinpath("empty.json").write_bytes(b"")
    cli.cdi_dir.joinpath("notes.txt").write_text("{")
    vendor = {**_forgery(mig), "kind": "example.com/fpga"}
    for form in ("yaml-in-json", "utf8-bom", "utf16"):
        name, content = _forms(vendor)[form]
        cli.cdi_dir.joinpath(f"vendor-{form}-{name}").write_bytes(content)
    ran = cli.json("doctor")
    assert ran.exit_code == 0, _failing(ran)
    conflicts = {c["name"]: c for c in ran.json()["checks"]}["cdi-conflicts"]
    assert "5 file(s)" in conflicts["message"]  # ours, NVIDIA's base and the vendor's three
    assert ok(cli.json(*allocate_args("ns/new", "3g.40gb")))["instance"]["migUUID"] == mig


def test_a_damaged_spec_of_our_own_is_repaired_not_refused(cli: Cli) -> None:
    """Our own spec is judged by its own check and rewritten by recover (repair-cdi); only
    files of others that hamimig cannot parse leave the node unverifiable."""
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    spec_path(cli, mig).write_text("{")
    ran = cli.json("doctor")
    assert [c["name"] for c in _failing(ran)] == [f"cdi-spec/mig-{sha(mig)}"], _failing(ran)
    ok(cli.json("recover", "--assume-no-pods"))
    assert spec_of(cli, mig)["kind"] == KIND
