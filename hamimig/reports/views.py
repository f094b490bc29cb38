"""Typed results of the operator reports (list, show, profiles, doctor, metrics, sim), with
the camelCase JSON shapes docs/formats.md fixes. They build on the lifecycle's results
(hamimig/engine/results.py): an instance is shown the same way wherever it appears.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from hamimig.durations import to_rfc3339
from hamimig.hw.types import MigMode, Placement
from hamimig.sim.files import NodeFiles

if TYPE_CHECKING:
    from hamimig.sim.state import NodeState
    from hamimig.store.queue import QueuedRemoval

from hamimig.engine.results import InstanceView, Json, Warning_, placement_json


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
class GpuView:
    index: int
    uuid: str
    model: str
    mig_mode: MigMode
    memory_slices: int
    mig_pending: MigMode
    """The MIG mode after the GPU's next reset (NVML's pending mode)."""

    def to_json(self) -> Json:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "migMode": self.mig_mode.value,
            "migModePending": self.mig_pending.value,
            "memorySlices": self.memory_slices,
        }


@dataclass(frozen=True)
class InstanceList:
    kind: ClassVar[str] = "InstanceList"
    exit_code: ClassVar[int] = 0
    instances: tuple[InstanceView, ...]
    gpus: tuple[GpuView, ...]
    warnings: tuple[Warning_, ...] = ()
    queued_removals: tuple[QueuedRemoval, ...] = ()
    """CDI specs of destroyed instances still published because their removal failed."""

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "instances": [i.to_json() for i in self.instances],
            "gpus": [g.to_json() for g in self.gpus],
            "warnings": [w.to_json() for w in self.warnings],
            "queuedRemovals": [q.to_json() for q in self.queued_removals],
        }


@dataclass(frozen=True)
class ProfileView:
    name: str
    id: int
    slice_count: int
    memory_mb: int
    max_instances: int
    placements: tuple[Placement, ...]
    free_instances: int
    """How many more fit beside the live instances (nvidia-smi's Free; `max_instances` is its
    Total); 0 while MIG is not enabled."""

    def to_json(self) -> Json:
        return {
            "name": self.name,
            "id": self.id,
            "sliceCount": self.slice_count,
            "memoryMB": self.memory_mb,
            "maxInstances": self.max_instances,
            "freeInstances": self.free_instances,
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
    warnings: tuple[Warning_, ...] = ()

    def to_json(self) -> Json:
        out: Json = {"kind": self.kind, "gpus": [g.to_json() for g in self.gpus]}
        if self.warnings:
            out["warnings"] = [w.to_json() for w in self.warnings]
        return out


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
        files = NodeFiles.of(Path(self.path))
        out["migMinors"] = str(files.mig_minors)
        out["procDevices"] = str(files.proc_devices)
        out["capabilitiesDir"] = str(files.capabilities)
        out["cdiBaseDir"] = str(files.cdi_base_dir)
        doc = self.state.to_json()
        for key in ("gpus", "faults", "calls", "driverVersion"):
            out[key] = doc[key]
        out["clock"] = {
            "now": to_rfc3339(time.time() + self.state.clock_offset),
            "offsetSeconds": self.state.clock_offset,
        }
        return out


class CheckStatus(str, enum.Enum):
    """How one `doctor` check came out."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIPPED = "skipped"
    """Not run, and why is in the message (no pod source, for the pod checks): never `ok`."""


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
    check is a hardware or I/O failure, else 5 (see hamimig/reports/doctor)."""

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
class EventList:
    """`events`: lifecycle events from the journal, oldest first (docs/formats.md "Event
    journal" gives the keys of each)."""

    kind: ClassVar[str] = "EventList"
    exit_code: ClassVar[int] = 0
    events: tuple[dict[str, object], ...]
    warnings: tuple[Warning_, ...] = ()
    path: str | None = None
    """The journal's file (tables say where to look when it is empty)."""
    matched: int = 0
    """How many events matched the filters; `events` holds the newest of them."""

    def to_json(self) -> Json:
        out: Json = {"kind": self.kind, "events": [dict(e) for e in self.events]}
        if self.warnings:
            out["warnings"] = [w.to_json() for w in self.warnings]
        return out
