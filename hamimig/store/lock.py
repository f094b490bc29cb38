"""The node lock: one mutating hamimig process at a time.

Two processes planning against the same snapshot would both see a placement free and both
create, or both reclaim one instance. An advisory `flock` on a file in the state directory
serialises them; the kernel drops it when the process dies (even by kill -9), so a crash never
leaves a stale lock behind, unlike a PID file. It does not serialise HAMi's device plugin, which
does not take it (CONTRACT.md).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from hamimig.errors import BusyError, UsageError
from hamimig.store.files import ensure_dir
from hamimig.store.records import STATE_DIR_MODE

LOCK_NAME = "hamimig.lock"
LOCK_MODE = 0o600
POLL_SECONDS = 0.05


class NodeLock:
    """Context manager holding the exclusive lock; waits up to `timeout` seconds for it.

    Polling with LOCK_NB rather than a blocking flock keeps the wait bounded without signals
    (alarm-based timeouts would interfere with the caller's own signal handling).
    """

    def __init__(self, directory: Path, timeout: float = 60.0) -> None:
        self.directory = directory
        self.timeout = max(0.0, timeout)
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.directory / LOCK_NAME

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError("NodeLock is not reentrant")
        ensure_dir(self.directory, STATE_DIR_MODE)
        flags = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, LOCK_MODE)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UsageError(f"lock file {self.path} is a symbolic link") from None
            raise
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise BusyError(
                            f"another hamimig process holds the node lock {self.path}; "
                            f"waited {self.timeout:g} s"
                        ) from None
                    time.sleep(min(POLL_SECONDS, remaining))
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> NodeLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
