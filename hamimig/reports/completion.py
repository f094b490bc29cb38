"""The values shell completion offers that only the node knows: the MIG UUIDs and profiles its
ownership records name.

Read on every TAB (`hamimig __complete KIND`), so it reads the record files with the store's own
loader and nothing else: no NVML, no config, no node lock, no write. What it cannot read it
leaves out, and it never raises: completion must never get in the operator's way.
"""

from __future__ import annotations

import re
from pathlib import Path

from hamimig.store.records import RecordStore

KINDS = ("mig-uuids", "profiles")
"""What `__complete` can list."""

_SHELL_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:/@-]*\Z")
"""A value a completion script may offer: bash's `compgen -W` expands its word list (a `$(...)`
in a record's profile would run), so nothing a shell would expand or split passes."""


def record_values(state_dir: Path, kind: str) -> list[str]:
    """The sorted, distinct values of `kind` that the usable records in `state_dir` name; [] for
    an unknown kind or a state directory that cannot be read."""
    if kind not in KINDS:
        return []
    try:
        records, _problems = RecordStore(state_dir).load()
    except Exception:  # an unreadable directory or file: complete nothing, say nothing
        return []
    found = set(records) if kind == "mig-uuids" else {r.profile for r in records.values()}
    return sorted(value for value in found if _SHELL_SAFE.match(value))
