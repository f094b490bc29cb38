"""The node lock holds even when `hamimig.lock` is deleted or replaced under its holder."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hamimig.errors import BusyError, UsageError
from hamimig.store.lock import LOCK_NAME, NodeLock
from tests.support.processes import REPO_ROOT, run_python


@contextmanager
def held_in_child(code: str) -> Iterator[None]:
    """A child process runs `code` (which must print `held` once it holds the lock) and keeps
    holding until its stdin closes."""
    script = textwrap.dedent(code) + "\nprint('held', flush=True)\nimport sys\nsys.stdin.read()\n"
    with subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "held"
            yield
        finally:
            child.stdin.close()
            assert child.wait(timeout=30) == 0


def node_lock_in_child(state: Path) -> str:
    return f"""
        from pathlib import Path
        from hamimig.store.lock import NodeLock
        lock = NodeLock(Path({str(state)!r}), timeout=5)
        lock.acquire()
    """


def second_process_result(state: Path) -> str:
    """What another process gets from NodeLock(timeout=0.5): `locked` or `busy <code>`."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from hamimig.errors import BusyError
        from hamimig.store.lock import NodeLock
        try:
            with NodeLock(Path({str(state)!r}), timeout=0.5):
                print("locked")
        except BusyError as exc:
            print("busy", exc.exit_code)
        """
    )
    return run_python(script, check=True).stdout.strip()


def test_deleting_the_lock_file_does_not_let_a_second_process_in(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with held_in_child(node_lock_in_child(state)):
        (state / LOCK_NAME).unlink()
        assert second_process_result(state) == "busy 7"


def test_replacing_the_lock_file_does_not_let_a_second_process_in(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with held_in_child(node_lock_in_child(state)):
        (state / "other").write_text("")
        os.replace(state / "other", state / LOCK_NAME)
        assert second_process_result(state) == "busy 7"


def test_the_lock_is_free_again_once_the_holder_is_gone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with held_in_child(node_lock_in_child(state)):
        (state / LOCK_NAME).unlink()
    assert second_process_result(state) == "locked"
    assert (state / LOCK_NAME).is_file()  # recreated, and never unlinked by hamimig


def test_an_older_hamimig_holding_only_the_file_still_excludes_us(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    file_only = f"""
        import fcntl, os
        fd = os.open({str(state / LOCK_NAME)!r}, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
    """
    with held_in_child(file_only):
        assert second_process_result(state) == "busy 7"


def test_we_still_lock_the_file_for_older_versions(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with NodeLock(state, timeout=1):
        fd = os.open(state / LOCK_NAME, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


def test_the_directory_itself_is_locked(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with NodeLock(state, timeout=1):
        fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the lock
    finally:
        os.close(fd)


def test_a_lock_path_that_is_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "state" / LOCK_NAME).mkdir(parents=True)
    lock = NodeLock(tmp_path / "state", timeout=0)
    with pytest.raises(UsageError, match=f"lock file {tmp_path / 'state' / LOCK_NAME} is a dir"):
        lock.acquire()
    assert not lock.held
    fd = os.open(tmp_path / "state", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the directory lock was let go too
    finally:
        os.close(fd)


def test_a_fifo_at_the_lock_path_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    os.mkfifo(tmp_path / "state" / LOCK_NAME)
    with pytest.raises(UsageError, match="is not a regular file"):
        NodeLock(tmp_path / "state", timeout=0).acquire()


def test_a_symlinked_state_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "state").symlink_to(tmp_path / "real")
    with pytest.raises(UsageError, match="symbolic link"):
        NodeLock(tmp_path / "state", timeout=0).acquire()
    assert not (tmp_path / "real" / LOCK_NAME).exists()


def test_busy_on_the_directory_names_the_lock(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with held_in_child(node_lock_in_child(state)):
        (state / LOCK_NAME).unlink()
        with pytest.raises(BusyError, match=f"holds the node lock {state / LOCK_NAME}"):
            NodeLock(state, timeout=0.2).acquire()
