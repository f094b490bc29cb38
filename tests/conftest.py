"""Shared fixtures: a simulated node on disk, the real NVML adapter over it, the CLI, pod list
files and the reference CDI check tool; and the session's hooks. Helpers that are not fixtures
live in tests/support/."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.testing

from hamimig.cli import app as app_module
from hamimig.cli.app import app
from hamimig.hw.nvml import NvmlHardware
from hamimig.rehearsal.simulator import sim_init
from tests.support.cdi import find_cdi_check
from tests.support.cli import Cli
from tests.support.node import open_hw
from tests.support.pods import PodsFile, write_pod_list

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


@pytest.fixture
def hw(sim_path: Path) -> Iterator[NvmlHardware]:
    """`hw/nvml.py` running unchanged against the simulated pynvml module."""
    adapter = open_hw(sim_path)
    yield adapter
    adapter.close()


@pytest.fixture
def cli(sim_path: Path, tmp_path: Path) -> Cli:
    return Cli(sim_path, tmp_path / "state", tmp_path / "cdi")


@pytest.fixture
def pods_file(tmp_path: Path) -> PodsFile:
    """Write a pod list (JSON, or YAML with fmt="yaml") and return the path for `--pods`."""
    counter = iter(range(1000))

    def write(*pods: dict[str, Any], fmt: str = "json", **kw: Any) -> str:
        return write_pod_list(tmp_path / f"pods-{next(counter)}.{fmt}", *pods, fmt=fmt, **kw)

    return write


@pytest.fixture(scope="session")
def cdi_check() -> Path:
    """The reference CDI library's `cdi-check`; the test is skipped where it cannot be had."""
    tool = find_cdi_check()
    if tool is None:
        pytest.skip(
            "cdi-check not found ($HAMIMIG_CDI_CHECK or .tools/cdi-check; .ci/run builds it, "
            "which needs golang-go and Debian's CDI library package)"
        )
    return tool
