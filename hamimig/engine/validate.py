"""Checks for values that enter hamimig from the command line, applied where they enter.

A value that reaches a record, a CDI spec or NVML is trusted from then on (HAMi reads records
back), so each check refuses (exit 2) before any lock or change, naming the value as the caller
calls it (`what`) so the message points at the option the user typed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from hamimig.errors import UsageError
from hamimig.hw.types import GiProfile, Placement, PlacementSpec

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

MAX_LABEL = 63
MAX_SUBDOMAIN = 253
MAX_INDEX = 2**31
"""Container and device indexes are Go ints in HAMi's annotations and int32 in the pod spec."""


def nonempty(value: str, what: str) -> str:
    """An empty string is refused rather than read as "use the default" or "match anything"."""
    if not value:
        raise UsageError(f"{what} must not be empty")
    return value


def namespace(value: str) -> str:
    """A Kubernetes namespace: a DNS-1123 label (lowercase alphanumerics and '-', <= 63)."""
    if len(value) > MAX_LABEL or not _DNS_LABEL.fullmatch(value):
        raise UsageError(
            f"invalid namespace {value!r}: a DNS-1123 label (lowercase letters, digits and '-', "
            f"starting and ending with a letter or digit, at most {MAX_LABEL} characters)"
        )
    return value


def pod_name(value: str) -> str:
    """A pod name: a DNS-1123 subdomain (dot-separated labels, <= 253 in all)."""
    labels = value.split(".")
    if len(value) > MAX_SUBDOMAIN or not all(_DNS_LABEL.fullmatch(part) for part in labels):
        raise UsageError(
            f"invalid pod name {value!r}: a DNS-1123 subdomain (lowercase letters, digits, '-' "
            f"and '.', each dot-separated part starting and ending with a letter or digit, at "
            f"most {MAX_SUBDOMAIN} characters)"
        )
    return value


def pod_uid(value: str, what: str) -> str:
    """A pod UID as the API server issues it: RFC 4122 text, 8-4-4-4-12 hex digits."""
    if not _UUID.fullmatch(value):
        raise UsageError(f"invalid {what} {value!r}: use the pod's UID (8-4-4-4-12 hex digits)")
    return value.lower()  # as the API server writes it, so that records compare equal


def index(value: int, what: str) -> int:
    """A container or device index: 0 <= n < 2**31."""
    if not 0 <= value < MAX_INDEX:
        raise UsageError(f"{what} must be between 0 and {MAX_INDEX - 1}, not {value}")
    return value


def timeout(value: float, what: str) -> float:
    """A wait in seconds: finite and not negative (nan would make every comparison false)."""
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{what} must be a finite number of seconds >= 0, not {value}")
    return value


def slice_count(profiles: Iterable[GiProfile]) -> int:
    """How many memory slices the GPU has: the furthest end of any profile's placement."""
    return max((p.end for profile in profiles for p in profile.placements), default=0)


def reclaim_window(asked: PlacementSpec, slices: int) -> Placement:
    """A placement to reclaim (size 1 when only a start is given), within the GPU's `slices`
    memory slices."""
    start = asked.start
    size = 1 if asked.size is None else asked.size
    if size < 1 or start >= slices or start + size > slices:
        raise UsageError(
            f"placement '{asked}' is outside the GPU's {slices} memory slices: START is "
            f"0 to {slices - 1}, SIZE at least 1 and START+SIZE at most {slices}"
        )
    return Placement(start, size)
