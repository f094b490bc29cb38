"""`hamimig` in a child process forked from the test process.

Crash tests need a real process that a fault can end with `os._exit(137)` in the middle of a
command, leaving only what reached the disk. Starting `python -m hamimig` for each costs an
interpreter start and every import (about 0.3 s); a child forked from the test process, which
has imported hamimig already, is that same kind of process for a few milliseconds. The child
closes every descriptor it inherited (a node lock the test holds is not the child's), drops the
parent's simulator counts (they are the parent's to publish), runs the CLI's own entry point on
fresh standard streams, publishes its own counts as an exiting `hamimig` does, and ends with
`os._exit`, so nothing of the test process (atexit hooks, pytest) runs in it.

Tests about the interpreter itself (closed standard streams, undecodable arguments, start-up
imports) still start `python -m hamimig`.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from hamimig.cli import app as app_module
from hamimig.sim import state as sim_state_module

_DEVNULL = os.devnull


def flush_counts() -> None:
    """Merge every live simulated node's pending call counts into its file (this process's
    calls become visible to readers of the file, as they do when the process exits)."""
    for store in list(sim_state_module._LIVE):
        store.flush()


def _child(args: list[str], stdout: int, stderr: int, env: dict[str, str] | None) -> None:
    """The forked side: never returns."""
    code = 1
    try:
        null = os.open(_DEVNULL, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.closerange(3, 65536)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace"
        )
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            write_through=True,
        )
        sys.argv = ["hamimig", *args]
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if env:
            os.environ.update(env)
        sim_state_module._LIVE.clear()
        try:
            code = app_module.run(list(args))
        except SystemExit as done:  # as the interpreter turns it into an exit status
            code = done.code if isinstance(done.code, int) else int(done.code is not None)
        sys.stdout.flush()
        flush_counts()
    except BaseException:  # a bug in the child: say so on its stderr, as an interpreter would
        try:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(1)
    os._exit(code)


class Child:
    """A forked `hamimig` process: `wait()` and `kill()` as on `subprocess.Popen`."""

    def __init__(self, args: list[str], stdout: int, stderr: int, env: dict[str, str] | None):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(args, stdout, stderr, env)
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            fd = None
        try:
            while True:
                done, status = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
                    return self.returncode
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(["hamimig"], timeout or 0.0)
                if fd is not None:
                    select.select([fd], [], [], left)
                else:
                    time.sleep(0.002)
        finally:
            if fd is not None:
                os.close(fd)

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def spawn(args: list[str], stdout: Path, stderr: Path, env: dict[str, str] | None = None) -> Child:
    """Start `hamimig ARGS` with its output going to the two files."""
    with stdout.open("wb") as out, stderr.open("wb") as err:
        return Child(args, out.fileno(), err.fileno(), env)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`hamimig ARGS` to completion, as `subprocess.run(..., capture_output=True, text=True)`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = Child(list(args), out.fileno(), err.fileno(), env)
        returncode = child.wait(timeout=120)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    return subprocess.CompletedProcess(["hamimig", *args], returncode, stdout, stderr)
