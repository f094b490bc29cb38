"""HAMi v1 ownership records: one file per dynamic MIG instance, readable by HAMi itself.

The record is the proof that an instance belongs to HAMi (HAMi must be the only controller of the
node's MIG layout), so its format is HAMi's, byte for byte in the fields HAMi reads
(docs/formats.md "Ownership records"). hamimig keeps its own lifecycle fields (state, owner,
timestamps, error, CDI device) under one extra top-level key, `"hamimig"`, which HAMi's Go
decoder ignores; a record that HAMi wrote has no such key and counts as Idle.

Loading follows HAMi's loader rules, and is stricter only where leniency would let hamimig act on
an instance whose identity it cannot prove (missing numeric fields, two files claiming one UUID):
an unreadable record is reported as a `Problem`, never guessed at, because read-only commands
list problems as warnings and mutating ones refuse to run past them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasPath, BeforeValidator, Field

from hamimig.store._fields import (
    MigUuid,
    Namespace,
    NonEmpty,
    OptStr,
    OptUInt,
    PlacementField,
    PodName,
    PodUid,
    Stored,
    Time,
    UInt,
    check_version,
    dumped,
    json_object,
    uuid_digest,
    uuid_digest_like,
    validated,
)
from hamimig.store._fields import (
    RecordError as RecordError,  # re-exported: callers catch it from here
)
from hamimig.store.files import (
    Problem,
    StoreFiles,
    check_dir,
    list_names,
)
from hamimig.vocabulary import RECORD_STATES, FileOpName, State

RECORD_PREFIX = "hami-owned-mig-"
LOADER_PREFIX = "hami-owned-"
"""HAMi's loader reads every `hami-owned-*.json`, not only `hami-owned-mig-*`, so ours does too."""
RECORD_SUFFIX = ".json"
HAMI_VERSION = 1
SCHEMA_VERSION = 1
RECORD_MODE = 0o600
STATE_DIR_MODE = 0o750


@dataclasses.dataclass(frozen=True)
class Owner(Stored):
    """The pod container device slot an Active instance is allocated to."""

    namespace: Namespace
    name: PodName
    uid: PodUid = None
    container_index: Annotated[UInt, Field(alias="containerIndex")] = 0
    device_index: Annotated[UInt, Field(alias="deviceIndex")] = 0

    @classmethod
    def from_json(cls, doc: Any, where: str = "owner") -> Owner:
        """Raises ValueError (a `RecordError`) naming the first field that is wrong (under
        `where`: `owner`, `hamimig.lastOwner`)."""
        return validated(cls, doc, where)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}[{self.container_index}/{self.device_index}]"


def _owner_at(where: str) -> Any:
    return BeforeValidator(lambda doc: None if doc is None else Owner.from_json(doc, where))


OwnerField = Annotated[Owner | None, _owner_at("owner")]


def _ours(name: str) -> Any:
    """A field under the `"hamimig"` key, which HAMi's Go decoder ignores."""
    return Field(validation_alias=AliasPath("hamimig", name), serialization_alias=name)


def _state(ext: Any) -> State:
    """The record's state, once the `"hamimig"` key holding it is known to be readable."""
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
    state = next((s for s in RECORD_STATES if s.value == ext.get("state")), None)
    if state is None:
        allowed = ", ".join(s.value for s in RECORD_STATES)
        raise RecordError(f"hamimig.state {ext.get('state')!r} is not one of {allowed}")
    return state


