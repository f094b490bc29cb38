"""HAMi v1 ownership records (docs/formats.md "Ownership records"): HAMi's format, so HAMi's
device plugin and hamimig can take turns on one node. Loading is stricter than HAMi's only where
leniency would let hamimig act on an identity it cannot prove; an unreadable record is a
`Problem`, never guessed at.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

from hamimig.hw.types import Placement
from hamimig.store._fields import (
    Json,
    Stored,
    check_mig_uuid,
    check_namespace,
    check_nonempty,
    check_opt_str,
    check_opt_uint,
    check_placement,
    check_pod_name,
    check_pod_uid,
    check_time,
    check_uint,
    dumped,
    json_bytes,
    read,
    uuid_digest,
    uuid_digest_like,
    validated,
    versioned_json,
)
from hamimig.store._fields import (
    RecordError as RecordError,  # re-exported: callers catch it from here
)
from hamimig.store.files import Problem, StoreFiles
from hamimig.vocabulary import RECORD_STATES, FileOpName, State

RECORD_PREFIX = "hami-owned-mig-"
LOADER_PREFIX = "hami-owned-"
"""HAMi's loader reads every `hami-owned-*.json`, not only `hami-owned-mig-*`, so ours does too."""
RECORD_SUFFIX = ".json"
HAMI_VERSION = 1
SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Owner(Stored):
    """The pod container device slot an Active instance is allocated to."""

    namespace: Annotated[str, Json("namespace", check_namespace)]
    name: Annotated[str, Json("name", check_pod_name)]
    uid: Annotated[str | None, Json("uid", check_pod_uid)] = None
    container_index: Annotated[int, Json("containerIndex", check_uint)] = 0
    device_index: Annotated[int, Json("deviceIndex", check_uint)] = 0

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}[{self.container_index}/{self.device_index}]"


def check_owner(where: str) -> Any:
    """An owner's check: null, or an `Owner` whose wrong field is named under `where` (`owner`,
    `hamimig.lastOwner`)."""
    return lambda doc: None if doc is None else validated(Owner, doc, where)


def _state(value: Any) -> State:
    state = next((s for s in RECORD_STATES if s.value == value), None)
    if state is None:
        raise ValueError(f"{value!r} is not one of {', '.join(s.value for s in RECORD_STATES)}")
    return state


def _ours(name: str, check: Any, required: bool = False, first: bool = False) -> Json:
    """A field under the `"hamimig"` key, which HAMi's Go decoder ignores."""
    return Json(name, check, under="hamimig", required=required, first=first)


@dataclasses.dataclass(frozen=True)
class Record:
    """One ownership record. `managed` is False for a record HAMi wrote (no "hamimig" key).

    HAMi's v1 fields come first, in its order; the rest live under the `"hamimig"` key."""

    mig_uuid: Annotated[str, Json("migUUID", check_mig_uuid)]
    gpu_uuid: Annotated[str, Json("parentGPUUUID", check_nonempty)]
    profile: Annotated[str, Json("profile", check_nonempty)]
    placement: Annotated[Placement, Json("placement", check_placement)]
    gpu_instance_id: Annotated[int, Json("gpuInstanceID", check_uint)]
    compute_instance_id: Annotated[int, Json("computeInstanceID", check_uint)]
    state: Annotated[State, _ours("state", _state, required=True, first=True)] = State.IDLE
    owner: Annotated[Owner | None, _ours("owner", check_owner("owner"), first=True)] = None
    cdi_device: Annotated[str | None, _ours("cdiDevice", check_opt_str)] = None
    error: Annotated[str | None, _ours("error", check_opt_str)] = None
    created_at: Annotated[str | None, _ours("createdAt", check_opt_str)] = None
    updated_at: Annotated[str | None, _ours("updatedAt", check_opt_str)] = None
    managed: bool = True
    gpu_index: Annotated[int | None, _ours("gpuIndex", check_opt_uint)] = None
    """The GPU's NVML index when last verified: a hint only (indexes change across reboots)."""
    idle_since: Annotated[str | None, _ours("idleSince", check_time)] = None
    """When the instance last entered Idle (the idle policy's clock); None outside Idle, and
    in records written before hamimig kept it (their age counts from `updated_at`)."""
    last_owner: Annotated[
        Owner | None, _ours("lastOwner", check_owner("hamimig.lastOwner"), first=True)
    ] = None
    """Who held the instance before it became Idle (a release, reconcile's release, recovery's
    restore from Active): kept while it stays Idle, so that a repeated release of that pod is
    known to be one; None outside Idle, once handed out again, and in older records."""


def record_name(mig_uuid: str) -> str:
    """HAMi's file name for the record of `mig_uuid` (hashed: old UUIDs contain `/`)."""
    return f"{RECORD_PREFIX}{uuid_digest(mig_uuid)}{RECORD_SUFFIX}"


def forget_name(name: str) -> str:
    """How `hamimig forget` names the record file `name`: the CDI device name it holds
    (`mig-<sha256>`, as `list` shows it), else the whole file name."""
    digest = name.removeprefix(RECORD_PREFIX).removesuffix(RECORD_SUFFIX)
    whole = name == f"{RECORD_PREFIX}{digest}{RECORD_SUFFIX}"
    return (
        f"mig-{digest}" if whole and uuid_digest_like(digest) and digest.lower() == digest else name
    )


