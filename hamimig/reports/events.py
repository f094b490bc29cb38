"""`events`: the event journal, filtered, oldest first: why an instance appeared, moved or went.

Read-only and lock-free, so it works while another command runs, without a lock file or NVML; a
bad line is a warning, never fatal. `--pod` also follows the instances the pod held, because the
reclaim that destroyed one carries no pod of its own. The journal's format: docs/formats.md.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from hamimig.durations import parse_time
from hamimig.engine.lookup import check_reference
from hamimig.engine.node import Node
from hamimig.engine.results import Warning_
from hamimig.engine.safety import state_dir_problems
from hamimig.errors import UsageError
from hamimig.reports.views import EventList
from hamimig.store.cdi import device_name
from hamimig.store.events import Event

MAX_LIMIT = 1_000_000
TABLE_LIMIT = 500
"""Events a table shows without `--limit`: the newest; more is a job for `-o json` or a filter."""
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class EventQuery:
    """What `events` was asked for; every filter None is the whole journal."""

    mig_uuid: str | None = None
    pod: str | None = None
    """`NAMESPACE/NAME`, already checked."""
    gpu: int | str | None = None
    since: float | None = None
    """Seconds since the epoch: events at or after it."""
    limit: int | None = None
    """The newest N of what matched."""


def _uuid_matcher(text: str) -> tuple[str, str]:
    """How `--mig-uuid` matches: ("device", mig-<sha256> or a prefix of it) or ("prefix",
    lowercased text)."""
    text = text.strip()
    name = text.rpartition("=")[2]
    lowered = name.lower()
    device = name.startswith("mig-") and all(c in _HEX for c in lowered[4:])
    if not device and (not text.upper().startswith("MIG-") or "=" in text):
        raise UsageError(
            f"--mig-uuid {text!r}: give a MIG UUID (MIG-…), a prefix of one, or its CDI device "
            "name (mig-<sha256>, optionally KIND=mig-<sha256>) or a prefix of that"
        )
    check_reference(text, mutating=False)
    return ("device", lowered) if device else ("prefix", text.lower())


class _Selection:
    """The filters as one predicate over the journal, in order. `--pod` keeps the events of
    the pod and of the instances it held: an instance's events without a pod (its reclaim, its
    Error, a recovery step) belong to the pod that held it last, so that "why did my instance
    go?" is answered by `--pod` as well as by `--mig-uuid`."""

    def __init__(self, query: EventQuery) -> None:
        self.query = query
        self.uuid = None if query.mig_uuid is None else _uuid_matcher(query.mig_uuid)
        self.holder: dict[str, object] = {}

    def __call__(self, event: Event) -> bool:
        mig = event.get("migUUID")
        mig = mig if isinstance(mig, str) else None
        # The pod's filter first: it learns who held each instance from every event it sees.
        return (
            self._pod(event, mig)
            and self._instance(mig)
            and self._gpu(event)
            and self._since(event)
        )

    def _pod(self, event: Event, mig: str | None) -> bool:
        if self.query.pod is None:
            return True
        holder = event.get("pod")
        if mig is not None:  # an instance's event without a pod is its last holder's
            holder = self.holder[mig] = self.holder.get(mig) if holder is None else holder
        return holder == self.query.pod

    def _instance(self, mig: str | None) -> bool:
        if self.uuid is None:
            return True
        how, wanted = self.uuid
        if mig is None:
            return False
        return (device_name(mig) if how == "device" else mig.lower()).startswith(wanted)

    def _gpu(self, event: Event) -> bool:
        gpu, index = self.query.gpu, event.get("gpuIndex")
        if isinstance(gpu, int):
            return index == gpu and not isinstance(index, bool)
        return gpu is None or str(event.get("gpuUUID", "")).lower() == gpu.lower()

    def _since(self, event: Event) -> bool:
        if self.query.since is None:
            return True
        when = parse_time(str(event.get("time", "")))
        return when is not None and when >= self.query.since


def _forgeable(node: Node) -> list[Warning_]:
    """Why others than root could have written the journal, so that its events prove nothing:
    the state directory's own problems (`safety.state_dir_problems`, what `list` warns of),
    then the journal file's mode and owner."""
    warnings = state_dir_problems(node.state_dir)
    path = node.events.path
    try:
        st = os.lstat(path)
    except OSError:
        return warnings
    if not stat.S_ISREG(st.st_mode):
        return warnings  # a link or a FIFO planted there: the reader's warning says so
    if stat.S_IMODE(st.st_mode) & 0o022:
        why = "is group- or world-writable"
    elif st.st_uid not in (0, os.getuid()):
        why = f"belongs to uid {st.st_uid}"
    else:
        return warnings
    reason = f"{why}: others could have written these events"
    return [*warnings, Warning_(file=str(path), reason=reason)]


def list_events(node: Node, query: EventQuery) -> EventList:
    """The journal's events that match, in the order they were written (oldest first unless
    a clock was set back), the newest `limit` of them."""
    journal = node.events.read(_Selection(query), query.limit)
    warnings = _forgeable(node)
    warnings += [Warning_(file=p.file, reason=p.reason) for p in journal.problems]
    return EventList(
        events=journal.events,
        warnings=tuple(warnings),
        path=str(node.events.path),
        matched=journal.matched,
    )
