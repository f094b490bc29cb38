"""The node lock serialises hamimig processes and gives up with BusyError (exit 7) in time."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hamimig.errors import BusyError, UsageError
from hamimig.store.lock import NodeLock
from tests.support.processes import REPO_ROOT, run_python


def try_lock_in_child(directory: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Another process takes the lock: prints `locked`, or `busy <exit code> <seconds> <msg>`."""
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from hamimig.errors import BusyError
        from hamimig.store.lock import NodeLock
        start = time.monotonic()
        try:
            with NodeLock(Path({str(directory)!r}), timeout={timeout!r}):
                print("locked")
        except BusyError as exc:
            print("busy", exc.exit_code, round(time.monotonic() - start, 3), exc.message)
        """
    )
    return run_python(script, check=True)


def test_second_process_times_out_then_succeeds_after_release(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with NodeLock(state, timeout=1) as lock:
        assert lock.held
        out = try_lock_in_child(state, 0.3).stdout.split(maxsplit=3)
        assert out[0] == "busy"
        assert out[1] == "7"
        assert 0.3 <= float(out[2]) < 5
        assert out[3].strip() == (
            f"another hamimig process holds the node lock {state / 'hamimig.lock'}; waited 0.3 s"
        )
    assert not lock.held
    assert try_lock_in_child(state, 0.3).stdout.strip() == "locked"


def test_waiting_process_gets_the_lock_when_it_is_released(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from hamimig.store.lock import NodeLock
        with NodeLock(Path({str(tmp_path)!r})):
            print("held", flush=True)
            time.sleep(0.4)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        with NodeLock(tmp_path, timeout=10):
            waited = time.monotonic() - start
        assert 0.1 < waited < 5
        assert holder.wait(timeout=30) == 0


def test_lock_is_not_reentrant_across_objects(tmp_path: Path) -> None:
    with NodeLock(tmp_path, timeout=1), pytest.raises(BusyError):
        NodeLock(tmp_path, timeout=0).acquire()


def test_lock_file_and_directory_modes(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with NodeLock(tmp_path / "state"):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(tmp_path / "state" / "hamimig.lock").st_mode) == 0o600


def test_symlinked_lock_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "hamimig.lock").symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):
        NodeLock(tmp_path / "state").acquire()
