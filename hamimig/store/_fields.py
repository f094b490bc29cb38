"""The field types every JSON file in the state directory is declared with, and their reader.

Each file format is a dataclass whose fields carry their JSON name and one of these types;
pydantic reads and writes them (`Stored.from_json`, `Stored.to_json`). The types mirror what
Go's `encoding/json` would accept for HAMi's typed struct fields (no bools or floats for ints),
so that hamimig never accepts a record that HAMi would read differently. Each check is done by
the type's own validator, not by pydantic's strict mode (which would refuse a JSON object for a
dataclass), and names the offending field so a Problem tells the operator what to fix.
Construction in code stays a plain dataclass call: a file is checked when read, and when written
(its encoder reads its own output back).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BeforeValidator, TypeAdapter, ValidationError

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
_TEXT: Rule = (lambda v: isinstance(v, str) and v, "must be a non-empty string")
_STR_OR_NULL: Rule = (lambda v: isinstance(v, str), "must be a string or null")
# Stricter than HAMi's "starts with MIG-": an identity we may act on must be exactly what a
# driver prints, never something that could be a path or hide another string.
_MIG: Rule = (
    lambda v: isinstance(v, str) and MIG_UUID.fullmatch(v),
    "{!r} is not a MIG UUID (MIG-<uuid>, or MIG-GPU-<uuid>/<gi>/<ci>)",
)
UINT = (_INT, _NATURAL)
check_uint = check(*UINT)
check_mig_uuid = check(_MIG)


def _placement(value: Any) -> Placement:
    if not isinstance(value, dict):
        raise RecordError("placement must be an object with start and size")
    start, size = (named(check_uint, value.get(k), f"placement.{k}") for k in ("start", "size"))
    if size == 0:
        raise RecordError("placement.size must be greater than 0")
    return Placement(start, size)


UInt = Annotated[int, BeforeValidator(check_uint)]
OptUInt = Annotated[int | None, BeforeValidator(check(_INT, _NATURAL, optional=True))]
NonEmpty = Annotated[str, BeforeValidator(check(_TEXT))]
OptStr = Annotated[str | None, BeforeValidator(check(_STR_OR_NULL, optional=True))]
Str = Annotated[str, BeforeValidator(check((lambda v: isinstance(v, str), "must be a string")))]
MigUuid = Annotated[str, BeforeValidator(check_mig_uuid)]
OptMigUuid = Annotated[str | None, BeforeValidator(check(_MIG, optional=True))]
PlacementField = Annotated[Placement, BeforeValidator(_placement)]
# An RFC 3339 time with its offset, or absent: the idle policy destroys instances by it, so a
# value it cannot read is refused, never taken as "idle forever" or "just now".
_RFC3339: Rule = (lambda v: parse_time(v), "{!r} is not an RFC 3339 time with an offset")
Time = Annotated[str | None, BeforeValidator(check(_STR_OR_NULL, _RFC3339, optional=True))]
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
check_namespace = check(_TEXT, _LABEL)
check_pod_name = check(_TEXT, _SUBDOMAIN)
check_pod_uid = check(_STR_OR_NULL, _POD_UID, optional=True)
Namespace = Annotated[str, BeforeValidator(check_namespace)]
PodName = Annotated[str, BeforeValidator(check_pod_name)]
PodUid = Annotated[str | None, BeforeValidator(check_pod_uid), AfterValidator(lambda v: v or None)]


def named(check: Callable[[Any], Any], value: Any, field: str) -> Any:
    """`check(value)`, its complaint a `RecordError` that names `field`."""
    try:
        return check(value)
    except RecordError:
        raise
    except ValueError as exc:
        raise RecordError(f"{field} {exc}") from None


T = TypeVar("T")


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    # Built on first use, not at import: start-up (`--help`, completion) never pays for it.
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def validated(cls: type[T], doc: Any, where: str = "", what: str | None = None) -> T:
    """`doc` read as a `cls`; else a `RecordError` naming the first field that is wrong
    (under `where`: `owner`, `hamimig.lastOwner`). A missing field is read as null, as the
    checks always did: its own check says why it is needed."""
    if not isinstance(doc, dict):
        raise RecordError(what or f"{where or 'it'} must be an object")
    try:
        return _adapter(cls).validate_python(doc)  # type: ignore[no-any-return]
    except ValidationError as exc:
        first = exc.errors()[0]
    if first["type"] == "missing" and len(first["loc"]) == 1:
        return validated(cls, {**doc, first["loc"][0]: None}, where, what)
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, RecordError):
        raise RecordError(str(cause))
    field = ".".join(str(part) for part in (where, *first["loc"]) if part != "")
    raise RecordError(f"{field} {cause or first['msg']}")


def dumped(obj: Any) -> dict[str, Any]:
    """A dataclass declared with these types as its JSON object, by its fields' JSON names."""
    doc: dict[str, Any] = _adapter(type(obj)).dump_python(obj, mode="json", by_alias=True)
    return doc


class Stored:
    """A dataclass that is a JSON object in a state file, by its fields' JSON names."""

    def to_json(self) -> dict[str, Any]:
        return dumped(self)

    @classmethod
    def from_json(cls: type[T], doc: Any, where: str = "") -> T:
        """Raises ValueError (a `RecordError`) naming the first field that is wrong."""
        return validated(cls, doc, where)


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


def check_version(doc: dict[str, Any], expected: int, what: str, reader: str) -> None:
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version != expected:
        raise RecordError(f"unsupported {what} version {version!r} ({reader})")


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