@dataclasses.dataclass(frozen=True)
class Record:
    """One ownership record. `managed` is False for a record HAMi wrote (no "hamimig" key).

    HAMi's v1 fields come first, in its order; the rest live under the `"hamimig"` key."""

    mig_uuid: Annotated[MigUuid, Field(alias="migUUID")]
    gpu_uuid: Annotated[NonEmpty, Field(alias="parentGPUUUID")]
    profile: NonEmpty
    placement: PlacementField
    gpu_instance_id: Annotated[UInt, Field(alias="gpuInstanceID")]
    compute_instance_id: Annotated[UInt, Field(alias="computeInstanceID")]
    state: Annotated[
        State,
        Field(validation_alias="hamimig", serialization_alias="state"),
        BeforeValidator(_state),
    ] = State.IDLE
    owner: Annotated[OwnerField, _ours("owner")] = None
    cdi_device: Annotated[OptStr, _ours("cdiDevice")] = None
    error: Annotated[OptStr, _ours("error")] = None
    created_at: Annotated[OptStr, _ours("createdAt")] = None
    updated_at: Annotated[OptStr, _ours("updatedAt")] = None
    managed: Annotated[
        bool, Field(validation_alias="hamimig", exclude=True), BeforeValidator(lambda _: True)
    ] = True
    gpu_index: Annotated[OptUInt, _ours("gpuIndex")] = None
    """The GPU's NVML index when last verified: a hint only (indexes change across reboots)."""
    idle_since: Annotated[Time, _ours("idleSince")] = None
    """When the instance last entered Idle (the idle policy's clock); None outside Idle, and
    in records written before hamimig kept it (their age counts from `updated_at`)."""
    last_owner: Annotated[Owner | None, _ours("lastOwner"), _owner_at("hamimig.lastOwner")] = None
    """Who held the instance before it became Idle (a release, reconcile's release, recovery's
    restore from Active): kept while it stays Idle, so that a repeated release of that pod is
    known to be one; None outside Idle, once handed out again, and in older records."""


_HAMI_FIELDS = 6
"""How many of `Record`'s fields are HAMi's own, written at the top level."""


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
    """HAMi's v1 fields plus the `"hamimig"` key, as written to disk.

    The output is decoded again before it is returned, so hamimig can never write a record that
    its own loader (and therefore HAMi's, which is laxer) would refuse on the next start.
    `idleSince` and `lastOwner` are written only while set (only while Idle): readers of schema
    1 that predate them ignore the keys.
    """
    fields = list(dumped(r).items())
    ours = {k: v for k, v in fields[_HAMI_FIELDS:] if v is not None or k not in _OPTIONAL}
    doc = {"version": HAMI_VERSION, **dict(fields[:_HAMI_FIELDS])}
    doc["hamimig"] = {"schemaVersion": SCHEMA_VERSION, **ours}
    data = (json.dumps(doc, indent=2) + "\n").encode("utf-8")
    decode_record(record_name(r.mig_uuid), data)
    return data


_OPTIONAL = ("idleSince", "lastOwner")


def _decode_content(data: bytes) -> Record:
    """Everything HAMi and hamimig check except the file name (see `RecordStore.load`)."""
    doc = json_object(data, "record")
    check_version(doc, HAMI_VERSION, "record", "HAMi reads version 1")
    record = validated(Record, doc)
    if "hamimig" not in doc:
        # Written by HAMi: it has no lifecycle state, and HAMi restores such instances as idle.
        return dataclasses.replace(record, managed=False)
    return record


def _check_name_matches(name: str, record: Record) -> None:
    expected = record_name(record.mig_uuid)
    if name != expected:
        raise RecordError(f"file name does not match its migUUID {record.mig_uuid} ({expected})")


def decode_record(name: str, data: bytes) -> Record:
    """Parse the record stored under file name `name`; raises `RecordError` with the reason.

    HAMi's loader rules (docs/formats.md "Ownership records"): a JSON object, version 1, a
    `MIG-` UUID, non-empty parent GPU and profile, a non-zero placement size, and the file name
    derived from the UUID.
    Unknown top-level keys are ignored as Go's decoder ignores them. Where Go would silently
    default a missing or null number to 0, this refuses instead: a GI or CI ID of 0 is a real ID,
    and identity must be proven, not assumed.
    """
    record = _decode_content(data)
    _check_name_matches(name, record)
    return record


# --------------------------------------------------------------------------------------------
# The store


class RecordStore(StoreFiles):
    """The ownership records in the state directory."""

    store = "record"
    file_mode = RECORD_MODE
    dir_mode = STATE_DIR_MODE

    def owns(self, name: str) -> bool:
        return name.startswith(LOADER_PREFIX) and name.endswith(RECORD_SUFFIX)

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

        Two files claiming the same MIG UUID are both refused, even when only one has the right
        name: which of them is the truth cannot be decided, so neither instance is touched.
        """
        records: dict[str, Record] = {}
        problems: list[Problem] = []
        if not check_dir(self.directory):
            return records, problems
        claims: dict[str, list[tuple[str, Record]]] = {}
        for name in list_names(self.directory, LOADER_PREFIX, RECORD_SUFFIX):
            loaded = self.read_file(name, _decode_content)
            if isinstance(loaded, Problem):
                problems.append(loaded)
            elif loaded is not None:
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
