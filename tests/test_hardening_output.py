"""A reader that closes stdout early does not change the exit status; odd bytes never crash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import allocate_args
from tests.support.node import sim_state

REPO_ROOT = Path(__file__).resolve().parent.parent


def node_args(tmp_path: Path, sim: Path) -> list[str]:
    return [
        "--sim",
        str(sim),
        "--state-dir",
        str(tmp_path / "state"),
        "--cdi-dir",
        str(tmp_path / "cdi"),
        "--config",
        str(tmp_path / "absent.yaml"),
    ]


def with_closed_stdout(args: list[str], stderr_too: bool = False) -> tuple[int, bytes]:
    """Run hamimig with its stdout a pipe whose reader is already gone (`| true`)."""
    env = dict(os.environ, LC_ALL="C.UTF-8")
    env.pop("HAMIMIG_OUTPUT", None)
    with subprocess.Popen(
        [sys.executable, "-m", "hamimig", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr_too else subprocess.PIPE,
        env=env,
    ) as child:
        assert child.stdout is not None
        child.stdout.close()
        err = b"" if child.stderr is None else child.stderr.read()
        return child.wait(timeout=120), err


def gis(sim: Path) -> int:
    return sum(len(gpu["gpuInstances"]) for gpu in sim_state(sim)["gpus"])


ALLOCATE = allocate_args("ns/p", "1g.10gb")


@pytest.mark.parametrize("output", [[], ["-o", "json"], ["-o", "yaml"]])
def test_allocate_into_a_closed_pipe_keeps_its_status(
    tmp_path: Path, sim_path: Path, output: list[str]
) -> None:
    status, err = with_closed_stdout([*node_args(tmp_path, sim_path), *output, *ALLOCATE])
    assert (status, err) == (0, b"")
    assert gis(sim_path) == 1  # the change was made, and said so by the status


@pytest.mark.parametrize("output", [[], ["-o", "json"]])
def test_list_into_a_closed_pipe(tmp_path: Path, sim_path: Path, output: list[str]) -> None:
    status, err = with_closed_stdout([*node_args(tmp_path, sim_path), *output, "list"])
    assert (status, err) == (0, b"")


def test_failure_into_a_closed_pipe_keeps_its_exit_code(tmp_path: Path, sim_path: Path) -> None:
    bad = allocate_args("ns/p", "9g.999gb")
    args = [*node_args(tmp_path, sim_path), "-o", "json", *bad]
    assert with_closed_stdout(args) == (2, b"")
    assert with_closed_stdout([*node_args(tmp_path, sim_path), *bad], stderr_too=True) == (
        2,
        b"",
    )


def test_metrics_and_version_into_a_closed_pipe(tmp_path: Path, sim_path: Path) -> None:
    assert with_closed_stdout([*node_args(tmp_path, sim_path), "metrics"]) == (0, b"")
    assert with_closed_stdout(["--version"]) == (0, b"")


def test_undecodable_file_name_in_the_state_dir_is_listed_not_a_crash(
    tmp_path: Path, sim_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    with open(os.path.join(os.fsencode(state), b"hami-owned-\xff.json"), "wb") as f:
        f.write(b"{}")
    # A UTF-8 terminal's strict encoding (the C locale would hide the bug with surrogateescape).
    env = dict(os.environ, PYTHONIOENCODING="utf-8:strict", COLUMNS="300")
    env.pop("HAMIMIG_OUTPUT", None)
    for output in ([], ["-o", "yaml"], ["-o", "json"]):
        ran = subprocess.run(
            [sys.executable, "-m", "hamimig", *node_args(tmp_path, sim_path), *output, "list"],
            cwd=REPO_ROOT,
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        assert b"Traceback" not in ran.stderr
        assert b"hami-owned-\\udcff" in ran.stdout.lower()  # shown as an escape
