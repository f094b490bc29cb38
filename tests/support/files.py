"""Snapshots of directory trees, to assert that a command left the state and CDI directories (or
any other) exactly as they were, or holds exactly the files it should.

Two views, for two kinds of question:

- `tree(*dirs)`: every file below the directories, by path, with its permission bits and bytes;
  nothing is left out, the node lock included. For "this command changed no file".
- `entries(directory)`: one directory by entry name, with what each entry is (file, directory,
  symbolic link) and, for files, bytes and mode; the node lock is left out, as a command may
  create it on a node that has none yet. For "these are the files here", where names matter and
  where a test plants links or directories of its own.

`lifecycle_files(directory)` is `entries` without the metrics counters and the event journal
as well: they record what happened (a failed command counts its failure and logs its event), so
a test about the lifecycle's own files leaves them to tests/test_metrics.py and
tests/test_events.py.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

# The node lock and the metrics counters, by the names docs/formats.md's table of files gives them.
LOCK_NAME = "hamimig.lock"
COUNTERS_NAME = "counters.json"
EVENT_JOURNAL = ("events.jsonl", "events.jsonl.1")
BOOKKEEPING = (COUNTERS_NAME, *EVENT_JOURNAL)


def tree(*dirs: Path) -> dict[str, tuple[int, bytes]]:
    """Every file below `dirs` (absent ones have none): path -> (permission bits, bytes)."""
    found: dict[str, tuple[int, bytes]] = {}
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                found[str(path)] = (stat.S_IMODE(path.stat().st_mode), path.read_bytes())
    return found


def entries(directory: Path) -> dict[str, Any]:
    """Every entry of a directory (the node lock aside), by name: ("file", bytes, mode),
    ("dir", mode, its entries) or ("link", target). An absent directory has none."""
    if not directory.exists():
        return {}
    out: dict[str, Any] = {}
    for path in sorted(directory.iterdir()):
        if path.name == LOCK_NAME:
            continue
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[path.name] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            out[path.name] = ("dir", stat.S_IMODE(st.st_mode), entries(path))
        else:
            out[path.name] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


def lifecycle_files(directory: Path) -> dict[str, Any]:
    """`entries` without the metrics counters and the event journal (see the module's
    docstring)."""
    return {name: e for name, e in entries(directory).items() if name not in BOOKKEEPING}
