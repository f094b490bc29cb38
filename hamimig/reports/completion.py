"""The values shell completion offers that only the node knows: the MIG UUIDs, CDI device names,
profiles and GPUs its ownership records name, and a simulated node's GPUs.

Read on every TAB, so it reads the record files with the store's own loader and a simulated
node's file as JSON, and nothing else: no NVML, no config, no node lock, no write. What it
cannot read it leaves out, and it never raises: completion must never get in the operator's way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hamimig.sim.models import MODELS
from hamimig.store.records import RecordStore, forget_name, record_name

KINDS = ("mig-uuids", "cdi-names", "profiles", "gpus")
"""What `record_values` can list."""

_SHELL_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:/@-]*\Z")
"""A value completion may offer: the shell reads the answer back as words (bash even expands
globs in them), so nothing a shell would expand or split passes."""


def board_profiles() -> tuple[str, ...]:
    """Every GI profile name of the boards hamimig knows (the simulator's tables), sorted: what
    `--profile` completes to before any record names one."""
    return tuple(sorted({p.name for model in MODELS.values() for p in model.profiles}))


def record_values(state_dir: Path, kind: str) -> list[str]:
    """The sorted, distinct values of `kind` that the usable records in `state_dir` name (GPUs:
    their UUIDs and the NVML indexes last seen); [] for an unknown kind or a state directory
    that cannot be read."""
    if kind not in KINDS:
        return []
    try:
        records, _problems = RecordStore(state_dir).load()
    except Exception:  # an unreadable directory or file: complete nothing, say nothing
        return []
    if kind == "gpus":
        found = {
            str(v) for r in records.values() for v in (r.gpu_uuid, r.gpu_index) if v is not None
        }
    elif kind == "profiles":
        found = {r.profile for r in records.values()}
    else:
        # A CDI device name (mig-<sha256>) as `list` shows it; store.cdi costs a TAB 20 ms more.
        found = (
            set(records) if kind == "mig-uuids" else {forget_name(record_name(m)) for m in records}
        )
    return _safe(found)


def gpu_values(state_dir: Path, sim: Path | None) -> list[str]:
    """The NVML indexes and UUIDs of the GPUs the records name and, for a simulated node, of its
    GPUs, read from its file without its lock (it is replaced whole, never written in place)."""
    found = set(record_values(state_dir, "gpus"))
    try:
        gpus = [] if sim is None else json.loads(sim.read_text(encoding="utf-8"))["gpus"]
        found |= {str(v) for gpu in gpus for v in (gpu["index"], gpu["uuid"])}
    except Exception:  # no node, or not one: its GPUs are left out, silently
        pass
    return _safe(found)


def _safe(values: set[str]) -> list[str]:
    """The values a shell may be offered: indexes first, in order, then the names."""
    words = {v for v in values if _SHELL_SAFE.match(v)}
    return sorted(words, key=lambda w: (not w.isdigit(), int(w) if w.isdigit() else 0, w))
