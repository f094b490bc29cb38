"""The simulated node as tests read it: its state document (GPUs, GI/CI layout, faults, NVML
call counts) and the real NVML adapter running over it. Tests look at the node directly, not
through `hamimig`, to see what a command really did to the hardware."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hamimig.hw.nvml import NvmlHardware
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore
from tests.forked import flush_counts
from tests.support.cli import Cli

# Well-formed UUIDs that name nothing on a simulated node.
ABSENT_GPU = "GPU-0badc0de-0000-4000-8000-000000000000"
ABSENT_MIG = "MIG-0badc0de-0000-4000-8000-000000000000"


def node_dir(path: Path) -> Path:
    """The simulated node's own directory beside its file (`<file>.d/`): its driver files
    (`mig-minors`, `proc-devices`, `nvidia-capabilities/`, `nvidia-cdi/`) and, unless the
    command line names others, its state, CDI directory and config."""
    return path.with_name(path.name + ".d")


@contextlib.contextmanager
def node_document(path: Path) -> Iterator[dict[str, Any]]:
    """Edit the simulated node's stored JSON document itself (a test changing the node behind
    everyone's back); `SimStore.edit()` is the typed way."""
    store = SimStore(path)
    with store._guard():
        doc = store._document(store._raw())
        try:
            yield doc
        finally:
            path.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")


def sim_state(path: Path) -> dict[str, Any]:
    """The simulated node's state document, with every call counted so far in this process."""
    flush_counts()  # what an in-process simulator counted so far, as its exit would publish
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def open_hw(path: Path) -> NvmlHardware:
    """`hw/nvml.py` opened, unchanged, over the simulated pynvml module of the node at `path`."""
    store = SimStore(path)
    assert store.files is not None
    hw = NvmlHardware(SimNvml(store), store.files.mig_minors)
    hw.open()
    return hw


def gpus(cli: Cli) -> list[dict[str, Any]]:
    """The simulated GPUs with their live GI/CI layout, busy marks and MIG mode."""
    found: list[dict[str, Any]] = sim_state(cli.sim)["gpus"]
    return found


def live(cli: Cli, gpu: int = 0) -> list[tuple[int, int, str | None]]:
    """(start, size, MIG UUID or None for a GI without CI) of every GI on one GPU."""
    out = []
    for gi in gpus(cli)[gpu]["gpuInstances"]:
        p = gi["placement"]
        cis = gi["computeInstances"]
        if not cis:
            out.append((p["start"], p["size"], None))
        for ci in cis:
            out.append((p["start"], p["size"], ci["migUUID"]))
    return sorted(out, key=lambda t: (t[0], t[2] or ""))


def live_uuids(cli: Cli) -> set[str]:
    """The MIG UUID of every live compute instance on the node."""
    return {
        ci["migUUID"]
        for gpu in gpus(cli)
        for gi in gpu["gpuInstances"]
        for ci in gi["computeInstances"]
    }
