"""Field checks shared by every JSON file in the state directory.

They mirror what Go's `encoding/json` would accept for HAMi's typed struct fields (no bools for
ints, no floats for ints), so that hamimig never accepts a record that HAMi would read
differently, and they name the offending field so a Problem tells the operator what to fix.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from hamimig.hw.types import Placement


class RecordError(ValueError):
    """A durable-state file (record, intent, queue) that the rules reject; the text is why."""


def uint_field(value: Any, field: str) -> int:
    # bool is an int in Python but not in Go's decoder; 1.0 is a float here and an error there.
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"{field} must be an integer")
    if value < 0:
        raise RecordError(f"{field} must not be negative")
    return value


def nonempty_str(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise RecordError(f"{field} must be a non-empty string")
    return value


def opt_str(value: Any, field: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise RecordError(f"{field} must be a string or null")
    return value


_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
MIG_UUID = re.compile(rf"MIG-(?:{_HEX_UUID}|GPU-{_HEX_UUID}/[0-9]{{1,3}}/[0-9]{{1,3}})")
"""R470+ drivers: MIG-<uuid>; older ones: MIG-GPU-<gpu uuid>/<gi>/<ci> (docs/formats.md "MIG
UUIDs"). Use fullmatch: `$` also matches before a trailing newline."""


def mig_uuid_field(value: Any, field: str = "migUUID") -> str:
    """Stricter than HAMi's "starts with MIG-": an identity we may act on must be exactly
    what a driver prints, never something that could be a path or hide another string."""
    if not isinstance(value, str) or not MIG_UUID.fullmatch(value):
        raise RecordError(
            f"{field} {value!r} is not a MIG UUID (MIG-<uuid>, or MIG-GPU-<uuid>/<gi>/<ci>)"
        )
    return value


def placement_field(value: Any, field: str = "placement") -> Placement:
    if not isinstance(value, dict):
        raise RecordError(f"{field} must be an object with start and size")
    start = uint_field(value.get("start"), f"{field}.start")
    size = uint_field(value.get("size"), f"{field}.size")
    if size == 0:
        raise RecordError(f"{field}.size must be greater than 0")
    return Placement(start, size)


def placement_json(p: Placement) -> dict[str, int]:
    return {"start": p.start, "size": p.size}


def _not_json(constant: str) -> Any:
    # Python's json reads NaN and Infinity; Go's encoding/json refuses the whole file, so HAMi
    # would not load a record that hamimig would act on.
    raise RecordError(f"it contains {constant}, which JSON does not allow")


def json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_not_json)
    except UnicodeDecodeError:
        raise RecordError(f"{what} is not UTF-8") from None
    except (json.JSONDecodeError, RecordError) as exc:
        raise RecordError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise RecordError(f"{what} is nested too deeply") from None
    if not isinstance(doc, dict):
        raise RecordError(f"{what} is not a JSON object")
    return doc


def reason_of(exc: BaseException) -> str:
    """A one-line reason for a Problem, without Python's exception class names."""
    if isinstance(exc, OSError):
        return f"cannot read: {exc.strerror or exc}"
    return str(exc)


def uuid_digest(mig_uuid: str) -> str:
    """sha256 hex of a MIG UUID: HAMi names records, specs and CDI devices by it (old-style
    UUIDs contain `/`, which no file or device name may)."""
    return hashlib.sha256(mig_uuid.encode("utf-8")).hexdigest()


def uuid_digest_like(text: str) -> bool:
    """Whether `text` has the form of `uuid_digest`'s output (64 hex digits, either case)."""
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)


_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_UID = re.compile(r"[!-~]{1,128}")  # printable ASCII, no space: what any API server issues


def k8s_label_field(value: Any, field: str) -> str:
    """A namespace as Kubernetes spells it (a DNS-1123 label): anything else in a record was
    not written by hamimig or HAMi, and would break one-line output and `awk` fields."""
    text = nonempty_str(value, field)
    if len(text) > 63 or not _DNS_LABEL.fullmatch(text):
        raise RecordError(f"{field} {text!r} is not a Kubernetes namespace")
    return text


def k8s_subdomain_field(value: Any, field: str) -> str:
    """A pod name as Kubernetes spells it (a DNS-1123 subdomain)."""
    text = nonempty_str(value, field)
    if len(text) > 253 or not all(_DNS_LABEL.fullmatch(part) for part in text.split(".")):
        raise RecordError(f"{field} {text!r} is not a Kubernetes pod name")
    return text


def uid_field(value: Any, field: str) -> str | None:
    text = opt_str(value, field)
    if text and not _UID.fullmatch(text):
        raise RecordError(f"{field} {text!r} is not a pod UID")
    return text or None
