"""Typed results of commands, with the camelCase JSON shapes docs/formats.md fixes.

Each result knows its `kind` and how to become the contract's JSON object; the CLI's renderer
decides between that and a table, so no command module formats anything itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from hamimig.hw.types import MigMode, Placement
from hamimig.sim.files import NodeFiles
from hamimig.store.records import Owner
from hamimig.vocabulary import Outcome, State

if TYPE_CHECKING:
    from hamimig.sim.state import NodeState

Json = dict[str, Any]


class Result(Protocol):
    """What every command returns: a kind, its exit status, and the contract's JSON object.

    `exit_code` is how a result that reports what it did and what still failed (recover,
    reconcile, doctor) tells the CLI its status; results that cannot fail say 0. The CLI reads
    it in one place, so no command needs a special case for its status.
    """

    kind: ClassVar[str]

    @property
    def exit_code(self) -> int: ...

    def to_json(self) -> Json: ...


def placement_json(p: Placement) -> Json:
    return {"start": p.start, "size": p.size}


@dataclass(frozen=True)
class InstanceView:
    """The Instance object of docs/formats.md."""

    kind: ClassVar[str] = "Instance"
    mig_uuid: str | None
    gpu_uuid: str
    gpu_index: int
    profile: str
    placement: Placement
    gpu_instance_id: int | None
    compute_instance_id: int | None
    state: State
    owner: Owner | None = None
    cdi_device: str | None = None
    error: str | None = None
    processes: bool | None = None
    """Whether processes run on the MIG device. None when nobody asked (no live MIG device,
    or a command that does not look) or NVML could not say (`list` and `show` ask every live
    device; commands that act treat "could not say" as busy)."""

    def to_json(self) -> Json:
        return {
            "migUUID": self.mig_uuid,
            "gpuUUID": self.gpu_uuid,
            "gpuIndex": self.gpu_index,
            "profile": self.profile,
            "placement": placement_json(self.placement),
            "gpuInstanceID": self.gpu_instance_id,
            "computeInstanceID": self.compute_instance_id,
            "state": self.state.value,
            "owner": self.owner.to_json() if self.owner else None,
            "cdiDevice": self.cdi_device,
            "error": self.error,
            "processes": self.processes,
        }


@dataclass(frozen=True)
class InstanceDetail:
    """`show`: one instance, with where its record and CDI spec live."""

    kind: ClassVar[str] = "Instance"
    exit_code: ClassVar[int] = 0
    instance: InstanceView
    record: str | None
    cdi_spec: str | None
    warnings: tuple[Warning_, ...] = ()

    def to_json(self) -> Json:
        out: Json = {"kind": self.kind, **self.instance.to_json()}
        out["record"] = self.record
        out["cdiSpec"] = self.cdi_spec
        if self.warnings:
            out["warnings"] = [w.to_json() for w in self.warnings]
        return out


@dataclass(frozen=True)
class Allocation:
    kind: ClassVar[str] = "Allocation"
    exit_code: ClassVar[int] = 0
    instance: InstanceView
    outcome: Outcome
    reclaimed: tuple[str, ...] = ()
    warnings: tuple[Warning_, ...] = ()

    @property
    def created(self) -> bool:
        return self.outcome is Outcome.CREATED

    @property
    def reused(self) -> bool:
        return self.outcome is Outcome.REUSED

    def to_json(self) -> Json:
        out: Json = {
            "kind": self.kind,
            "instance": self.instance.to_json(),
            "created": self.created,
            "reused": self.reused,
            "reclaimed": list(self.reclaimed),
        }
        if self.warnings:
            out["warnings"] = [w.to_json() for w in self.warnings]
        return out


@dataclass(frozen=True)
class Release:
    kind: ClassVar[str] = "Release"
    exit_code: ClassVar[int] = 0
    released: tuple[InstanceView, ...]

    def to_json(self) -> Json:
        return {"kind": self.kind, "released": [i.to_json() for i in self.released]}


@dataclass(frozen=True)
class SkippedInstance:
    """An instance a command left alone on purpose (busy), and why."""

    mig_uuid: str
    reason: str

    def to_json(self) -> Json:
        return {"migUUID": self.mig_uuid, "reason": self.reason}


@dataclass(frozen=True)
class Reclaim:
    kind: ClassVar[str] = "Reclaim"
    exit_code: ClassVar[int] = 0
    dry_run: bool
    reclaimed: tuple[InstanceView, ...]
    notes: tuple[str, ...] = ()
    skipped: tuple[SkippedInstance, ...] = ()
    warnings: tuple[Warning_, ...] = ()

    def to_json(self) -> Json:
        out: Json = {
            "kind": self.kind,
            "dryRun": self.dry_run,
            "reclaimed": [i.to_json() for i in self.reclaimed],
            "skipped": [s.to_json() for s in self.skipped],
        }
        if self.notes:
            out["notes"] = list(self.notes)
        if self.warnings:
            out["warnings"] = [w.to_json() for w in self.warnings]
        return out


@dataclass(frozen=True)
class Action:
    """One step of recover, adopt or reconcile, with the reason it was (or would be) taken."""

    action: str
    mig_uuid: str | None
    gpu_uuid: str | None
    placement: Placement | None
    reason: str

    def to_json(self) -> Json:
        return {
            "action": self.action,
            "migUUID": self.mig_uuid,
            "gpuUUID": self.gpu_uuid,
            "placement": placement_json(self.placement) if self.placement else None,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class SkippedGpu:
    """A GPU recovery did not look at (MIG disabled or unsupported), and why."""

    index: int
    uuid: str
    mig_mode: str
    reason: str

    def to_json(self) -> Json:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "migMode": self.mig_mode,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ActionReport:
    """`recover` (kind Recovery), `adopt` (Adoption) and `reconcile` (Reconcile).

    `failed` carries the error of a pass that could not finish everything; the CLI then exits
    with `exit_code` after printing the actions that did happen.
    """

    kind: ClassVar[str] = "Reconcile"
    dry_run: bool
    actions: tuple[Action, ...]
    failed: str | None = None
    exit_code: int = 0
    skipped: tuple[SkippedGpu, ...] = ()
    warnings: tuple[Warning_, ...] = ()

    def to_json(self) -> Json:
        out: Json = {
            "kind": self.kind,
            "dryRun": self.dry_run,
            "actions": [a.to_json() for a in self.actions],
        }
        if self.skipped:
            out["skippedGPUs"] = [s.to_json() for s in self.skipped]
        if self.warnings:
            out["warnings"] = [w.to_json() for w in self.warnings]
        if self.failed:
            out["error"] = {"code": "hardware", "message": self.failed}
        return out


@dataclass(frozen=True)
class GpuView:
    index: int
    uuid: str
    model: str
    mig_mode: MigMode
    memory_slices: int

    def to_json(self) -> Json:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "migMode": self.mig_mode.value,
            "memorySlices": self.memory_slices,
        }


@dataclass(frozen=True)
class Warning_:
    file: str
    reason: str

    def to_json(self) -> Json:
        return {"file": self.file, "reason": self.reason}


@dataclass(frozen=True)
class InstanceList:
    kind: ClassVar[str] = "InstanceList"
    exit_code: ClassVar[int] = 0
    instances: tuple[InstanceView, ...]
    gpus: tuple[GpuView, ...]
    warnings: tuple[Warning_, ...] = ()

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "instances": [i.to_json() for i in self.instances],
            "gpus": [g.to_json() for g in self.gpus],
            "warnings": [w.to_json() for w in self.warnings],
        }


@dataclass(frozen=True)
class ProfileView:
    name: str
    id: int
    slice_count: int
    memory_mb: int
    max_instances: int
    placements: tuple[Placement, ...]

    def to_json(self) -> Json:
        return {
            "name": self.name,
            "id": self.id,
            "sliceCount": self.slice_count,
            "memoryMB": self.memory_mb,
            "maxInstances": self.max_instances,
            "placements": [placement_json(p) for p in self.placements],
        }


@dataclass(frozen=True)
class GpuProfiles:
    index: int
    uuid: str
    model: str
    profiles: tuple[ProfileView, ...]

    def to_json(self) -> Json:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "profiles": [p.to_json() for p in self.profiles],
        }


@dataclass(frozen=True)
class ProfileList:
    kind: ClassVar[str] = "ProfileList"
    exit_code: ClassVar[int] = 0
    gpus: tuple[GpuProfiles, ...]

    def to_json(self) -> Json:
        return {"kind": self.kind, "gpus": [g.to_json() for g in self.gpus]}


@dataclass(frozen=True)
class SimView:
    """The simulated node as `sim` commands report it: its state document, and what changed."""

    kind: ClassVar[str] = "SimNode"
    exit_code: ClassVar[int] = 0
    path: str
    state: NodeState
    message: str = ""
    created: InstanceView | None = None
    extra: Json = field(default_factory=dict)

    def to_json(self) -> Json:
        out: Json = {"kind": self.kind, "path": self.path}
        if self.message:
            out["message"] = self.message
        if self.created is not None:
            out["instance"] = self.created.to_json()
        out.update(self.extra)
        files = NodeFiles.beside(Path(self.path))
        out["migMinors"] = str(files.mig_minors)
        out["procDevices"] = str(files.proc_devices)
        out["capabilitiesDir"] = str(files.capabilities)
        out["cdiBaseDir"] = str(files.cdi_base_dir)
        doc = self.state.to_json()
        for key in ("gpus", "faults", "calls", "driverVersion"):
            out[key] = doc[key]
        return out


class CheckStatus(str, enum.Enum):
    """How one `doctor` check came out."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One `doctor` check: what it looked at, how it came out, and a one-line fix.

    `exit_code` matters only for a failing check: the contract code its failure maps to
    (4 hardware or I/O, 5 state that cannot be trusted); it is not part of the JSON object.
    """

    name: str
    status: CheckStatus
    message: str
    hint: str = ""
    exit_code: int = 0

    def to_json(self) -> Json:
        return {
            "name": self.name,
            "status": self.status.value,
            "message": self.message,
            "hint": self.hint or None,
        }


@dataclass(frozen=True)
class DoctorReport:
    """`doctor`: every check, in order. Exits 0 unless a check failed; then 4 when any failing
    check is a hardware or I/O failure, else 5 (see hamimig/engine/doctor.py)."""

    kind: ClassVar[str] = "Doctor"
    checks: tuple[Check, ...]
    sim: str | None = None
    state_dir: str = ""
    cdi_dir: str = ""

    def count(self, status: CheckStatus) -> int:
        return sum(1 for c in self.checks if c.status is status)

    @property
    def exit_code(self) -> int:
        failed = [c for c in self.checks if c.status is CheckStatus.FAIL]
        if not failed:
            return 0
        return 4 if any(c.exit_code == 4 for c in failed) else 5

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "checks": [c.to_json() for c in self.checks],
            "summary": {s.value: self.count(s) for s in CheckStatus},
            "exitCode": self.exit_code,
            "sim": self.sim,
            "stateDir": self.state_dir,
            "cdiDir": self.cdi_dir,
        }


@dataclass(frozen=True)
class Metrics:
    """`metrics`: the Prometheus text exposition, and where it was written (None: stdout)."""

    kind: ClassVar[str] = "Metrics"
    exit_code: ClassVar[int] = 0
    path: str | None
    series: int
    text: str
    warnings: tuple[Warning_, ...] = ()

    def to_json(self) -> Json:
        out: Json = {"kind": self.kind, "path": self.path, "series": self.series}
        if self.path is None:  # nothing written: the exposition itself is the result
            out["text"] = self.text
        if self.warnings:
            out["warnings"] = [w.to_json() for w in self.warnings]
        return out


@dataclass(frozen=True)
class Forgotten:
    """One thing `forget` dropped (or would drop): a record with its CDI spec, or an intent.

    `unreadable` says why the file could not be decoded (it is dropped by name all the same);
    `state` is the record's state when it could be read.
    """

    mig_uuid: str | None = None
    intent: str | None = None
    record: str | None = None
    cdi_spec: str | None = None
    intent_file: str | None = None
    state: str | None = None
    unreadable: str | None = None
    note: str | None = None

    def to_json(self) -> Json:
        out: Json = (
            {"intent": self.intent, "intentFile": self.intent_file}
            if self.intent is not None
            else {"migUUID": self.mig_uuid, "state": self.state}
        )
        out.update({"record": self.record, "cdiSpec": self.cdi_spec})
        out["unreadable"] = self.unreadable
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class Forget:
    """`forget`: ownership dropped, hardware untouched (a live instance becomes Unmanaged)."""

    kind: ClassVar[str] = "Forget"
    exit_code: ClassVar[int] = 0
    dry_run: bool
    forgotten: tuple[Forgotten, ...]
    warnings: tuple[Warning_, ...] = ()

    def to_json(self) -> Json:
        out: Json = {
            "kind": self.kind,
            "dryRun": self.dry_run,
            "forgotten": [f.to_json() for f in self.forgotten],
        }
        if self.warnings:
            out["warnings"] = [w.to_json() for w in self.warnings]
        return out
