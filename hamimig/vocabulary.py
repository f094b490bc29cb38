"""The lifecycle's words: instance states, the kinds of step a command takes, allocation outcomes.

One module, importing nothing of hamimig, so that every layer names a state or an action the same
way and the CLI's help and shell completion can list them without loading the engine.
docs/formats.md gives each value's meaning as scripts see it.
"""

from __future__ import annotations

import enum


class State(str, enum.Enum):
    """An instance's lifecycle state (docs/formats.md "States and actions"). A record holds one
    of `RECORD_STATES`; `Creating` lives in the intent journal, and the rest exist only in
    views, never written to a record."""

    CREATING = "Creating"
    ACTIVE = "Active"
    IDLE = "Idle"
    RECLAIMING = "Reclaiming"
    ERROR = "Error"
    UNMANAGED = "Unmanaged"
    ORPHAN_GI = "OrphanGI"
    MISSING = "Missing"
    UNREADABLE = "Unreadable"


RECORD_STATES: tuple[State, ...] = (State.ACTIVE, State.IDLE, State.RECLAIMING, State.ERROR)
"""The states an ownership record can be in, in the order error messages list them."""


class ActionKind(str, enum.Enum):
    """Every kind of step a mutating command plans and the executor applies; the value is the
    `action` that `recover`, `adopt`, `reconcile` and the event journal report."""

    # allocate, release, reclaim, forget
    CREATE = "create"
    REUSE = "reuse"
    RELEASE = "release"
    RECLAIM = "reclaim"
    FORGET_RECORD = "forget-record"
    FORGET_INTENT = "forget-intent"
    # recover and adopt
    RESTORE_IDLE = "restore-idle"
    RESTORE_ACTIVE = "restore-active"
    ADOPT_ACTIVE = "adopt-active"
    ADOPT_IDLE = "adopt-idle"
    FINISH_INTENT = "finish-intent"
    ROLLBACK_INTENT = "rollback-intent"
    FINISH_RECLAIM = "finish-reclaim"
    DROP_MISSING = "drop-missing"
    PRESERVE_UNMANAGED = "preserve-unmanaged"
    PRESERVE_ORPHAN_GI = "preserve-orphan-gi"
    DESTROY_ORPHAN_GI = "destroy-orphan-gi"
    REMOVE_ORPHAN_CDI = "remove-orphan-cdi"
    # recover and reconcile
    REPAIR_CDI = "repair-cdi"
    RETRY_CDI_REMOVAL = "retry-cdi-removal"
    RETRY_DESTROY = "retry-destroy"
    RELEASE_IDLE = "release-idle"
    # reconcile's idle policy (idleTTL, maxIdleInstancesPerGPU)
    EVICT_IDLE = "evict-idle"
    SKIP = "skip"


class ActionResult(str, enum.Enum):
    """What became of one step of recover, adopt or reconcile (`result` in its action object,
    docs/formats.md "States and actions"); in a dry run, what would."""

    DONE = "done"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"
    FAILED = "failed"


class Outcome(str, enum.Enum):
    """What a command did to one instance it reports (`outcome` in its Instance object,
    docs/formats.md "JSON results"); in a dry run, what it would do."""

    CREATED = "created"
    REUSED = "reused"
    RELEASED = "released"
    RECLAIMED = "reclaimed"
    FORGOTTEN = "forgotten"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    """The hardware or the disk refused its step (`error` says how); the command carried on
    with the other instances it names and exits 4."""


class FileOpName(str, enum.Enum):
    """Every durable-state file operation the store performs through its `file_op` hook, named
    here once so the store and the simulator's file faults (`sim fault add --op`) never drift."""

    RECORD_WRITE = "record.write"
    RECORD_REMOVE = "record.remove"
    CDI_WRITE = "cdi.write"
    CDI_REMOVE = "cdi.remove"
    INTENT_WRITE = "intent.write"
    INTENT_REMOVE = "intent.remove"
    QUEUE_WRITE = "queue.write"
    EVENTS_WRITE = "events.write"
    """An append to the event journal: bookkeeping, never part of the durable state a crash
    must leave consistent (a failed append is counted and the step it describes stands)."""


DURABLE_FILE_OPS = tuple(op for op in FileOpName if op is not FileOpName.EVENTS_WRITE)
"""The operations on the durable state (records, specs, intents, the removal queue): the ones
the crash-safety order is about."""


class Setting(str, enum.Enum):
    """An input the caller sets for the whole node rather than for one request. A lower layer
    that finds one wrong says which (`HamimigError.setting`); the CLI names the option and the
    environment variable that set it, so that no layer below the CLI names a flag."""

    NODE_NAME = "node name"
    POD_LIST = "pod list"
    SIMULATED_NODE = "simulated node"
