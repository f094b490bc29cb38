"""The persisted queue of CDI spec removals that failed (docs/formats.md "The CDI removal
queue"): the instance and its record are gone by then, so nothing else would remember that a
stale spec still advertises a device that no longer exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from hamimig.errors import UnverifiableError
from hamimig.store._fields import (
    Json,
    RecordError,
    Stored,
    check_nonempty,
    check_str,
    check_uint,
    json_bytes,
    validated,
    versioned_json,
)
from hamimig.store.files import Problem, SingleFile
from hamimig.vocabulary import FileOpName

QUEUE_NAME = "cdi-removal-queue.json"
QUEUE_VERSION = 1


@dataclass(frozen=True)
class QueuedRemoval(Stored):
    """A spec still to be removed: since when, how often it failed, and the last error."""

    mig_uuid: Annotated[str, Json("migUUID", check_nonempty)]
    since: Annotated[str, Json("since", check_nonempty)]
    attempts: Annotated[int, Json("attempts", check_uint)]
    last_error: Annotated[str, Json("lastError", check_str, first=True)] = ""


def decode_queue(data: bytes) -> list[QueuedRemoval]:
    doc = versioned_json(data, "removal queue", QUEUE_VERSION, "queue")
    raw = doc.get("removals")
    if not isinstance(raw, list):
        raise RecordError("removals must be a list")
    removals = [validated(QueuedRemoval, i, what="a queued removal must be an object") for i in raw]
    uuids = [r.mig_uuid for r in removals]
    if len(set(uuids)) != len(uuids):
        raise RecordError("a MIG UUID is queued twice")
    return removals


def encode_queue(removals: list[QueuedRemoval]) -> bytes:
    doc = {"version": QUEUE_VERSION, "removals": [r.to_json() for r in removals]}
    return json_bytes(doc)


class RemovalQueue(SingleFile):
    """The queue file in the state directory."""

    store = "cdi-removal-queue"
    file_name = QUEUE_NAME

    def load(self) -> tuple[list[QueuedRemoval], list[Problem]]:
        """The queued removals in queue order; an unusable file is a Problem and an empty queue."""
        removals, problem = self.read_or(decode_queue, lambda: [])
        return removals, [] if problem is None else [problem]

    def _load_for_update(self) -> list[QueuedRemoval]:
        # Rewriting an unreadable queue would silently drop the removals it still holds; the
        # engine refuses earlier on the snapshot's problems, and this is the backstop.
        removals, problems = self.load()
        if problems:
            raise UnverifiableError(
                f"cannot update the CDI removal queue {problems[0].file}: {problems[0].reason}"
            )
        return removals

    def _save(self, removals: list[QueuedRemoval]) -> None:
        self.write_named(FileOpName.QUEUE_WRITE, QUEUE_NAME, encode_queue(removals))

    def add(self, mig_uuid: str, error: str, now: str) -> None:
        """Queue a failed removal, or count one more failure of an already queued one."""
        removals = self._load_for_update()
        for i, queued in enumerate(removals):
            if queued.mig_uuid == mig_uuid:
                removals[i] = QueuedRemoval(mig_uuid, queued.since, queued.attempts + 1, error)
                break
        else:
            removals.append(QueuedRemoval(mig_uuid, now, 1, error))
        self._save(removals)

    def drop(self, mig_uuid: str) -> None:
        """Forget a removal that succeeded; no write at all when it was not queued."""
        removals = self._load_for_update()
        kept = [r for r in removals if r.mig_uuid != mig_uuid]
        if len(kept) != len(removals):
            self._save(kept)
