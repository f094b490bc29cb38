"""Plans as plain data: what a mutating command will do, step by step, before it does any of it,
so a dry run is the plan printed and `executor.apply` is the only code that acts
(docs/design.md "The pipeline"). A step's target is values only: records, intents, live
identities, the spec to write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hamimig.engine.facts import LiveCheck, Liveness
from hamimig.engine.node import Node
from hamimig.engine.results import Action, SkippedGpu, StepError, Warning_
from hamimig.errors import NOTHING_CHANGED, UnverifiableError
from hamimig.hw.types import ComputeInstance, GiProfile, Gpu, GpuInstance, MigDevice, Placement
from hamimig.store.cdi import CdiDevice
from hamimig.store.intents import Intent
from hamimig.store.records import Owner, Record
from hamimig.vocabulary import ActionKind, ActionResult, State

Located = tuple[str | None, str | None, Placement | None, int | None, str | None, Owner | None]
"""What a report and an event name for a step: MIG UUID, GPU UUID, placement, GPU index,
profile and pod (each may be unknown: a spec or a file to forget names only some)."""


@dataclass(frozen=True)
class Where:
    """A step that only reports (preserve, skip): where it looked, nothing to apply."""

    mig_uuid: str | None
    gpu_uuid: str | None
    placement: Placement | None

    @property
    def where(self) -> Located:
        return self.mig_uuid, self.gpu_uuid, self.placement, None, None, None


@dataclass(frozen=True)
class Managed:
    """A recorded instance, as the planner verified it against its GPU's layout (`live` None:
    not looked at, its GPU has MIG off or the command takes the record as it is)."""

    record: Record
    live: LiveCheck | None
    gpu_index: int

    @property
    def gone(self) -> bool:
        """Nothing of it is on the hardware: only its files remain to remove."""
        return self.live is None or self.live.status is Liveness.ABSENT

    @property
    def where(self) -> Located:
        r = self.record
        return r.mig_uuid, r.gpu_uuid, r.placement, self.gpu_index, r.profile, r.owner


@dataclass(frozen=True)
class Handout:
    """An Idle instance verified live, to hand to `owner` with its spec made current."""

    record: Record
    device: MigDevice
    owner: Owner
    spec: CdiDevice | None
    """The spec to write first, where the one on disk differs from it (None: it is current, or
    kept, or the node is in legacy non-CDI mode)."""
    cdi_device: str | None
    """The CDI device name the record will carry (the record's own in legacy non-CDI mode)."""
    queued: bool = False
    """An interrupted forget queued the removal of this spec, which is the instance's again."""
    kept: str | None = None
    """Why the spec on disk is kept unchecked: no spec can be composed (no or a bad NVIDIA
    base spec, or the base lacks the GPU), and an instance whose spec runtimes load must not
    stop working for it."""

    @property
    def where(self) -> Located:
        r = self.record
        return r.mig_uuid, r.gpu_uuid, r.placement, self.device.gpu_index, r.profile, self.owner


@dataclass(frozen=True)
class NewInstance:
    """A GI and CI to create under an intent, for `owner`."""

    gpu: Gpu
    profile: GiProfile
    placement: Placement
    owner: Owner
    caps_major: int | None = None
    """The capability nodes' major, read once while planning (None: no spec is composed)."""

    @property
    def where(self) -> Located:
        return None, self.gpu.uuid, self.placement, self.gpu.index, self.profile.name, self.owner


@dataclass(frozen=True)
class Pair:
    """A live GI/CI pair to record: Active for `owner`, or Idle when `owner` is None.
    `record` is what exists already (None: adopted)."""

    gpu: Gpu
    gi: GpuInstance
    ci: ComputeInstance
    profile: str
    owner: Owner | None
    record: Record | None

    @property
    def where(self) -> Located:
        gpu = self.gpu
        return self.ci.mig_uuid, gpu.uuid, self.gi.placement, gpu.index, self.profile, self.owner


@dataclass(frozen=True)
class InFlight:
    """An intent to clear, or to roll back by destroying `gi` (None: nothing it created is
    live). `gpu_index` is where its GPU is now (indexes can change across reboots)."""

    intent: Intent
    gpu_index: int | None = None
    gi: GpuInstance | None = None

    @property
    def where(self) -> Located:
        i = self.intent
        index = self.gpu_index if self.gpu_index is not None else i.gpu_index
        return i.mig_uuid, i.gpu_uuid, i.placement, index, i.profile, i.owner


@dataclass(frozen=True)
class Spec:
    """A CDI spec: to write (`device`), a queued removal to retry (`keep`: the instance has a
    record again, so only the queue entry goes), or a file of ours nothing accounts for
    (`file`)."""

    mig_uuid: str | None
    device: CdiDevice | None = None
    keep: bool = False
    file: str | None = None
    gpu_uuid: str | None = None
    placement: Placement | None = None

    @property
    def where(self) -> Located:
        return self.mig_uuid, self.gpu_uuid, self.placement, None, None, None


@dataclass(frozen=True)
class OrphanGi:
    """A GI without a compute instance and without a record."""

    gpu: Gpu
    gi: GpuInstance

    @property
    def where(self) -> Located:
        return None, self.gpu.uuid, self.gi.placement, self.gpu.index, None, None


@dataclass(frozen=True)
class Forgettable:
    """One record file (`mig_uuid`, or `record_file` for an unreadable record named by its file
    or device name) or intent file (`intent_id`) to drop, never the hardware; `spec` whether
    the instance has a CDI spec to remove with its record (`spec_file`, by a `record_file`)."""

    mig_uuid: str | None = None
    intent_id: str | None = None
    spec: bool = False
    state: State | None = None
    """The record's state, when its file could be read."""
    record_file: str | None = None
    spec_file: str | None = None

    @property
    def where(self) -> Located:
        return self.mig_uuid, None, None, None, None, None


Target = Where | Managed | Handout | NewInstance | Pair | InFlight | Spec | OrphanGi | Forgettable


@dataclass(frozen=True)
class Step:
    """One planned change (or, on a `Where`, one decision to change nothing), with its reason."""

    kind: ActionKind
    target: Target
    reason: str

    @property
    def mig_uuid(self) -> str | None:
        return self.target.where[0]

    @property
    def changes(self) -> bool:
        """Whether applying it changes anything (a step on a `Where` only reports)."""
        return not isinstance(self.target, Where)

    def report(
        self, note: str | None = None, changed: bool = False, error: StepError | None = None
    ) -> Action:
        """The step as reported: done, unchanged (it changed nothing), skipped, or failed with
        `error` (also said in the reason, for the table); in a dry run, what it would be."""
        if error is not None:
            result, note = ActionResult.FAILED, f"failed: {error.message}"
        elif self.kind is ActionKind.SKIP:
            result = ActionResult.SKIPPED
        else:
            result = ActionResult.DONE if changed else ActionResult.UNCHANGED
        mig_uuid, gpu_uuid, placement, *_ = self.target.where
        return Action(
            action=self.kind.value,
            mig_uuid=mig_uuid,
            gpu_uuid=gpu_uuid,
            placement=placement,
            reason=self.reason if not note else f"{self.reason}; {note}",
            changed=changed,
            result=result,
            error=error,
        )


@dataclass
class Plan:
    """The steps to take, the GPUs not looked at, and every refusal (all of them, so an operator
    fixes the node in one round). `failures` block only their own step: reconcile goes on with
    the rest and exits 4."""

    steps: list[Step] = field(default_factory=list)
    skipped: list[SkippedGpu] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    warnings: list[Warning_] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    abort: bool = False
    """The failure policy: stop at the first failed step and raise its error (allocate, and a
    command on one instance), or go on past it and report it on its step (the default)."""

    def add(self, kind: ActionKind, target: Target, reason: str) -> None:
        self.steps.append(Step(kind, target, reason))

    def refuse(self, reason: str) -> None:
        self.refusals.append(reason)

    def check(self, node: Node, dry_run: bool) -> None:
        """Refuse (exit 5) when anything could not be verified: then no step runs. A dry run
        notes the refusal and reports the steps it would take once it is cleared."""
        if self.refusals:
            node.refuse(
                UnverifiableError("; ".join(self.refusals) + f"; {NOTHING_CHANGED}"), dry_run
            )
