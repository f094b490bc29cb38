"""The checked fields every JSON file in the state directory is declared with, and their reader
and writer (docs/design.md "Declared data"). The checks mirror Go's `encoding/json` for HAMi's
typed fields, so hamimig never accepts a record HAMi would read differently, and the first
complaint names its field. A file is checked when read and when written, not when built.
Not pydantic: every TAB reads the records and must not import it.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from hamimig.durations import parse_time
from hamimig.hw.types import Placement


class RecordError(ValueError):
    """A durable-state file (record, intent, queue) that the rules reject; the text is why."""


Rule = tuple[Callable[[Any], object], str]


def check(*rules: Rule, optional: bool = False) -> Callable[[Any], Any]:
    """A value's check: each rule's text (`{!r}` is the value) for the first rule it breaks."""

    def check(value: Any) -> Any:
        if value is None and optional:
            return None
        for ok, text in rules:
            if not ok(value):
                raise ValueError(text.format(value))
        return value

    return check


_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
MIG_UUID = re.compile(rf"MIG-(?:{_HEX_UUID}|GPU-{_HEX_UUID}/[0-9]{{1,3}}/[0-9]{{1,3}})")
"""R470+ drivers: MIG-<uuid>; older ones: MIG-GPU-<gpu uuid>/<gi>/<ci> (docs/formats.md "MIG
UUIDs"). Use fullmatch: `$` also matches before a trailing newline."""
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_UID = re.compile(r"[!-~]{1,128}")  # printable ASCII, no space: what any API server issues

# bool is an int in Python but not in Go's decoder; 1.0 is a float here and an error there.
_INT: Rule = (lambda v: isinstance(v, int) and not isinstance(v, bool), "must be an integer")
_NATURAL: Rule = (lambda v: v >= 0, "must not be negative")
TEXT: Rule = (lambda v: isinstance(v, str) and v, "must be a non-empty string")
_STR_OR_NULL: Rule = (lambda v: isinstance(v, str), "must be a string or null")
# Stricter than HAMi's "starts with MIG-": an identity we may act on must be exactly what a
# driver prints, never something that could be a path or hide another string.
_MIG: Rule = (
    lambda v: isinstance(v, str) and MIG_UUID.fullmatch(v),
    "{!r} is not a MIG UUID (MIG-<uuid>, or MIG-GPU-<uuid>/<gi>/<ci>)",
)
_UINT = (_INT, _NATURAL)
check_uint = check(*_UINT)
check_mig_uuid = check(_MIG)


def check_placement(value: Any) -> Placement:
    if not isinstance(value, dict):
        raise RecordError("placement must be an object with start and size")
    start, size = (named(check_uint, value.get(k), f"placement.{k}") for k in ("start", "size"))
    if size == 0:
        raise RecordError("placement.size must be greater than 0")
    return Placement(start, size)


check_opt_uint = check(*_UINT, optional=True)
check_nonempty = check(TEXT)
check_opt_str = check(_STR_OR_NULL, optional=True)
check_str = check((lambda v: isinstance(v, str), "must be a string"))
check_opt_mig_uuid = check(_MIG, optional=True)
# An RFC 3339 time with its offset, or absent: the idle policy destroys instances by it, so a
# value it cannot read is refused, never taken as "idle forever" or "just now".
_RFC3339: Rule = (lambda v: parse_time(v), "{!r} is not an RFC 3339 time with an offset")
check_time = check(_STR_OR_NULL, _RFC3339, optional=True)
# A namespace and a pod name as Kubernetes spells them (a DNS-1123 label and subdomain): anything
# else in a record was not written by hamimig or HAMi, and would break one-line output and `awk`.
_LABEL: Rule = (
    lambda v: len(v) <= 63 and _DNS_LABEL.fullmatch(v),
    "{!r} is not a Kubernetes namespace",
)
_SUBDOMAIN: Rule = (
    lambda v: len(v) <= 253 and all(_DNS_LABEL.fullmatch(part) for part in v.split(".")),
    "{!r} is not a Kubernetes pod name",
)
_POD_UID: Rule = (lambda v: not v or _UID.fullmatch(v), "{!r} is not a pod UID")
check_namespace = check(TEXT, _LABEL)
check_pod_name = check(TEXT, _SUBDOMAIN)
_check_uid = check(_STR_OR_NULL, _POD_UID, optional=True)


def check_pod_uid(value: Any) -> str | None:
    return _check_uid(value) or None


def named(check: Callable[[Any], Any], value: Any, field: str) -> Any:
    """`check(value)`, its complaint a `RecordError` that names `field`."""
    try:
        return check(value)
    except RecordError:
        raise
    except ValueError as exc:
        raise RecordError(f"{field} {exc}") from None


@dataclasses.dataclass(frozen=True)
class Json:
    """A field's JSON name and check, as `Annotated` metadata: `under` names the object it is
    kept in (a record's `"hamimig"` key), `required` checks it even where it has a default,
    `first` before the fields that are not (the order their checks always ran in, which picks
    the field a refusal names)."""

    name: str
    check: Callable[[Any], Any]
    under: str | None = None
    required: bool = False
    first: bool = False


T = TypeVar("T")
_Spec = tuple[tuple[str, Json, bool], ...]
_SPECS: dict[type[Any], _Spec] = {}


def _spec(cls: type[Any]) -> _Spec:
    """(attribute, Json, required) of each declared field, in order; read once per class."""
    if cls not in _SPECS:
        hints = typing.get_type_hints(cls, include_extras=True)
        _SPECS[cls] = tuple(
            (f.name, meta, meta.required or f.default is dataclasses.MISSING)
            for f in dataclasses.fields(cls)
            for meta in getattr(hints[f.name], "__metadata__", ())[:1]
        )
    return _SPECS[cls]


def read(cls: type[Any], doc: dict[str, Any], where: str = "", under: str | None = None) -> Any:
    """The values of `cls`'s fields kept in `doc` (those `under` it), by attribute; else a
    `RecordError` naming the first field that is wrong, under `where`."""
    values = {}
    for attr, spec, required in sorted(_spec(cls), key=lambda field: not field[1].first):
        if spec.under == under and (required or spec.name in doc):
            field = f"{where}.{spec.name}" if where else spec.name
            values[attr] = named(spec.check, doc.get(spec.name), field)
    return values


def validated(cls: type[T], doc: Any, where: str = "", what: str | None = None) -> T:
    """`doc` read as a `cls`; a `RecordError` naming the first field that is wrong (under
    `where`: `owner`, `hamimig.lastOwner`), or `what` when it is no JSON object."""
    if not isinstance(doc, dict):
        raise RecordError(what or f"{where} must be an object")
    return cls(**read(cls, doc, where))


def _plain(value: Any) -> Any:
    if isinstance(value, Placement):
        return {"start": value.start, "size": value.size}
    if isinstance(value, enum.Enum):
        return value.value
    return value.to_json() if isinstance(value, Stored) else value


def dumped(obj: Any, under: str | None = None) -> dict[str, Any]:
    """The declared fields of `obj` (those `under` the given key) as JSON, in their order."""
    return {
        spec.name: _plain(getattr(obj, attr))
        for attr, spec, _ in _spec(type(obj))
        if spec.under == under
    }


class Stored:
    """A dataclass that is a JSON object in a state file, by its fields' JSON names."""

    def to_json(self) -> dict[str, Any]:
        return dumped(self)


def not_json(constant: str) -> Any:
    # Python's json reads NaN and Infinity; Go's encoding/json refuses the whole file, so HAMi
    # would not load a record that hamimig would act on.
    raise RecordError(f"it contains {constant}, which JSON does not allow")


def versioned_json(
    data: bytes, what: str, version: int, kind: str = "", reader: str = "this hamimig reads"
) -> dict[str, Any]:
    """`data` as a JSON object whose `version` is `version`; else a `RecordError` that calls the
    file `what`, and its version `kind`'s (`what` unless given), which `reader` names."""
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=not_json)
    except UnicodeDecodeError:
        raise RecordError(f"{what} is not UTF-8") from None
    except (json.JSONDecodeError, RecordError) as exc:
        raise RecordError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise RecordError(f"{what} is nested too deeply") from None
    if not isinstance(doc, dict):
        raise RecordError(f"{what} is not a JSON object")
    found = doc.get("version")
    if isinstance(found, bool) or not isinstance(found, int) or found != version:
        raise RecordError(f"unsupported {kind or what} version {found!r} ({reader} {version})")
    return doc


def json_bytes(doc: Any) -> bytes:
    """A state file's bytes: `doc` indented by two, with a final newline."""
    return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


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
