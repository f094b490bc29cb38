"""Value types and the `MigHardware` protocol: the whole surface the lifecycle uses.

Everything above this seam sees plain frozen values, never NVML handles, so that the engine can
be planned and tested as pure functions over snapshots, and so that the real adapter
(`hw/nvml.py`) and the simulator are interchangeable below it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from hamimig.errors import UsageError

MEMORY_SLICES = 8
"""A100, H100, H200 and B200 have 8 memory slices; placements are expressed in them (a GPU's
own count is the end of its last legal placement)."""

FULL_CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 6: 6, 7: 4, 8: 5}
"""The compute-instance profile (NVML's `NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE`) of the CI
that spans a whole GI of N compute slices: the one table of them, which the real adapter asks
NVML for and the simulator offers."""


class MigMode(str, enum.Enum):
    """A GPU's MIG mode as `list`'s `migMode` spells it (docs/formats.md "JSON results")."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True, order=True)
class Placement:
    """A half-open interval of memory slices `[start, start+size)`."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"


@dataclass(frozen=True)
class Gpu:
    """One physical GPU. `minor` names `/dev/nvidia<minor>` and the `gpuN` of mig-minors."""

    index: int
    uuid: str
    model: str
    minor: int
    mig_mode: MigMode
    mig_pending: MigMode

    @property
    def reset_pending(self) -> bool:
        """A MIG mode change was requested but needs a GPU reset to take effect."""
        return self.mig_mode is not self.mig_pending


@dataclass(frozen=True)
class GiProfile:
    """A GPU instance profile: `name` without NVML's `MIG ` prefix, e.g. `1g.10gb`.

    `slice_count` is NVML's `sliceCount` (compute slices); placements are in memory slices.
    """

    name: str
    id: int
    index: int
    slice_count: int
    memory_mb: int
    max_instances: int
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class ComputeInstance:
    """A CI and the MIG device it forms; `mig_uuid` is what containers and HAMi see."""

    id: int
    mig_uuid: str
    spans_gi: bool = True
    """Whether the CI has every compute slice of its GI (the one hamimig creates does; one made
    with a smaller CI profile leaves room for another tenant's CI in the same GI)."""


@dataclass(frozen=True)
class GpuInstance:
    """A live GI with its CIs (possibly none: an orphan GI after a failed or crashed create)."""

    gpu_index: int
    gpu_uuid: str
    id: int
    profile_id: int
    placement: Placement
    compute_instances: tuple[ComputeInstance, ...]

    @property
    def shared(self) -> bool:
        """One GPU instance is one tenant: a GI with several CIs, or with one that does not
        span it, is never anyone's single instance."""
        cis = self.compute_instances
        return len(cis) > 1 or any(not ci.spans_gi for ci in cis)


@dataclass(frozen=True)
class MigDevice:
    """The identity of one MIG device as read back directly from its MIG UUID."""

    mig_uuid: str
    gpu_uuid: str
    gpu_index: int
    gpu_minor: int
    gpu_instance_id: int
    compute_instance_id: int
    profile_id: int
    placement: Placement
    spans_gi: bool = True
    """As `ComputeInstance.spans_gi`."""


@dataclass(frozen=True)
class CapabilityMinors:
    """Minors of `/dev/nvidia-caps/nvidia-cap<N>` for a GI's and a CI's access capability."""

    gi_access: int
    ci_access: int


class MigHardware(Protocol):
    """Exactly what the lifecycle needs from a MIG-capable node, GPUs by NVML index.
    Implementations raise `NvmlError` or `UsageError` (unknown GPU), never partial results."""

    def driver_version(self) -> str: ...

    def gpu_count(self) -> int: ...

    def gpu(self, index: int) -> Gpu: ...

    def gpu_by_uuid(self, uuid: str) -> Gpu: ...

    def mig_modes(self, gpu: int) -> tuple[MigMode, MigMode]:
        """The current and the pending MIG mode (`Gpu.mig_mode`, `Gpu.mig_pending`), read
        without the rest of the GPU's facts."""
        ...

    def profiles(self, gpu: int) -> tuple[GiProfile, ...]: ...

    def remaining_capacity(self, gpu: int, profile_id: int) -> int: ...

    def find_profile(self, gpu: int, name: str) -> GiProfile | None: ...

    def profile_name(self, gpu: int, profile_id: int) -> str | None: ...

    def layout(self, gpu: int) -> tuple[GpuInstance, ...]: ...

    def mig_device(self, mig_uuid: str) -> MigDevice | None: ...

    def create_gpu_instance(self, gpu: int, profile_id: int, placement: Placement) -> int: ...

    def create_compute_instance(self, gpu: int, gi_id: int) -> ComputeInstance: ...

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None: ...

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None: ...

    # Processes are what HAMi counts as busy: compute, graphics and MPS compute processes.
    def gpu_has_processes(self, gpu: int) -> bool: ...

    def instance_process_count(self, mig_uuid: str) -> int: ...

    def capability_minors(self, gpu_minor: int, gi_id: int, ci_id: int) -> CapabilityMinors: ...

    def close(self) -> None: ...


_PLACEMENT = re.compile(r"^(\d{1,3})(?::(\d{1,3}))?$")


class PlacementSpec(NamedTuple):
    """A placement as asked for: a start in memory slices, and a size only when given (the
    profile decides it otherwise)."""

    start: int
    size: int | None = None

    def __str__(self) -> str:
        return f"{self.start}" if self.size is None else f"{self.start}:{self.size}"


def parse_placement(text: str) -> PlacementSpec:
    """`START` or `START:SIZE`, in memory slices."""
    match = _PLACEMENT.match(text.strip())
    if not match:
        raise UsageError(f"invalid placement {text!r}: use START or START:SIZE, e.g. 0 or 2:2")
    start, size = match.group(1), match.group(2)
    return PlacementSpec(int(start), (int(size) if size is not None else None))


def legal_placement(
    profile_name: str, placements: tuple[Placement, ...], start: int, size: int | None
) -> Placement:
    """The profile's placement at `start`, or a usage error listing the legal ones."""
    for p in placements:
        if p.start == start and (size is None or size == p.size):
            return p
    legal = ", ".join(str(p) for p in placements)
    asked = PlacementSpec(start, size)
    raise UsageError(f"placement {asked} is not legal for {profile_name}; legal: {legal}")
