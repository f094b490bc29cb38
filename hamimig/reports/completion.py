"""The completion values only the node knows (what its records name, a simulated node's GPUs).

Read on every TAB, so it reads only the record files and the simulated node's JSON (no NVML,
config, lock or write), and it never raises: completion must never get in the operator's way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hamimig.sim.models import MODELS
from hamimig.store.records import Record, RecordStore, forget_name, record_name

_SHELL_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:/@-]*\Z")
"""A value completion may offer: the shell reads the answer back as words (bash even expands
globs in them), so nothing a shell would expand or split passes."""


def board_profiles() -> tuple[str, ...]:
    """Every GI profile name of the boards hamimig knows (the simulator's tables), sorted: what
    `--profile` completes to before any record names one."""
    return tuple(sorted({p.name for model in MODELS.values() for p in model.profiles}))


def _records(state_dir: Path) -> dict[str, Record]:
    """The usable records in `state_dir`; none when it cannot be read (complete nothing, say
    nothing)."""
    try:
        return RecordStore(state_dir).load()[0]
    except Exception:
        return {}


def profiles(state_dir: Path | None) -> list[str]:
    """The boards' profiles and those the records in `state_dir` name."""
    named = () if state_dir is None else _safe({r.profile for r in _records(state_dir).values()})
    return sorted({*board_profiles(), *named})


def instances(state_dir: Path, cdi_names: bool) -> list[str]:
    """The records' MIG UUIDs, or their CDI device names (mig-<sha256>) as `list` shows them
    (store.cdi would cost a TAB 20 ms more)."""
    records = _records(state_dir)
    return _safe({forget_name(record_name(m)) for m in records} if cdi_names else set(records))


def gpus(state_dir: Path, sim: Path | None) -> list[str]:
    """The NVML indexes (last seen) and UUIDs of the GPUs the records name and, for a simulated
    node, of its GPUs, read from its file without its lock (it is replaced whole, never written
    in place)."""
    records = _records(state_dir).values()
    found = {str(v) for r in records for v in (r.gpu_uuid, r.gpu_index) if v is not None}
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
