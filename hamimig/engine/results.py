"""Typed results of the lifecycle commands, with the JSON shapes docs/formats.md fixes.

Each result knows its `kind`, exit status and JSON object, so no command module formats
anything itself. Each object is declared once, by its fields in the contract's order with
explicit aliases; a key the contract omits when empty is an `omitted_when_empty` field.
"""

from __future__ import annotations

import operator
from collections import Counter
from typing import Annotated, Any, ClassVar, Protocol

from pydantic import (
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from hamimig.errors import HardwareError
from hamimig.hw.types import Placement
from hamimig.model import Model
from hamimig.store.intents import Intent
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import ActionKind, ActionResult, Outcome, State

Json = dict[str, Any]


class Result(Protocol):
    """What every command returns: a kind, its exit status, and the contract's JSON object.
    `exit_code` lets a result that reports partial failure (recover, reconcile, doctor) set the
    status, which the CLI reads in one place."""

    kind: ClassVar[str]

    @property
    def exit_code(self) -> int: ...

    def to_json(self) -> Json: ...


def omitted_when_empty(default: Any = (), alias: str | None = None) -> Any:
    """A field whose key the JSON object leaves out while it is empty or None."""
    return Field(default, alias=alias, exclude_if=operator.not_)


OwnerJson = Annotated[Owner, PlainSerializer(lambda owner: owner.to_json())]
"""An owner as its record writes it (`containerIndex`, not the attribute's name)."""


class Reported(Model):
    """Anything a result reports. Built by the code, never parsed, so a keyword that names no
    field is a mistake that mypy and the model refuse rather than drop."""

    model_config = ConfigDict(extra="forbid")


class Shown(Reported):
    """A command's result: its JSON object is its `kind`, then its fields, as `shape` makes
    them."""

    kind: ClassVar[str]

    @model_serializer(mode="wrap")
    def _with_kind(self, fields: SerializerFunctionWrapHandler) -> Json:
        return {"kind": self.kind, **self.shape(fields(self))}

    def shape(self, out: Json) -> Json:
        """The fields' JSON object, with what the fields alone cannot say."""
        return out


def after(out: Json, key: str, **more: Any) -> Json:
    """`out` with `more` right after `key`, where the contract puts them."""
    items = list(out.items())
    at = list(out).index(key) + 1
    return dict(items[:at] + list(more.items()) + items[at:])


class InstanceView(Reported):
    """The Instance object of docs/formats.md."""

    kind: ClassVar[str] = "Instance"
    mig_uuid: str | None = Field(alias="migUUID")
    gpu_uuid: str = Field(alias="gpuUUID")
    gpu_index: int = Field(alias="gpuIndex")
    profile: str
    placement: Placement
    gpu_instance_id: int | None = Field(alias="gpuInstanceID")
    compute_instance_id: int | None = Field(alias="computeInstanceID")
    compute_instance_count: int | None = Field(None, alias="computeInstanceCount")
    """How many compute instances the live GI holds (`list`, `show`); more than one, or one
    that does not span the GI, makes it no one's single instance. None when not asked or the
    GI is not live."""
    state: State
    owner: OwnerJson | None = None
    last_owner: OwnerJson | None = Field(None, alias="lastOwner")
    """The pod slot that last held an Idle instance (the record's `lastOwner`), else None."""
    cdi_device: str | None = Field(None, alias="cdiDevice")
    error: str | None = None
    processes: bool | None = None
    """Whether processes run on the MIG device. None when nobody asked (no live MIG device,
    or a command that does not look) or NVML could not say (`list` and `show` ask every live
    device; commands that act treat "could not say" as busy)."""
    process_count: int | None = Field(None, alias="processCount")
    """How many, when `processes` was asked for and NVML could say."""
    created_at: str | None = Field(None, alias="createdAt")
    updated_at: str | None = Field(None, alias="updatedAt")
    idle_since: str | None = Field(None, alias="idleSince")
    """The record's (or intent's) RFC 3339 times, as written; None when there is none (an
    Unmanaged instance, a record HAMi wrote, `idle_since` outside Idle)."""
    outcome: Outcome | None = omitted_when_empty(None)
    """What the command that reports it did to it (allocate, release, reclaim, forget; in a dry
    run what it would do); None in the reports that only look (`list`, `show`), whose Instance
    objects have no `outcome` key. `state` stays the last state the instance had."""

    def since(self) -> str | None:
        """When this instance's age (`list`'s AGE) counts from: an Idle instance's idle age
        (from `idleSince`, else the record's last update, as the idle policy counts), else
        its creation; None when unknown."""
        if self.state is State.IDLE:
            return self.idle_since or self.updated_at or self.created_at
        return self.created_at or self.updated_at

    def with_outcome(self, outcome: Outcome) -> InstanceView:
        return self.model_copy(update={"outcome": outcome})


class Hold(Reported):
    """A pod's claim on an instance, read from its allocation annotation: the entry names the
    instance's MIG UUID, or its slices on that GPU (an entry without runtime identity is a slot
    the scheduler reserved, where the plugin hands out the Idle instance it finds)."""

    pod: str | None
    """NS/NAME; None for an instance released after the pod list was taken, which a pod the
    list cannot show may hold."""
    how: str
    """`names it`, `names its slot`, `reserves its slot` or `released after the pod list was
    taken (TIME)`."""

    @property
    def reason(self) -> str:
        if self.pod is None:
            return self.how
        return f"pod {self.pod}'s allocation annotation {self.how}"

    @property
    def brief(self) -> str:
        """`held by pod NS/NAME`, `reserved by pod NS/NAME` or `released after …`."""
        if self.pod is None:
            return self.how.partition(" (")[0]  # the time is in `reason` and in the JSON
        verb = "reserved" if self.how == "reserves its slot" else "held"
        return f"{verb} by pod {self.pod}"


class BlockingInstance(Reported):
    """One instance in the way of a placement that hamimig may not take (a conflict's
    `error.blockers`): Active, Unmanaged, OrphanGI (no MIG UUID), busy or pod-held Idle/Error,
    or Reserved: free slices that another pod's annotation entry claims (no GPU instance, so
    `gpu_instance_id` is None; the entry's MIG UUID, if it has one)."""

    mig_uuid: str | None = Field(alias="migUUID")
    gpu_instance_id: int | None = Field(alias="gpuInstanceID")
    profile: str
    placement: Placement
    state: Annotated[State | None, PlainSerializer(lambda s: "Reserved" if s is None else s.value)]
    """None for Reserved slices (JSON `"Reserved"`, a word no instance has)."""
    owner: OwnerJson | None = None
    """As in the Instance object: the record's owner while Active, else None."""
    busy: bool = False
    held: Hold | None = Field(None, alias="heldBy")
    """An Idle or Error instance that a pod's allocation annotation claims."""

    def describe(self) -> str:
        """In full: `GI 3 (2g.20gb at 0:2) is Active (MIG-…) held by ns/pod`."""
        if self.state is None:
            by = self.held.brief if self.held is not None else "reserved"
            return f"slices {self.placement} ({self.profile}) are free but {by}"
        what = f"GI {self.gpu_instance_id} ({self.profile} at {self.placement}) is "
        what += self.state.value
        if self.mig_uuid is not None:
            busy = ", busy: processes run on it" if self.busy else ""
            what += f" ({self.mig_uuid}{busy})"
        if self.owner is not None:
            what += f" held by {self.owner.namespace}/{self.owner.name}"
        if self.held is not None:
            what += f" {self.held.brief}"
        return what

    def brief(self) -> str:
        """Briefly: `MIG-… (Active, ns/pod)`, `MIG-… (Idle, busy)`, `GI 3 (OrphanGI)`."""
        if self.state is None:
            by = self.held.brief if self.held is not None else "reserved"
            return f"slices {self.placement} ({by})"
        name = self.mig_uuid or f"GI {self.gpu_instance_id}"
        why = [self.state.value]
        if self.owner is not None:
            why.append(f"{self.owner.namespace}/{self.owner.name}")
        if self.busy:
            why.append("busy")
        if self.held is not None:
            why.append(self.held.brief)
        return f"{name} ({', '.join(why)})"


class Blocked(Reported):
    """A candidate placement and the instances that block it (`error.blockers` entries)."""

    placement: Placement
    instances: tuple[BlockingInstance, ...]

    def brief(self) -> str:
        """`placement 0:4 is blocked by MIG-… (Active, ns/pod), GI 3 (OrphanGI)`."""
        return f"placement {self.placement} is blocked by " + ", ".join(
            i.brief() for i in self.instances
        )


class Warning_(Reported):
    file: str
    reason: str
    fix: str | None = Field(None, exclude=True)
    """The command that clears it, where there is one (doctor's hint; not in the JSON, whose
    `reason` already ends with it)."""


class Allocation(Shown):
    """`allocate`; in a dry run, what it would do: `instance` is the Idle instance it would
    hand out (shown Active for the new owner) or the one it would create (Creating, with no
    MIG UUID, GI, CI or CDI device yet), `reclaimed` the instances it would destroy first."""

    kind: ClassVar[str] = "Allocation"
    exit_code: ClassVar[int] = 0
    dry_run: bool = Field(False, alias="dryRun")
    instance: InstanceView
    outcome: Outcome = Field(exclude=True)
    reclaimed: tuple[str, ...] = ()
    warnings: tuple[Warning_, ...] = omitted_when_empty()

    @property
    def created(self) -> bool:
        return self.outcome is Outcome.CREATED

    @property
    def reused(self) -> bool:
        return self.outcome is Outcome.REUSED

    @property
    def instances(self) -> tuple[InstanceView, ...]:
        """The instance table's rows: the allocated instance, with its outcome."""
        return (self.instance.with_outcome(self.outcome),)

    def shape(self, out: Json) -> Json:
        out["instance"] = self.instances[0].to_json()
        return after(out, "instance", created=self.created, reused=self.reused)


def failed_exit(instances: tuple[InstanceView, ...]) -> int:
    """4 (hardware or I/O) when the step of any of `instances` failed, else 0."""
    return HardwareError.exit_code if any(i.outcome is Outcome.FAILED for i in instances) else 0


class Release(Shown):
    """`release`; in a dry run, the instances that would go Idle (shown as they would be)."""

    kind: ClassVar[str] = "Release"
    dry_run: bool = Field(False, alias="dryRun")
    released: tuple[InstanceView, ...]
    warnings: tuple[Warning_, ...] = omitted_when_empty()

    @property
    def exit_code(self) -> int:
        return failed_exit(self.released)


class SkippedInstance(Reported):
    """An instance a command left alone on purpose (busy), and why."""

    mig_uuid: str = Field(alias="migUUID")
    reason: str


class Reclaim(Shown):
    kind: ClassVar[str] = "Reclaim"
    dry_run: bool = Field(alias="dryRun")
    reclaimed: tuple[InstanceView, ...]
    skipped: tuple[SkippedInstance, ...] = ()
    notes: tuple[str, ...] = omitted_when_empty()
    warnings: tuple[Warning_, ...] = omitted_when_empty()

    @property
    def exit_code(self) -> int:
        return failed_exit(self.reclaimed)


_RESTORES = (ActionKind.RESTORE_IDLE.value, ActionKind.RESTORE_ACTIVE.value)


class StepError(Reported):
    """Why a step failed: the category of its error (as the exit-code table names them) and
    the hardware's or the disk's own message."""

    code: str
    message: str


class Action(Reported):
    """One step of recover, adopt or reconcile, with the reason it was (or would be) taken."""

    action: str
    mig_uuid: str | None = Field(alias="migUUID")
    gpu_uuid: str | None = Field(alias="gpuUUID")
    placement: Placement | None
    reason: str
    changed: bool = False
    """Whether the step changed anything (a file written or removed, the hardware changed); in a
    dry run, whether it would. A verified instance that stays as it is, a preserve or a skip
    changes nothing; a failed step may have written a file before it failed (its record, now
    Error)."""
    result: ActionResult = ActionResult.UNCHANGED
    error: StepError | None = None
    """Set exactly when `result` is failed."""

    @property
    def failed(self) -> bool:
        return self.result is ActionResult.FAILED

    @property
    def verified(self) -> bool:
        """A restore that found the instance already as its record says: verified, unchanged."""
        return self.result is ActionResult.UNCHANGED and self.action in _RESTORES


class SkippedGpu(Reported):
    """A GPU recovery did not look at (MIG disabled or unsupported), and why."""

    index: int
    uuid: str
    mig_mode: str = Field(alias="migMode")
    reason: str


class ActionReport(Shown):
    """`recover` (kind Recovery), `adopt` (Adoption) and `reconcile` (Reconcile). `failed`
    carries the error of a pass that could not finish, so the actions that did happen are
    still printed before exit 4."""

    kind: ClassVar[str] = "Reconcile"
    dry_run: bool = Field(alias="dryRun")
    actions: tuple[Action, ...]
    skipped: tuple[SkippedGpu, ...] = omitted_when_empty(alias="skippedGPUs")
    notes: tuple[str, ...] = omitted_when_empty()
    """What the pass left out and why (the idle policy without a pod list)."""
    warnings: tuple[Warning_, ...] = omitted_when_empty()
    failed: str | None = Field(None, exclude=True)
    files_changed: int = Field(0, exclude=True)
    """The files the pass wrote or removed (records, intents, CDI specs, the removal queue),
    counted once per step that touched them; 0 in a dry run."""

    @property
    def exit_code(self) -> int:
        return HardwareError.exit_code if self.failed else 0

    @property
    def changed(self) -> int:
        """How many actions were done (in a dry run: would be); a failed one is not, whatever
        it wrote before it failed."""
        return sum(a.result is ActionResult.DONE for a in self.actions)

    @property
    def failed_actions(self) -> int:
        return sum(a.failed for a in self.actions)

    def by_action(self) -> dict[str, int]:
        """How many actions of each kind, in the order they first appear."""
        return dict(Counter(a.action for a in self.actions))

    def shape(self, out: Json) -> Json:
        if self.failed:
            out["error"] = {"code": HardwareError.code, "message": self.failed}
        summary = {
            "changed": self.changed,
            "unchanged": len(self.actions) - self.changed - self.failed_actions,
            "failed": self.failed_actions,
            "filesChanged": self.files_changed,
            "byAction": self.by_action(),
        }
        return after(out, "actions", summary=summary)


class Forgotten(Reported):
    """One thing `forget` dropped (or would drop): a record with its CDI spec, or an intent.
    `unreadable`: why it could not be decoded (dropped by name all the same)."""

    intent: str | None = None
    intent_file: str | None = Field(None, alias="intentFile")
    mig_uuid: str | None = Field(None, alias="migUUID")
    state: str | None = None
    record: str | None = None
    cdi_spec: str | None = Field(None, alias="cdiSpec")
    unreadable: str | None = None
    note: str | None = omitted_when_empty(None)
    instance: InstanceView | None = Field(None, exclude=True)
    """The forgotten instance as its record (or intent) said, outcome `forgotten`; None when
    the file could not be read."""

    @model_serializer(mode="wrap")
    def _one_kind(self, fields: SerializerFunctionWrapHandler) -> Json:
        """An intent's keys, or a record's."""
        out: Json = fields(self)
        for key in ("migUUID", "state") if self.intent is not None else ("intent", "intentFile"):
            del out[key]
        return out


class Forget(Shown):
    """`forget`: ownership dropped, hardware untouched (a live instance becomes Unmanaged)."""

    kind: ClassVar[str] = "Forget"
    exit_code: ClassVar[int] = 0
    dry_run: bool = Field(alias="dryRun")
    forgotten: tuple[Forgotten, ...]
    warnings: tuple[Warning_, ...] = omitted_when_empty()

    @property
    def instances(self) -> tuple[InstanceView, ...]:
        """The instances of the files that could be read (outcome `forgotten`)."""
        return tuple(f.instance for f in self.forgotten if f.instance is not None)

    def shape(self, out: Json) -> Json:
        return after(out, "forgotten", instances=[i.to_json() for i in self.instances])


def intent_view(
    intent: Intent,
    gpu_index: int,
    gpu_instance_id: int | None,
    error: str | None = None,
) -> InstanceView:
    """How an allocation in flight (its intent) is shown: Creating."""
    return InstanceView(
        mig_uuid=intent.mig_uuid,
        gpu_uuid=intent.gpu_uuid,
        gpu_index=gpu_index,
        profile=intent.profile,
        placement=intent.placement,
        gpu_instance_id=gpu_instance_id,
        compute_instance_id=intent.compute_instance_id,
        state=State.CREATING,
        owner=intent.owner,
        error=error,
        created_at=intent.created_at,
    )


def record_view(
    record: Record, gpu_index: int, state: State | None = None, error: str | None = None
) -> InstanceView:
    """How an ownership record is shown; `owner` only while the instance is Active."""
    shown = state or record.state
    return InstanceView(
        mig_uuid=record.mig_uuid,
        gpu_uuid=record.gpu_uuid,
        gpu_index=gpu_index,
        profile=record.profile,
        placement=record.placement,
        gpu_instance_id=record.gpu_instance_id,
        compute_instance_id=record.compute_instance_id,
        state=shown,
        owner=record.owner if shown is State.ACTIVE else None,
        cdi_device=record.cdi_device,
        error=error if error is not None else record.error,
        created_at=record.created_at,
        updated_at=record.updated_at,
        idle_since=record.idle_since if shown is State.IDLE else None,
        last_owner=record.last_owner if shown is State.IDLE else None,
    )
