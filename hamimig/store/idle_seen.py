"""When the idle policy first saw each of HAMi's own Idle records (docs/formats.md "Idle-seen
times"): those carry no `idleSince`, and hamimig never rewrites them just to start a clock.
Losing the file only restarts those clocks, so the policy waits longer, never shorter.
"""

from __future__ import annotations

from hamimig.durations import parse_time
from hamimig.store._fields import RecordError, check_mig_uuid, json_bytes, named, versioned_json
from hamimig.store.files import Problem, SingleFile

IDLE_SEEN_NAME = "idle-seen.json"
IDLE_SEEN_VERSION = 1


def decode_idle_seen(data: bytes) -> dict[str, str]:
    doc = versioned_json(data, "idle-seen file", IDLE_SEEN_VERSION, "idle-seen")
    raw = doc.get("seen")
    if not isinstance(raw, dict):
        raise RecordError("seen must be an object from MIG UUID to time")
    seen: dict[str, str] = {}
    for key, value in raw.items():
        mig_uuid: str = named(check_mig_uuid, key, "seen key")
        if not isinstance(value, str) or parse_time(value) is None:
            raise RecordError(f"seen.{mig_uuid} must be an RFC 3339 time with an offset")
        seen[mig_uuid] = value
    return seen


def encode_idle_seen(seen: dict[str, str]) -> bytes:
    doc = {"version": IDLE_SEEN_VERSION, "seen": {k: seen[k] for k in sorted(seen)}}
    return json_bytes(doc)


class IdleSeen(SingleFile):
    """The idle-seen file in the state directory."""

    store = "idle-seen"
    file_name = IDLE_SEEN_NAME

    def load(self) -> tuple[dict[str, str], Problem | None]:
        """First-seen times by MIG UUID; an unusable file reads as empty, with its Problem."""
        return self.read_or(decode_idle_seen, dict)

    def save(self, seen: dict[str, str]) -> None:
        """Replace the file atomically (0600). Bookkeeping like the counters (losing a write
        only restarts clocks), so it has no fault hook of its own."""
        self.write_named(None, IDLE_SEEN_NAME, encode_idle_seen(seen))
