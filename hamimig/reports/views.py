"""Typed results of the operator reports (list, show, profiles, doctor, metrics, sim), with
the camelCase JSON shapes docs/formats.md fixes. They build on the lifecycle's results
(hamimig/engine/results.py): an instance is shown the same way wherever it appears, and each
JSON object is declared the same way, by its model's fields.
"""

from __future__ import annotations

import enum
import time
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, InstanceOf, PlainSerializer

from hamimig.durations import to_rfc3339
from hamimig.engine.results import (
    InstanceView,
    Json,
    Reported,
    Shown,
    Warning_,
    after,
    omitted_when_empty,
)
from hamimig.hw.types import MigMode, Placement
from hamimig.sim.files import NodeFiles
from hamimig.sim.state import NodeState
from hamimig.store.queue import QueuedRemoval


class Report(Shown):
    """A read-only report: it cannot fail, so it exits 0."""

    exit_code: ClassVar[int] = 0


class InstanceDetail(Report):
    """`show`: one instance, with where its record and CDI spec live."""

    kind: ClassVar[str] = "Instance"
    instance: InstanceView
    record: str | None
    cdi_spec: str | None = Field(alias="cdiSpec")
    warnings: tuple[Warning_, ...] = omitted_when_empty()

    def shape(self, out: Json) -> Json:
        return {**out.pop("instance"), **out}


class _Gpu(Reported):
    index: int
    uuid: str
    model: str


class GpuView(_Gpu):
    mig_mode: MigMode = Field(alias="migMode")
    mig_pending: MigMode = Field(alias="migModePending")
    """The MIG mode after the GPU's next reset (NVML's pending mode)."""
    memory_slices: int = Field(alias="memorySlices")


class InstanceList(Report):
    kind: ClassVar[str] = "InstanceList"
    instances: tuple[InstanceView, ...]
    gpus: tuple[GpuView, ...]
    warnings: tuple[Warning_, ...] = ()
    queued_removals: tuple[
        Annotated[QueuedRemoval, PlainSerializer(lambda q: q.to_json())], ...
    ] = Field((), alias="queuedRemovals")
    """CDI specs of destroyed instances still published because their removal failed."""


class ProfileView(Reported):
    name: str
    id: int
    slice_count: int = Field(alias="sliceCount")
    memory_mb: int = Field(alias="memoryMB")
    max_instances: int = Field(alias="maxInstances")
    free_instances: int = Field(alias="freeInstances")
    """How many more fit beside the live instances (nvidia-smi's Free; `max_instances` is its
    Total); 0 while MIG is not enabled."""
    placements: tuple[Placement, ...]


class GpuProfiles(_Gpu):
    profiles: tuple[ProfileView, ...]


class ProfileList(Report):
    kind: ClassVar[str] = "ProfileList"
    gpus: tuple[GpuProfiles, ...]
    warnings: tuple[Warning_, ...] = omitted_when_empty()


class SimView(Report):
    """The simulated node as `sim` commands report it: its state document, and what changed."""

    kind: ClassVar[str] = "SimNode"
    path: str
    state: InstanceOf[NodeState] = Field(exclude=True)
    message: str = omitted_when_empty("")
    created: InstanceView | None = omitted_when_empty(None, alias="instance")

    def shape(self, out: Json) -> Json:
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


class Check(Reported):
    """One `doctor` check: what it looked at, how it came out, and a one-line fix.
    `exit_code` (a failing check's contract code) is not part of the JSON object."""

    name: str
    status: CheckStatus
    message: str
    hint: Annotated[str, PlainSerializer(lambda hint: hint or None)] = ""
    exit_code: int = Field(0, exclude=True)


class DoctorReport(Shown):
    """`doctor`: every check, in order. Exits 0 unless a check failed; then 4 when any failing
    check is a hardware or I/O failure, else 5 (see hamimig/reports/doctor)."""

    kind: ClassVar[str] = "Doctor"
    checks: tuple[Check, ...]
    sim: str | None = None
    state_dir: str = Field("", alias="stateDir")
    cdi_dir: str = Field("", alias="cdiDir")

    def count(self, status: CheckStatus) -> int:
        return sum(1 for c in self.checks if c.status is status)

    @property
    def exit_code(self) -> int:
        failed = [c for c in self.checks if c.status is CheckStatus.FAIL]
        if not failed:
            return 0
        return 4 if any(c.exit_code == 4 for c in failed) else 5

    def shape(self, out: Json) -> Json:
        summary = {s.value: self.count(s) for s in CheckStatus}
        return after(out, "checks", summary=summary, exitCode=self.exit_code)


class Metrics(Report):
    """`metrics`: the Prometheus text exposition, and where it was written (None: stdout)."""

    kind: ClassVar[str] = "Metrics"
    path: str | None
    series: int
    text: str
    warnings: tuple[Warning_, ...] = omitted_when_empty()

    def shape(self, out: Json) -> Json:
        if self.path is not None:  # written: the exposition is in the file, not the result
            del out["text"]
        return out


class EventList(Report):
    """`events`: lifecycle events from the journal, oldest first (docs/formats.md "Event
    journal" gives the keys of each)."""

    kind: ClassVar[str] = "EventList"
    events: tuple[dict[str, Any], ...]
    warnings: tuple[Warning_, ...] = omitted_when_empty()
    path: str | None = Field(None, exclude=True)
    """The journal's file (tables say where to look when it is empty)."""
    matched: int = Field(0, exclude=True)
    """How many events matched the filters; `events` holds the newest of them."""
