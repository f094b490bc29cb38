"""The simulated node as the engine sees it: one object for its hardware, its file-operation
fault hook and the paths of the driver's files in its home."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hamimig.hw.nvml import NvmlHardware
from hamimig.sim.files import NodeFiles
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore, run_file_op
from hamimig.vocabulary import FileOpName


@dataclass(frozen=True)
class SimBackend:
    """A file-backed simulated node, shared with every other process that names `path`."""

    path: Path
    store: SimStore = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "store", SimStore(self.path))

    @property
    def files(self) -> NodeFiles:
        """The driver's and NVIDIA's files, in the node's home (never the host's)."""
        files = self.store.files
        assert files is not None, "a file-backed node"
        return files

    def hardware(self) -> NvmlHardware:
        """The real NVML adapter over the simulated pynvml module (not yet opened)."""
        return NvmlHardware(SimNvml(self.store), self.files.mig_minors)

    def file_op(self, op: FileOpName, perform: Callable[[], None]) -> None:
        """The fault hook a simulated node's stores are built with (`Node.faults`): honours
        the node's file faults."""
        run_file_op(self.store, op, perform)
