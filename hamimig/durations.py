"""Durations as operators write them and hamimig prints them (docs/formats.md "Config"), and
RFC 3339 times. One grammar everywhere, a strict subset of Go's `time.ParseDuration` so a value
from a Helm chart means the same here; what it cannot say exactly is refused, not rounded, since
a policy that destroys instances must not guess. Imports nothing of hamimig, so every layer can.
"""

from __future__ import annotations

import datetime
import re

MAX_SECONDS = 10 * 366 * 24 * 3600
"""Ten years: longer is a typo (and would overflow the arithmetic of times), not a policy."""

_DURATION = re.compile(r"^(?:(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?|(?P<n>\d+))$")


class DurationError(ValueError):
    """Text that is not a duration; the message says what is accepted."""


GRAMMAR = "a duration like 90s, 30m, 2h or 1h30m, or whole seconds"


def parse_duration(text: str) -> int:
    """Whole seconds of a duration in the grammar above; raises `DurationError`."""
    value = text.strip()
    match = _DURATION.match(value) if value and value.isascii() else None
    if match is None:
        raise DurationError(f"{text!r} is not {GRAMMAR}")
    # Leading zeros are fine (`0090` is 90); past 30 digits a number is over the limit anyway.
    parts = {
        k: int(v) if len(v) <= 30 else MAX_SECONDS + 1 for k, v in match.groupdict("0").items()
    }
    seconds = parts["h"] * 3600 + parts["m"] * 60 + parts["s"] + parts["n"]
    if seconds > MAX_SECONDS:
        raise DurationError(f"{text!r} is longer than ten years")
    return seconds


def format_duration(seconds: float) -> str:
    """`3h12m`, `45m10s`, `9s`, `2d3h`: the two largest units, rounded down to whole seconds
    (so a printed age never overstates how long an instance has been idle)."""
    whole = max(0, int(seconds))
    parts = (whole // 86400, whole // 3600 % 24, whole // 60 % 60, whole % 60)
    first = next((i for i, n in enumerate(parts) if n), 3)  # the largest unit, or seconds
    units = zip(parts[first : first + 2], "dhms"[first:], strict=False)
    return "".join(f"{n}{unit}" for i, (n, unit) in enumerate(units) if n or i == 0)


def exact_duration(seconds: int) -> str:
    """`1h30m5s`: every unit, in the grammar `parse_duration` reads back to the same value."""
    hours, rest = divmod(max(0, seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
    return text or "0s"


def to_rfc3339(epoch: float) -> str:
    """UTC with milliseconds, the form every timestamp in hamimig's files has."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds")


_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
"""RFC 3339's date-time (section 5.6), not ISO 8601's other forms (`20261202T0400Z`, weeks)."""


def parse_time(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time with an offset (`Z` or `+00:00`), or None
    when `text` is not one: a time without a zone could be any of 24 instants."""
    value = text.strip()
    if not value or not value.isascii() or len(value) > 40 or not _RFC3339.match(value):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None or "T" not in value.upper():
        return None
    try:
        return parsed.timestamp()
    except (OverflowError, OSError, ValueError):
        return None
