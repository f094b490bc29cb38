"""Shared fixtures: a simulated node on disk, the real NVML adapter over it, and the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.testing
from typer.testing import CliRunner

from hamimig.cli import app as app_module
from hamimig.cli.app import app
from hamimig.hw.nvml import NvmlHardware
from hamimig.reports.simulator import sim_init
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore, flush_counts
from tests import forked

_build_command = typer.testing._get_command


def _built_once(typer_app: typer.Typer) -> Any:
    """`CliRunner.invoke` rebuilds the click command from the Typer app on every call, which
    costs more than most commands themselves; the hamimig app is built once, as `hamimig.cli.
    app.run` builds it once per process. Any other app (a test's own) is built as before."""
    if typer_app is app:
        return app_module.command()
    return _build_command(typer_app)


typer.testing._get_command = _built_once  # type: ignore[assignment]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The interpreters tests start (`python -m hamimig`, for what only a fresh interpreter
    shows: closed standard streams, start-up imports) may write bytecode as Python does by
    default, also where the environment says not to (PYTHONDONTWRITEBYTECODE): otherwise every
    one of them compiles hamimig from source again, a third of its start-up. The files land in
    `__pycache__` directories, which git ignores."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    # Temporary directories in memory when the machine has tmpfs and no --basetemp was given:
    # every record, intent and spec write is fsynced, and a session makes thousands of them.
    shm = Path("/dev/shm")
    if config.option.basetemp is None and shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        _drop_stale_memory_basetemps(shm)
        config.option.basetemp = tempfile.mkdtemp(prefix="hamimig-pytest-", dir=shm)
        config.stash[_MEMORY_BASETEMP] = config.option.basetemp


def _drop_stale_memory_basetemps(shm: Path, keep: int = 2, idle_s: float = 1800.0) -> None:
    """Failing sessions keep their directories, and tmpfs is memory: keep the newest `keep`, and
    of the others remove those untouched for `idle_s` (a session still running elsewhere keeps
    creating test directories in its own, so it is never taken from under it)."""
    import time

    uid = os.getuid()
    mine = [p for p in shm.glob("hamimig-pytest-*") if p.is_dir() and p.stat().st_uid == uid]
    mine.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in mine[keep:]:
        if time.time() - stale.stat().st_mtime > idle_s:
            shutil.rmtree(stale, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The in-memory directories go with a passing session; a failing one keeps them to look
    at (pytest names the directory in its report of each failure)."""
    where = session.config.stash.get(_MEMORY_BASETEMP, None)
    if where is not None and exitstatus == 0:
        shutil.rmtree(where, ignore_errors=True)


_MEMORY_BASETEMP = pytest.StashKey[str]()


@pytest.fixture
def sim_path(tmp_path: Path) -> Path:
    """A fresh simulated node: 2 x H100-SXM5-80GB, MIG enabled, no instances."""
    path = tmp_path / "sim" / "node.json"
    sim_init(path, "H100-SXM5-80GB", 2)
    return path


def open_hw(path: Path) -> NvmlHardware:
    store = SimStore(path)
    minors = store.minors_path
    assert minors is not None
    hw = NvmlHardware(SimNvml(store), minors)
    hw.open()
    return hw


@pytest.fixture
def hw(sim_path: Path) -> Iterator[NvmlHardware]:
    """`hw/nvml.py` running unchanged against the simulated pynvml module."""
    adapter = open_hw(sim_path)
    yield adapter
    adapter.close()


def sim_state(path: Path) -> dict[str, Any]:
    flush_counts()  # what an in-process simulator counted so far, as its exit would publish
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class Cli:
    """Runs `hamimig` in-process through Typer's CliRunner with the node's global options."""

    def __init__(self, sim: Path, state_dir: Path, cdi_dir: Path) -> None:
        self.sim = sim
        self.state_dir = state_dir
        self.cdi_dir = cdi_dir
        self.runner = CliRunner()

    def globals(self) -> list[str]:
        return [
            "--sim",
            str(self.sim),
            "--state-dir",
            str(self.state_dir),
            "--cdi-dir",
            str(self.cdi_dir),
            "--config",
            str(self.state_dir.parent / "absent-config.yaml"),
        ]

    def __call__(self, *args: str, output: str | None = None) -> Ran:
        argv = self.globals() + (["-o", output] if output else []) + list(args)
        result = self.runner.invoke(app, argv, catch_exceptions=False)
        return Ran(result.exit_code, result.stdout, result.stderr)

    def json(self, *args: str) -> Ran:
        return self(*args, output="json")


@pytest.fixture
def cli(sim_path: Path, tmp_path: Path) -> Cli:
    return Cli(sim_path, tmp_path / "state", tmp_path / "cdi")


def run_hamimig(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`hamimig ARGS` in a real child process (crash and concurrency tests), forked from this
    one: see `tests/forked.py`."""
    return forked.run(*args, env=env)