def encode_record(r: Record) -> bytes:
    """HAMi's v1 fields plus the `"hamimig"` key, as written to disk, decoded again before it is
    returned so hamimig never writes a record its own loader (or HAMi's, laxer) would refuse."""
    ours = {k: v for k, v in dumped(r, "hamimig").items() if v is not None or k not in _OPTIONAL}
    doc = {
        "version": HAMI_VERSION,
        **dumped(r),
        "hamimig": {"schemaVersion": SCHEMA_VERSION, **ours},
    }
    data = json_bytes(doc)
    decode_record(record_name(r.mig_uuid), data)
    return data


_OPTIONAL = ("idleSince", "lastOwner")


def _decode_content(data: bytes) -> Record:
    """Everything HAMi and hamimig check except the file name (see `RecordStore.load`)."""
    doc = versioned_json(data, "record", HAMI_VERSION, reader="HAMi reads version")
    hami = read(Record, doc)
    if "hamimig" not in doc:
        # Written by HAMi: it has no lifecycle state, and HAMi restores such instances as idle.
        return Record(**hami, managed=False)
    ext = doc["hamimig"]
    if not isinstance(ext, dict):
        raise RecordError("the 'hamimig' key must be an object")
    schema = ext.get("schemaVersion")
    if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
        raise RecordError("hamimig.schemaVersion must be a positive integer")
    if schema > SCHEMA_VERSION:
        # Its meaning is unknown to this version; acting on it could undo a newer hamimig's work.
        raise RecordError(
            f"written by a newer hamimig (schema {schema}); this hamimig reads schema "
            f"{SCHEMA_VERSION}: upgrade hamimig"
        )
    return Record(**hami, **read(Record, ext, "hamimig", "hamimig"))


def _check_name_matches(name: str, record: Record) -> None:
    expected = record_name(record.mig_uuid)
    if name != expected:
        raise RecordError(f"file name does not match its migUUID {record.mig_uuid} ({expected})")


def decode_record(name: str, data: bytes) -> Record:
    """Parse the record stored under file name `name` by HAMi's loader rules (docs/formats.md
    "Ownership records"); `RecordError` with the reason. A missing number is refused, not read
    as Go's 0: a GI or CI ID of 0 is a real ID."""
    record = _decode_content(data)
    _check_name_matches(name, record)
    return record


# --------------------------------------------------------------------------------------------
# The store


class RecordStore(StoreFiles):
    """The ownership records in the state directory."""

    store = "record"
    prefix, suffix = LOADER_PREFIX, RECORD_SUFFIX

    def subject(self, name: str) -> str:
        """`mig-<sha256>`: the record's name without HAMi's prefix and the suffix (the whole
        name when nothing is left)."""
        return name.removeprefix(LOADER_PREFIX).removesuffix(RECORD_SUFFIX) or name

    def path_of(self, mig_uuid: str) -> Path:
        return self.directory / record_name(mig_uuid)

    def read_one(self, mig_uuid: str) -> Record | Problem | None:
        """The file at the record's name, read on its own (other files, even one claiming the
        same UUID under another name, play no part): the record, why it is unusable, or None."""
        return self.read_named(record_name(mig_uuid))

    def read_named(self, name: str) -> Record | Problem | None:
        """The record file `name`, read on its own: a record only when its name is the one its
        MIG UUID gives (`read_one`), else why it is unusable, or None when it is absent."""
        return self.read_file(name, lambda data: decode_record(name, data))

    def named_by(self, name: str) -> str | None:
        """The record file a name names, as `forget` takes one: its own file name
        (`hami-owned-….json`, as doctor names it) or a whole CDI device name `mig-<sha256>`
        (lowered), whose record is `hami-owned-mig-<sha256>.json`; None for anything else."""
        if "/" not in name and name not in (".", "..") and self.owns(name):
            return name
        if name.startswith("mig-") and uuid_digest_like(name.removeprefix("mig-")):
            return f"{LOADER_PREFIX}{name.lower()}{RECORD_SUFFIX}"
        return None

    def load(self) -> tuple[dict[str, Record], list[Problem]]:
        """Every usable record by MIG UUID, and every `hami-owned-*.json` that is not usable.
        Two files claiming one MIG UUID are both refused: which is the truth cannot be decided."""
        records: dict[str, Record] = {}
        claims: dict[str, list[tuple[str, Record]]] = {}
        found, problems = self.read_all(lambda _name, data: _decode_content(data))
        for name, loaded in found:
            claims.setdefault(loaded.mig_uuid, []).append((name, loaded))
        for mig_uuid, entries in claims.items():
            if len(entries) > 1:
                names = ", ".join(n for n, _ in entries)
                duplicate = f"duplicate record: {len(entries)} files claim {mig_uuid} ({names})"
                problems += [self.problem(name, duplicate) for name, _ in entries]
                continue
            name, record = entries[0]
            try:
                _check_name_matches(name, record)
            except RecordError as exc:
                problems.append(self.problem(name, str(exc)))
                continue
            records[mig_uuid] = record
        problems.sort(key=lambda p: p.file)
        return records, problems

    def write(self, record: Record) -> None:
        """Create or replace the record atomically (0600 in a 0750 directory)."""
        self.write_named(
            FileOpName.RECORD_WRITE, record_name(record.mig_uuid), encode_record(record)
        )

    def remove(self, mig_uuid: str) -> None:
        """Remove the record durably; absent already is fine (a retried removal)."""
        self.remove_named(FileOpName.RECORD_REMOVE, record_name(mig_uuid))
