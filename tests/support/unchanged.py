"""What "nothing changed" means for a command that must change nothing (a refusal, a dry run, an
idempotent run): all four of the state directory, the CDI directory, the simulated GI/CI layout
and the mutating NVML calls are what they were before."""

from __future__ import annotations

from typing import Any

from tests.support.cli import Cli
from tests.support.files import entries
from tests.support.node import gpus
from tests.support.nvml import mutating_calls


def node_state(cli: Cli) -> tuple[Any, ...]:
    """State directory, CDI directory (both by `entries`), layout, mutating NVML calls."""
    return entries(cli.state_dir), entries(cli.cdi_dir), gpus(cli), mutating_calls(cli)


class Unchanged:
    """The node before a command that must change nothing; `check` compares after."""

    def __init__(self, cli: Cli) -> None:
        self.cli = cli
        self.before = node_state(cli)

    def check(self) -> None:
        after = node_state(self.cli)
        names = ("state dir", "CDI dir", "layout", "mutating NVML calls")
        for name, b, a in zip(names, self.before, after, strict=True):
            assert a == b, name
