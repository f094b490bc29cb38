"""Which NVML functions change the node, and the simulated node's NVML call counts.

The simulator counts every call by function name since `sim init`. Tests judge a command by
those counts: a refusal or a read-only command makes no mutating call, a reuse stays within its
budget. `MUTATING_NVML` is the one list of the functions that create or destroy GPU and compute
instances; tests/test_suite_layout.py keeps it equal to the simulator's own list of writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import SimStore
from tests.support.cli import Cli
from tests.support.node import sim_state

CREATE_GI = "nvmlDeviceCreateGpuInstanceWithPlacement"
CREATE_CI = "nvmlGpuInstanceCreateComputeInstance"
DESTROY_CI = "nvmlComputeInstanceDestroy"
DESTROY_GI = "nvmlGpuInstanceDestroy"

MUTATING_NVML: tuple[str, ...] = (CREATE_GI, CREATE_CI, DESTROY_CI, DESTROY_GI)
"""Every NVML function the simulator implements that changes the node's GI/CI layout."""

NOT_COUNTED: tuple[str, ...] = ("nvmlInit", "nvmlShutdown")
"""Calls every process makes once, whatever the command: left out of call budgets."""


def calls(node: Cli | Path) -> dict[str, int]:
    """NVML calls counted on the node so far, by function (a `Cli`, or the node file's path)."""
    counted: dict[str, int] = sim_state(node if isinstance(node, Path) else node.sim)["calls"]
    return dict(counted)


def call_diff(
    before: dict[str, int], after: dict[str, int], *, ignored: tuple[str, ...] = NOT_COUNTED
) -> dict[str, int]:
    """The calls made between two counts, by function (`ignored` left out)."""
    return {
        name: after[name] - before.get(name, 0)
        for name in after
        if name not in ignored and after[name] != before.get(name, 0)
    }


def mutating(counts: dict[str, int]) -> dict[str, int]:
    """The mutating functions of a count or a difference of counts."""
    return {name: n for name, n in counts.items() if name in MUTATING_NVML}


def mutating_calls(cli: Cli) -> dict[str, int]:
    """Mutating NVML calls counted on the node so far."""
    return mutating(calls(cli))


class _Unbound:
    """An NVML function that older bindings do not have: reading it fails as for any other
    function the module lacks (`SimNvml.__getattr__`)."""

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        raise AttributeError("not in these bindings")


def older_bindings(store: SimStore, lacking: tuple[str, ...]) -> SimNvml:
    """The simulated module as a pynvml release that predates the functions in `lacking`."""
    unknown = [name for name in lacking if not callable(getattr(SimNvml, name, None))]
    if unknown:
        raise ValueError(f"the simulator does not implement {', '.join(unknown)}")
    older = type("OlderSimNvml", (SimNvml,), dict.fromkeys(lacking, _Unbound()))
    module: SimNvml = older(store)
    return module
