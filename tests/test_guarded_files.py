"""Every file that decides is guarded: a world-writable record or CDI directory blocks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cdi import base_file, spec_path
from tests.support.cli import Cli, allocate_args, idle, ok, refused, sim
from tests.support.records import record_path
from tests.support.unchanged import Unchanged


def test_world_writable_cdi_dir_fails_doctor_and_blocks_mutation(cli: Cli) -> None:
    cli.cdi_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cli.cdi_dir, 0o777)
    ran = cli.json("doctor")
    assert ran.exit_code == 5
    assert "chmod go-w" in ran.stdout
    refused(cli.json(*allocate_args("ns/a", "1g.10gb")), 5, "unverifiable")


# ---------------------------------------------------------------------------------------------
# Every file whose content decides, one by one


def _record(cli: Cli) -> Path:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    return record_path(cli, mig)


def _spec(cli: Cli) -> Path:
    return spec_path(cli, idle(cli, "ns/old", "1g.10gb", "0"))


def _queue(cli: Cli) -> Path:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    sim(cli, "fault", "add", "--op", "cdi.remove", "--error", "EIO")
    ok(cli.json("reclaim", "--mig-uuid", mig))
    sim(cli, "fault", "clear")
    return cli.state_dir / "cdi-removal-queue.json"


def _base(cli: Cli) -> Path:
    idle(cli, "ns/old", "1g.10gb", "0")
    return base_file(cli)


FILES = {"record": _record, "spec": _spec, "queue": _queue, "base-spec": _base}


@pytest.mark.parametrize("how", ["mode", "owner"])
@pytest.mark.parametrize("kind", FILES)
def test_a_forgeable_file_that_decides_fails_doctor_and_blocks_mutation(
    cli: Cli, kind: str, how: str
) -> None:
    path = FILES[kind](cli)
    assert path.exists()
    if how == "mode":
        os.chmod(path, 0o666)
        fix = f" {path}"  # `chmod go-w PATH`, or a state file's own mode: `chmod 0600 PATH`
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(path, 1234, -1)
        fix = f"chown {os.geteuid()} {path}"
    ran = cli.json("doctor")
    assert ran.exit_code == 5
    failing = [c for c in ran.json()["checks"] if c["status"] == "fail"]
    assert any(
        (c["hint"] or "").startswith("ch") and (c["hint"] or "").endswith(fix) for c in failing
    ), failing
    before = Unchanged(cli)
    for command in (
        allocate_args("ns/new", "1g.10gb", "3"),
        ["reclaim", "--gpu", "0", "--all-idle"],
        ["recover", "--assume-no-pods"],
    ):
        message = refused(cli.json(*command), 5, "unverifiable")
        assert str(path) in message
    before.check()
    if how == "mode":
        assert os.stat(path).st_mode & 0o777 == 0o666  # never "fixed" silently by a write


def test_a_loose_record_is_reported_once(cli: Cli) -> None:
    path = _record(cli)
    os.chmod(path, 0o666)
    checks = cli.json("doctor").json()["checks"]
    about = [c["name"] for c in checks if c["status"] == "fail" and str(path) in c["message"]]
    assert len(about) == 1, about


def test_the_doctor_hint_is_the_whole_command_for_a_path_with_parentheses(
    sim_path: Path, tmp_path: Path
) -> None:
    """The hint is the command itself, shell-quoted, not the text after the reason's last
    parenthesis (a path may hold one)."""
    weird = tmp_path / "cdi (old) dir"
    cli = Cli(sim_path, tmp_path / "state", weird)
    weird.mkdir()
    os.chmod(weird, 0o777)
    [check] = [c for c in cli.json("doctor").json()["checks"] if c["name"].startswith("guarded/")]
    assert check["hint"] == f"chmod go-w '{weird}'"


# ---------------------------------------------------------------------------------------------
# A file that decides and cannot be inspected is a problem, never a pass


def _failing(monkeypatch: pytest.MonkeyPatch, name: str, path: Path) -> None:
    """`os.NAME(path)` fails with EIO (a disk error: root cannot look either); other paths and
    the other calls as usual."""
    import errno

    real = getattr(os, name)

    def failing(target: object, *args: object, **kwargs: object) -> object:
        if isinstance(target, (str, os.PathLike)) and os.fspath(target) == str(path):
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
        return real(target, *args, **kwargs)

    monkeypatch.setattr(os, name, failing)


@pytest.mark.parametrize(("call", "kind"), [("lstat", "base-spec"), ("listdir", "cdi-dir")])
def test_a_file_that_decides_and_cannot_be_inspected_fails_closed(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, call: str, kind: str
) -> None:
    """Nothing else reads these before a mutation decides: their check is the only guard."""
    path = cli.cdi_dir if kind == "cdi-dir" else FILES[kind](cli)
    if kind == "cdi-dir":
        idle(cli, "ns/old", "1g.10gb", "0")
    before = Unchanged(cli)
    with monkeypatch.context() as patched:
        _failing(patched, call, path)
        ran = cli.json("doctor")
        assert ran.exit_code == 5, ran.stdout
        failing = [c for c in ran.json()["checks"] if c["status"] == "fail"]
        assert [c["hint"] for c in failing if str(path) in c["message"]] == [
            f"check the file system; ls -ld {path}"
        ], failing
        for command in (
            allocate_args("ns/new", "1g.10gb", "3"),
            ["reclaim", "--gpu", "0", "--all-idle"],
        ):
            message = refused(cli.json(*command), 5, "unverifiable")
            assert f"{path} cannot be inspected (Input/output error)" in message
    before.check()
