"""An unusable state or CDI directory is exit 2 before any GI or CI is created."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hamimig.engine import node as node_module
from hamimig.engine.node import Node
from hamimig.errors import UsageError
from tests.support.cli import Cli, allocate_args
from tests.support.node import sim_state

ALLOCATE = allocate_args("ns/p", "1g.10gb")


def gis(sim: Path) -> int:
    return sum(len(gpu["gpuInstances"]) for gpu in sim_state(sim)["gpus"])


def refused(cli: Cli, args: list[str], needle: str) -> None:
    before = gis(cli.sim)
    ran = cli(*args)
    assert ran.exit_code == 2, (ran.stdout, ran.stderr)
    assert len(ran.stderr.strip().splitlines()) == 1
    assert needle in ran.stderr, ran.stderr
    assert gis(cli.sim) == before


MUTATING = [
    ALLOCATE,
    allocate_args("ns/p", "1g.10gb", "0"),
    ["reclaim", "--gpu", "0", "--all-idle"],
    ["reclaim", "--gpu", "0", "--all-idle", "--dry-run"],
    ["reconcile"],
    ["recover", "--assume-no-pods"],
    ["release", "--pod", "ns/p"],
]


@pytest.mark.parametrize("args", MUTATING)
def test_cdi_dir_that_is_a_file(cli: Cli, args: list[str]) -> None:
    cli.cdi_dir.write_text("")
    refused(cli, args, f"CDI directory {cli.cdi_dir} is not a usable directory")


@pytest.mark.parametrize("args", MUTATING)
def test_state_dir_that_is_a_file(cli: Cli, args: list[str]) -> None:
    cli.state_dir.write_text("")
    refused(cli, args, f"state directory {cli.state_dir} is not a usable directory")


@pytest.mark.parametrize("which", ["state_dir", "cdi_dir"])
def test_symlinked_directory(cli: Cli, tmp_path: Path, which: str) -> None:
    real = tmp_path / "real"
    real.mkdir()
    getattr(cli, which).symlink_to(real)
    refused(cli, ALLOCATE, "symbolic link")
    assert list(real.iterdir()) == []


def test_allocate_with_the_cdi_dir_a_file_left_nothing_to_recover(cli: Cli) -> None:
    cli.cdi_dir.write_text("")
    refused(cli, ALLOCATE, "CDI directory")
    cli.cdi_dir.unlink()
    ran = cli.json(*ALLOCATE)
    assert ran.exit_code == 0, ran.stdout
    assert gis(cli.sim) == 1


@pytest.mark.parametrize("which", ["state_dir", "cdi_dir"])
def test_read_only_directory(cli: Cli, monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    directory: Path = getattr(cli, which)
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o555)
    if os.getuid() == 0:  # root passes permission bits: make access() answer as for a user
        real_access = os.access

        def access(path: Any, mode: int, **kwargs: Any) -> bool:
            if Path(path) == directory and mode & os.W_OK:
                return False
            return real_access(path, mode, **kwargs)

        monkeypatch.setattr(os, "access", access)
    try:
        refused(cli, ALLOCATE, f"{directory} is not writable and searchable by uid")
    finally:
        os.chmod(directory, 0o755)


@pytest.mark.parametrize("which", ["state_dir", "cdi_dir"])
def test_deep_missing_path_is_not_created(cli: Cli, which: str) -> None:
    deep = getattr(cli, which).parent / "typo" / "deeper" / which
    setattr(cli, which, deep)
    refused(cli, ALLOCATE, f"{deep} does not exist and neither does its parent {deep.parent}")
    assert not (deep.parent.parent).exists()


def test_missing_directories_whose_parents_exist_are_created(cli: Cli) -> None:
    assert not cli.state_dir.exists() and not cli.cdi_dir.exists()
    ran = cli.json(*ALLOCATE)
    assert ran.exit_code == 0, ran.stdout
    assert cli.state_dir.is_dir() and cli.cdi_dir.is_dir()


def test_parent_that_is_a_file(cli: Cli) -> None:
    parent = cli.state_dir.parent / "plain"
    parent.write_text("")
    cli.state_dir = parent / "state"
    refused(cli, ALLOCATE, "not a usable directory (a parent is not a directory)")


def test_cdi_dir_is_not_checked_when_cdi_is_disabled(cli: Cli) -> None:
    (cli.state_dir.parent / "absent-config.yaml").write_text("cdi:\n  enabled: false\n")
    cli.cdi_dir.write_text("")
    ran = cli.json(*ALLOCATE)
    assert ran.exit_code == 0, ran.stdout


def test_read_only_commands_do_not_need_writable_directories(cli: Cli) -> None:
    cli.cdi_dir.write_text("")
    assert cli.json("list").exit_code == 0


def test_default_paths_may_have_their_parents_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "var" / "run" / "hami" / "state"
    cdi = tmp_path / "var" / "run" / "cdi"
    monkeypatch.setattr(node_module, "DEFAULT_STATE_DIR", state)
    monkeypatch.setattr(node_module, "DEFAULT_CDI_DIR", cdi)
    Node(state_dir=state, cdi_dir=cdi, config_path=tmp_path / "none.yaml").check_dirs()
    other = tmp_path / "var" / "run" / "hami" / "other"
    with pytest.raises(UsageError, match="neither does its parent"):
        Node(state_dir=other, cdi_dir=cdi, config_path=tmp_path / "none.yaml").check_dirs()
    (tmp_path / "var").write_text("")  # even a default path needs a directory to grow from
    with pytest.raises(UsageError):
        Node(state_dir=state, cdi_dir=cdi, config_path=tmp_path / "none.yaml").check_dirs()
