"""Fresh Python interpreters, for what only a new process shows: a second holder of the node lock,
a process that exits without `nvmlShutdown`, the adapter used from another process at the same
time. The child runs at the repository root, so it imports this checkout's hamimig."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_python(script: str, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -c SCRIPT ARGS` in a child process; its output is captured as text."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=check,
    )
