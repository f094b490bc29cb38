"""What a caller asks the lifecycle for, as typed values: which GPU, which placement, which pod,
which instances to release or reclaim. The CLI builds them from its flags (and names the flags
in its own errors); the engine never parses a command line."""

from __future__ import annotations

from dataclasses import dataclass

from hamimig.hw.types import PlacementSpec as PlacementSpec  # re-exported
from hamimig.store.records import Owner as Owner  # re-exported

GpuRef = int | str
"""A GPU by NVML index, or by GPU UUID (`GPU-…`)."""


@dataclass(frozen=True)
class AllocateRequest:
    owner: Owner
    gpu: GpuRef
    profile: str
    placement: PlacementSpec | None = None
    """None: the lifecycle chooses (an exact Idle match first)."""


@dataclass(frozen=True)
class ByPod:
    """Every instance a pod holds: of one incarnation of it when `uid` is given (a pod
    recreated under the same name, a StatefulSet's, is another owner)."""

    namespace: str
    name: str
    uid: str | None = None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ByUuid:
    """One instance, by MIG UUID."""

    mig_uuid: str


@dataclass(frozen=True)
class ByIntent:
    """One intent, by the ID in its file name (`intent-ID.json`)."""

    intent_id: str


@dataclass(frozen=True)
class Window:
    """The Idle (and Error) instances overlapping memory slices of one GPU (size 1 when the
    placement gives only a start)."""

    gpu: GpuRef
    placement: PlacementSpec


@dataclass(frozen=True)
class AllIdle:
    """Every Idle (and Error) instance on one GPU."""

    gpu: GpuRef


@dataclass(frozen=True)
class IdleOlderThan:
    """The Idle instances of one GPU idle longer than `seconds` (by the idle policy's clock;
    an instance whose idle age is not known yet is not older than anything)."""

    gpu: GpuRef
    seconds: int


ReleaseTarget = ByPod | ByUuid
ReclaimTarget = ByUuid | Window | AllIdle | IdleOlderThan
