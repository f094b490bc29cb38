"""`events`: the event journal, filtered, oldest first: why an instance appeared, moved or went.

Read-only and lock-free, like `list`: it reads `events.jsonl` (and the one rotated file before
it) as they are, so it works while another command runs, on a node whose lock file is gone, and
without NVML. A line that is not an event is skipped and reported as a warning, never fatal.

Filters are combined with AND. `--pod` also matches the events of the instances the pod held
after it let them go (the reclaim that destroyed one carries no pod of its own). A GPU given by
index matches the index the event recorded (an index can change across reboots; a GPU UUID
never does). A MIG UUID matches in full, by prefix, or by the CDI device name
(`mig-<sha256>`, with or without its kind).
"""

from __future__ import annotations

from dataclasses import dataclass

from hamimig.durations import parse_time
from hamimig.engine.lookup import check_reference
from hamimig.engine.node import Node
from hamimig.engine.results import Warning_
from hamimig.reports.views import EventList
from hamimig.store.cdi import device_name
from hamimig.store.events import Event

MAX_LIMIT = 1_000_000


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
    """How `--mig-uuid` matches: ("device", mig-<sha256>) or ("prefix", lowercased text)."""
    check_reference(text, mutating=False)
    name = text.rpartition("=")[2]
    if name.lower().startswith("mig-") and not name.startswith("MIG-") and len(name) == 68:
        return "device", name.lower()
    return "prefix", text.lower()


def _matches(event: Event, query: EventQuery, uuid_match: tuple[str, str] | None) -> bool:
    if uuid_match is not None:
        mig = event.get("migUUID")
        if not isinstance(mig, str):
            return False
        how, wanted = uuid_match
        if how == "device" and device_name(mig) != wanted:
            return False
        if how == "prefix" and not mig.lower().startswith(wanted):
            return False
    if isinstance(query.gpu, int) and event.get("gpuIndex") != query.gpu:
        return False
    if isinstance(query.gpu, str) and str(event.get("gpuUUID", "")).lower() != query.gpu.lower():
        return False
    if query.since is not None:
        when = parse_time(str(event.get("time", "")))
        if when is None or when < query.since:
            return False
    return True


def _of_pod(events: tuple[Event, ...], pod: str) -> list[Event]:
    """The events of `pod` and of the instances it held: an instance's events without a pod
    (its reclaim, its Error, a recovery step) belong to the pod that held it last, so that
    "why did my instance go?" is answered by `--pod` as well as by `--mig-uuid`."""
    last: dict[object, object] = {}
    out: list[Event] = []
    for event in events:
        mig, holder = event.get("migUUID"), event.get("pod")
        if holder is not None:
            last[mig] = holder
        elif mig is not None:
            holder = last.get(mig)
        if holder == pod:
            out.append(event)
    return out


def list_events(node: Node, query: EventQuery) -> EventList:
    """The journal's events that match, oldest first (the newest `limit` of them)."""
    uuid_match = None if query.mig_uuid is None else _uuid_matcher(query.mig_uuid)
    journal = node.events().read()
    held = journal.events if query.pod is None else _of_pod(journal.events, query.pod)
    matched = [e for e in held if _matches(e, query, uuid_match)]
    if query.limit is not None:
        matched = matched[len(matched) - query.limit :] if query.limit else []
    warnings = tuple(Warning_(file=p.file, reason=p.reason) for p in journal.problems)
    return EventList(events=tuple(matched), warnings=warnings, path=str(node.events().path))
