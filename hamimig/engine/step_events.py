"""What the event journal says about one applied step (docs/formats.md "Event journal"): the
executor's only way to log, so every command's changes are logged in one place and one shape.
Logging is bookkeeping: a failed append is counted and the step stands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from hamimig.engine.node import Node
from hamimig.engine.steps import Forgettable, Spec, Step
from hamimig.errors import HamimigError
from hamimig.store.counters import EVENTS_WRITE_FAILURES
from hamimig.store.events import Event
from hamimig.store.records import Record
from hamimig.vocabulary import FileOpName

DONE = "done"
FAILED = "failed"


def _cdi(node: Node, mig_uuid: str | None, ops: list[FileOpName]) -> str | None:
    """What the step did to the instance's CDI spec: written, removed, or its removal queued."""
    if FileOpName.CDI_REMOVE in ops:
        return "removed"
    if FileOpName.CDI_WRITE in ops:
        return "written"
    if FileOpName.QUEUE_WRITE in ops and mig_uuid is not None:
        with contextlib.suppress(HamimigError, OSError, ValueError):
            entries, _ = node.queue.load()
            if any(entry.mig_uuid == mig_uuid for entry in entries):
                return "queued"
    return None


def known_before(node: Node, step: Step) -> Record | None:
    """For a step whose target names only a MIG UUID (a spec to repair, a record to forget):
    its record as it was before the step, so that the event says which GPU, profile and pod."""
    target = step.target
    if not isinstance(target, Spec | Forgettable) or target.mig_uuid is None:
        return None
    with contextlib.suppress(HamimigError, OSError, ValueError):
        found = node.records.read_one(target.mig_uuid)
        if isinstance(found, Record):
            return found
    return None


@dataclass(frozen=True)
class StepOutcome:
    """What applying one step left, as the executor saw it."""

    ops: list[FileOpName]
    """The file operations it completed."""
    record: Record | None = None
    """The record it wrote (None: none, or gone)."""
    note: str | None = None
    error: str | None = None
    """Why it failed (None: it did not)."""
    known: Record | None = None
    """The record as it was before (`known_before`)."""
    made: str | None = None
    """The MIG UUID a failed creation had made before it was rolled back."""


_SUBJECT = ("mig_uuid", "gpu_uuid", "placement", "gpu_index", "profile", "owner")
"""The names of a step's `where`, in its order."""


def _subject(step: Step, outcome: StepOutcome) -> dict[str, Any]:
    """The instance as the step's target names it (`_SUBJECT`), completed from its record as
    it was before (`known`) and as the step left it, where those are the same instance's."""
    found = dict(zip(_SUBJECT, step.target.where, strict=True))
    found["mig_uuid"] = found["mig_uuid"] or outcome.made
    for source in (outcome.known, outcome.record):
        if source is not None and found["mig_uuid"] in (None, source.mig_uuid):
            found.update({key: getattr(source, key) for key, v in found.items() if v is None})
    return found


def _state(step: Step, outcome: StepOutcome) -> str | None:
    """The state the step left the record in (a spec step leaves it as it was)."""
    if outcome.record is not None:
        return outcome.record.state.value
    if outcome.known is not None and isinstance(step.target, Spec):
        return outcome.known.state.value
    return None


def log_step(node: Node, step: Step, outcome: StepOutcome) -> None:
    """Append the event for `step`, from what it left; a failure is counted, never raised."""
    try:
        at = _subject(step, outcome)
        index, placement = at["gpu_index"], at["placement"]
        event: Event = {
            "time": node.clock(),
            "action": step.kind.value,
            "outcome": FAILED if outcome.error is not None else DONE,
            "migUUID": at["mig_uuid"],
            "gpuUUID": at["gpu_uuid"],
            "gpuIndex": index if index is not None and index >= 0 else None,
            "profile": at["profile"],
            "placement": None if placement is None else dataclasses.asdict(placement),
            "pod": None if (pod := at["owner"]) is None else f"{pod.namespace}/{pod.name}",
            "state": _state(step, outcome),
            "cdi": _cdi(node, at["mig_uuid"], outcome.ops),
            "command": node.command,
            "pid": os.getpid(),
            "reason": step.reason if not outcome.note else f"{step.reason}; {outcome.note}",
        }
        if outcome.error is not None:
            event["error"] = outcome.error
        node.events.append(event, node.config().events_max_bytes)
    except (HamimigError, OSError, ValueError):
        node.counters.count(EVENTS_WRITE_FAILURES)
