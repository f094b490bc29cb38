"""The node lock (docs/formats.md "The node lock"): two processes planning on one snapshot
would both create at a free placement. A `flock`, which the kernel drops even on kill -9, so a
crash leaves no stale lock. Taken on the state directory itself, since a replaced `hamimig.lock`
would let two holders in; the file is locked too, for older versions. Neither is ever unlinked.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from pathlib import Path

from hamimig.errors import BusyError, UsageError
from hamimig.store.files import DIR_FLAGS, STATE_DIR_MODE, check_dir, describe_entry, ensure_dir

LOCK_NAME = "hamimig.lock"
LOCK_MODE = 0o600
POLL_SECONDS = 0.05

_FILE_FLAGS = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NodeLock:
    """Context manager holding the exclusive lock; waits up to `timeout` seconds for it, polling
    with LOCK_NB, since an alarm-based timeout would interfere with the caller's signals."""

    def __init__(self, directory: Path, timeout: float = 60.0) -> None:
        self.directory = directory
        self.timeout = max(0.0, timeout)
        self._fds: list[int] = []

    @property
    def path(self) -> Path:
        return self.directory / LOCK_NAME

    def inspect(self) -> str | None:
        """Why the lock file could not be taken (a directory, a link or a FIFO at its name makes
        every mutating command fail), or None: fine, or absent (the first command creates it)."""
        try:
            why = describe_entry(self.directory, LOCK_NAME)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"cannot be inspected: {exc.strerror or exc}"
        if why is None and not os.access(self.path, os.R_OK | os.W_OK):
            return f"is not readable and writable by uid {os.getuid()}"
        return why

    def acquire(self) -> None:
        if self._fds:
            raise RuntimeError("NodeLock is not reentrant")
        ensure_dir(self.directory, STATE_DIR_MODE)
        deadline = time.monotonic() + self.timeout
        try:
            self._fds.append(self._lock_directory(deadline))
            fd = self._open_file()
            self._fds.append(fd)
            self._flock(fd, deadline)
        except BaseException:
            self.release()
            raise

    def _lock_directory(self, deadline: float) -> int:
        """Lock the directory that is at the path now, not one renamed away while we waited."""
        while True:
            if not check_dir(self.directory):
                raise UsageError(f"state directory {self.directory} vanished")
            try:
                fd = os.open(self.directory, DIR_FLAGS)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    continue  # swapped after check_dir: judge what is there now
                raise
            try:
                self._flock(fd, deadline)
                if _same_file(os.fstat(fd), self.directory):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # replaced while we waited: lock the new one instead

    def _open_file(self) -> int:
        try:
            fd = os.open(self.path, _FILE_FLAGS, LOCK_MODE)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UsageError(f"lock file {self.path} is a symbolic link") from None
            if exc.errno == errno.EISDIR:
                raise UsageError(f"lock file {self.path} is a directory") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UsageError(f"lock file {self.path} is not a regular file")
        return fd

    def _flock(self, fd: int, deadline: float) -> None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BusyError(
                        f"another hamimig process holds the node lock {self.path}; "
                        f"waited {self.timeout:g} s"
                    ) from None
                time.sleep(min(POLL_SECONDS, remaining))

    def release(self) -> None:
        """Unlock and close in reverse order: the file first, the directory last."""
        while self._fds:
            fd = self._fds.pop()
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def __enter__(self) -> NodeLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _same_file(st: os.stat_result, path: Path) -> bool:
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
