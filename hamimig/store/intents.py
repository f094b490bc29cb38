"""The intent journal: what an allocation is about to do to the hardware, written first
(docs/design.md "Crash safety"), so recovery can tell hamimig's half-made instance from a
foreign one instead of preserving it forever. Names never start `hami-owned-`, so HAMi's record
loader never sees them.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from pathlib import Path
from typing import Annotated, Any

from hamimig.hw.types import Placement
from hamimig.store._fields import (
    TEXT,
    Json,
    RecordError,
    Stored,
    check,
    check_nonempty,
    check_opt_mig_uuid,
    check_opt_uint,
    check_placement,
    check_uint,
    json_bytes,
    validated,
    versioned_json,
)
from hamimig.store.files import Problem, StoreFiles
from hamimig.store.records import Owner, check_owner
from hamimig.vocabulary import FileOpName

INTENT_PREFIX = "intent-"
INTENT_SUFFIX = ".json"
INTENT_VERSION = 1
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def new_intent_id() -> str:
    """A fresh random ID: two processes can never journal under the same name."""
    return uuid.uuid4().hex


def intent_file_name(intent_id: str) -> str:
    if not _ID_RE.match(intent_id):
        raise ValueError(f"not a valid intent ID: {intent_id!r}")
    return f"{INTENT_PREFIX}{intent_id}{INTENT_SUFFIX}"


_intent_id = check(TEXT, (lambda v: _ID_RE.match(v), "{!r} is not a valid intent ID"))


@dataclasses.dataclass(frozen=True)
class Intent(Stored):
    """One journalled operation. IDs and the MIG UUID are filled in as the hardware reports them,
    so that recovery can name exactly what this request created."""

    id: Annotated[str, Json("id", _intent_id)]
    op: Annotated[str, Json("op", check_nonempty)]
    gpu_uuid: Annotated[str, Json("gpuUUID", check_nonempty)]
    gpu_index: Annotated[int, Json("gpuIndex", check_uint)]
    profile: Annotated[str, Json("profile", check_nonempty)]
    profile_id: Annotated[int, Json("profileID", check_uint)]
    placement: Annotated[Placement, Json("placement", check_placement)]
    owner: Annotated[Owner | None, Json("owner", check_owner("owner"))]
    created_at: Annotated[str, Json("createdAt", check_nonempty)]
    gpu_instance_id: Annotated[int | None, Json("gpuInstanceID", check_opt_uint)] = None
    compute_instance_id: Annotated[int | None, Json("computeInstanceID", check_opt_uint)] = None
    mig_uuid: Annotated[str | None, Json("migUUID", check_opt_mig_uuid)] = None

    def to_json(self) -> dict[str, Any]:
        return {"version": INTENT_VERSION, **super().to_json()}


def encode_intent(intent: Intent) -> bytes:
    data = json_bytes(intent.to_json())
    decode_intent(intent_file_name(intent.id), data)  # never journal what recovery cannot read
    return data


def decode_intent(name: str, data: bytes) -> Intent:
    """Parse the intent stored under file name `name`; raises `RecordError` with the reason."""
    doc = versioned_json(data, "intent", INTENT_VERSION)
    intent = validated(Intent, doc)
    if name != intent_file_name(intent.id):
        raise RecordError(f"file name does not match its id {intent.id}")
    return intent


class IntentStore(StoreFiles):
    """The journal in the state directory: one file per in-flight operation."""

    store = "intent"
    prefix, suffix = INTENT_PREFIX, INTENT_SUFFIX

    def subject(self, name: str) -> str:
        """The intent's ID (what `forget --intent` takes), or the whole file name when what
        stands there is no valid ID (`forget --intent` takes that too)."""
        intent_id = name.removeprefix(INTENT_PREFIX).removesuffix(INTENT_SUFFIX)
        return intent_id if _ID_RE.match(intent_id) else name

    def file_name_of(self, subject: str) -> str:
        """The file an intent's subject names: `intent-<ID>.json` for an ID, or the subject
        itself when it is the name of one of this store's files that holds no valid ID (so
        that `forget --intent` can drop a file whatever stands in its name). ValueError when
        it is neither."""
        if _ID_RE.match(subject):
            return intent_file_name(subject)
        if self.owns(subject) and "/" not in subject and "\0" not in subject:
            return subject
        raise ValueError(f"not a valid intent ID: {subject!r}")

    def path_of(self, intent_id: str) -> Path:
        return self.directory / self.file_name_of(intent_id)

    def load(self) -> tuple[list[Intent], list[Problem]]:
        """Every readable intent, oldest first; every unusable `intent-*.json` as a Problem."""
        found, problems = self.read_all(decode_intent)
        return sorted((i for _, i in found), key=lambda i: (i.created_at, i.id)), problems

    def write(self, intent: Intent) -> None:
        """Create or replace the intent atomically (updates add IDs as they become known)."""
        self.write_named(
            FileOpName.INTENT_WRITE, intent_file_name(intent.id), encode_intent(intent)
        )

    def remove(self, intent_id: str) -> None:
        """Remove the intent durably; absent already is fine (a retried recovery)."""
        self.remove_named(FileOpName.INTENT_REMOVE, self.file_name_of(intent_id))
