"""The node a command works on: paths from the global options and a hardware session.

Hardware is opened lazily and once per command, so read-only commands that never touch NVML
(and `--help`) never import pynvml or load the driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from hamimig.errors import UsageError
from hamimig.hw.nvml import NvmlHardware, bindings
from hamimig.hw.sim import SimNvml
from hamimig.hw.sim_state import SimStore
from hamimig.hw.types import Gpu, MigHardware, Placement

DEFAULT_STATE_DIR = Path("/var/run/hami/dynamic-mig-state")
DEFAULT_CDI_DIR = Path("/var/run/cdi")
DEFAULT_CONFIG = Path("/etc/hamimig/config.yaml")

_GPU_UUID = re.compile(r"^GPU-[0-9A-Fa-f-]{8,64}$")
_PLACEMENT = re.compile(r"^(\d{1,3})(?::(\d{1,3}))?$")


@dataclass
class Node:
    """What every command needs to know about where it runs."""

    state_dir: Path = DEFAULT_STATE_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    config: Path = DEFAULT_CONFIG
    sim: Path | None = None
    node_name: str | None = None
    _hw: NvmlHardware | None = field(default=None, repr=False)

    def hardware(self) -> MigHardware:
        """Open NVML (or the simulated node) on first use; closed by `close()`."""
        if self._hw is None:
            if self.sim is not None:
                store = SimStore(self.sim)
                minors = store.minors_path
                assert minors is not None
                hw = NvmlHardware(SimNvml(store), minors)
            else:
                hw = NvmlHardware(bindings())
            hw.open()
            self._hw = hw
        return self._hw

    def close(self) -> None:
        if self._hw is not None:
            self._hw.close()
            self._hw = None


def resolve_gpu(hw: MigHardware, ref: str) -> Gpu:
    """A GPU named by NVML index (`0`) or UUID (`GPU-…`)."""
    text = ref.strip()
    if text.isdigit():
        index = int(text)
        count = hw.gpu_count()
        if index >= count:
            raise UsageError(f"no GPU {index} on this node (it has {count} GPU(s))")
        return hw.gpu(index)
    if _GPU_UUID.match(text):
        return hw.gpu_by_uuid(text)
    raise UsageError(f"invalid GPU {ref!r}: give an NVML index (0) or a GPU UUID (GPU-…)")


def parse_placement(text: str) -> tuple[int, int | None]:
    """`START` or `START:SIZE`, in memory slices."""
    match = _PLACEMENT.match(text.strip())
    if not match:
        raise UsageError(f"invalid placement {text!r}: use START or START:SIZE, e.g. 0 or 2:2")
    start, size = match.group(1), match.group(2)
    return int(start), (int(size) if size is not None else None)


def legal_placement(
    profile_name: str, placements: tuple[Placement, ...], start: int, size: int | None
) -> Placement:
    """The profile's placement at `start`, or a usage error listing the legal ones."""
    for p in placements:
        if p.start == start and (size is None or size == p.size):
            return p
    legal = ", ".join(str(p) for p in placements)
    asked = f"{start}" if size is None else f"{start}:{size}"
    raise UsageError(f"placement {asked} is not legal for {profile_name}; legal: {legal}")
