"""Lifecycle counters kept durably in `counters.json` (docs/formats.md "Counters"), since each
CLI call is one process and `metrics` must export counts that outlive it. Timestamps are kept
apart so no sum of the counters ever adds a time. Bookkeeping: a corrupt file reads as zeros (a
counter reset to Prometheus), and a failed write never fails an operation.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from hamimig.errors import HamimigError
from hamimig.store._fields import RecordError, check_uint, json_bytes, named, versioned_json
from hamimig.store.files import Problem, SingleFile

COUNTERS_NAME = "counters.json"
COUNTERS_VERSION = 1

NO_LABEL = ""
"""The key of an unlabelled counter's single value."""

# The counters the lifecycle keeps (docs/formats.md "Counters"); `hamimig metrics` exports them.
CREATIONS = "creations"
REUSES = "reuses"
RECLAIMS = "reclaims"
FAILURES = "failures"
FAILED_ALLOCATE = "allocate"
FAILED_DESTROY = "destroy"
FAILURE_OPS = (FAILED_ALLOCATE, FAILED_DESTROY)
EVENTS_WRITE_FAILURES = "eventsWriteFailures"
"""Event journal appends that failed (the lifecycle step they describe stood)."""

# The times kept next to the counters (set, never counted): Unix seconds by the node's clock.
LAST_RECONCILE = "lastReconcile"
"""When the last real `reconcile` pass finished running its plan (absent: never)."""


@dataclass(frozen=True)
class CounterValues:
    """What `counters.json` holds: name -> label value (`NO_LABEL` if none) -> count."""

    values: dict[str, dict[str, int]] = field(default_factory=dict)
    timestamps: dict[str, int] = field(default_factory=dict)
    """Name -> Unix seconds (`LAST_RECONCILE`); absent: never set."""
    problem: Problem | None = None

    def get(self, name: str, label: str | None = None) -> int:
        return self.values.get(name, {}).get(NO_LABEL if label is None else label, 0)

    def timestamp(self, name: str) -> int:
        """Unix seconds, 0 when never set."""
        return self.timestamps.get(name, 0)


MAX_VALUE = 2**53
"""The largest integer a Prometheus sample (a float64) holds exactly: a larger one is no count
or time hamimig wrote, and printed it would not parse as a sample value."""


def _count(value: object, where: str) -> int:
    number: int = named(check_uint, value, where)
    if number > MAX_VALUE:
        raise RecordError(f"{where} is larger than 2^53")
    return number


def decode_stored(data: bytes) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """The counters and the timestamps of a counters file."""
    doc = versioned_json(data, "counters file", COUNTERS_VERSION, "counters")
    raw = doc.get("counters")
    if not isinstance(raw, dict):
        raise RecordError("counters must be an object")
    out: dict[str, dict[str, int]] = {}
    for name, value in raw.items():
        if isinstance(value, dict):
            if not value or NO_LABEL in value:
                raise RecordError(f"counters.{name} must map non-empty label values to integers")
            out[name] = {k: _count(v, f"counters.{name}.{k}") for k, v in value.items()}
        else:
            out[name] = {NO_LABEL: _count(value, f"counters.{name}")}
    raw_times = doc.get("timestamps", {})
    if not isinstance(raw_times, dict):
        raise RecordError("timestamps must be an object")
    times = {k: _count(v, f"timestamps.{k}") for k, v in raw_times.items()}
    return out, times


def encode_counters(values: dict[str, dict[str, int]], timestamps: dict[str, int]) -> bytes:
    counters = {
        name: by_label[NO_LABEL] if set(by_label) == {NO_LABEL} else dict(sorted(by_label.items()))
        for name, by_label in sorted(values.items())
    }
    doc: dict[str, object] = {"version": COUNTERS_VERSION, "counters": counters}
    if timestamps:
        doc["timestamps"] = {k: timestamps[k] for k in sorted(timestamps)}
    return json_bytes(doc)


class Counters(SingleFile):
    """The counters file in the state directory (its writes are bookkeeping: no fault hook)."""

    store = "counters"
    file_name = COUNTERS_NAME
    decides = False

    def load(self) -> CounterValues:
        """The current counts; an absent file is all zeros, an unusable one zeros and a Problem."""
        (values, timestamps), problem = self.read_or(decode_stored, lambda: ({}, {}))
        return CounterValues(values, timestamps, problem)

    def bump(self, name: str, label: str | None = None, n: int = 1) -> None:
        """Add `n` to one counter and write the file atomically; callers hold the node lock, so
        no count is lost. An unreadable file starts again from zero rather than blocking the
        count forever. OSError (UsageError for an unusable state directory) when it fails."""
        if not name or (label is not None and not label) or n < 0:
            raise ValueError(f"invalid counter {name!r}/{label!r} += {n}")
        loaded = self.load()
        key = NO_LABEL if label is None else label
        by_label = loaded.values.setdefault(name, {})
        if by_label and (key == NO_LABEL) != (NO_LABEL in by_label):
            raise ValueError(f"counter {name!r} is used both with and without a label")
        by_label[key] = by_label.get(key, 0) + n
        self.write_named(None, COUNTERS_NAME, encode_counters(loaded.values, loaded.timestamps))

    def set_timestamp(self, name: str, seconds: int) -> None:
        """Set one timestamp (Unix seconds) and write the file atomically (0600), keeping the
        counters; like `bump`, under the node lock, and raising when the write fails."""
        if not name or seconds < 0:
            raise ValueError(f"invalid timestamp {name!r} = {seconds}")
        loaded = self.load()
        times = {**loaded.timestamps, name: seconds}
        self.write_named(None, COUNTERS_NAME, encode_counters(loaded.values, times))

    def note_timestamp(self, name: str, seconds: int) -> None:
        """`set_timestamp`, but never raising: bookkeeping never fails the pass it notes."""
        with contextlib.suppress(OSError, ValueError, HamimigError):
            self.set_timestamp(name, seconds)

    def count(self, name: str, label: str | None = None) -> None:
        """Count one lifecycle event, as `bump` does, but never raise: bookkeeping can neither
        fail nor roll back the operation it counts."""
        with contextlib.suppress(OSError, ValueError, HamimigError):
            self.bump(name, label)
