"""Shell completion through click's own machinery (docs/reference.md), so the scripts stay the
ones Typer generates; the callbacks here add only what the node knows, and read no NVML, no
config, no lock, since they run on every TAB.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from hamimig.cli.context import global_paths

COMPLETE_VAR = "_HAMIMIG_COMPLETE"
"""The environment variable that makes a run answer a TAB (Typer's name for it)."""


@contextlib.contextmanager
def answering() -> Iterator[None]:
    """While answering a TAB (Typer's completion exits the process when done).

    Registered by hand: `add_completion` would add its options to every help. Values are read
    as typed, since Typer's conversion would load pydantic, as slow as the rest of a TAB."""
    from typer._click.shell_completion import add_completion_class
    from typer._completion_classes import BashComplete, completion_init

    class Bash(BashComplete):
        """bash splits `--sim=PATH` into three words at the `=` (`COMP_WORDBREAKS`), which
        click would read as `--sim` with the value `=`: the words joined back as typed."""

        def get_completion_args(self) -> tuple[list[str], str]:
            args, incomplete = super().get_completion_args()
            words = [*args, incomplete]
            for i in range(len(words) - 2, 0, -1):
                if words[i] == "=" and words[i - 1].startswith("-"):
                    words[i - 1 : i + 2] = ["".join(words[i - 1 : i + 2])]
            return words[:-1], words[-1]

    completion_init()
    add_completion_class(Bash, "bash")
    parameter = typer.core._TyperParameter
    converting = parameter.get_runtime_param
    setattr(parameter, "get_runtime_param", lambda self: _AsTyped)  # noqa: B010
    try:
        yield
    finally:
        setattr(parameter, "get_runtime_param", converting)  # noqa: B010


class _AsTyped:
    @staticmethod
    def coerce(value: Any, param: Any, ctx: Any) -> Any:
        return value


def _node(ctx: typer.Context) -> tuple[Path, Path | None] | None:
    """The state directory and simulated node the command line being completed names (given
    before or after the command), as the command would read them; None when one is empty."""
    root = ctx.find_root()
    if "" in (root.params["state_dir"], root.params["sim"]):
        return None
    for name in ("state_dir", "sim"):  # the shell expands a `~` only once the line is run
        root.params[name] = root.params[name] and os.path.expanduser(root.params[name])
    sim = root.params["sim"]
    return global_paths(root)[0]["state_dir"], None if sim is None else Path(sim)


def profiles(ctx: typer.Context) -> list[str]:
    """The profiles of the boards hamimig knows and those the records name."""
    from hamimig.reports import completion

    node = _node(ctx)
    return completion.profiles(node and node[0])


def instances(ctx: typer.Context, incomplete: str) -> list[str]:
    """The records' MIG UUIDs, or their CDI device names once the word starts as those do."""
    from hamimig.reports import completion

    node = _node(ctx)
    return completion.instances(node[0], incomplete.startswith("m")) if node else []


def gpus(ctx: typer.Context) -> list[str]:
    """The GPUs the records name and a simulated node's: NVML indexes, then GPU UUIDs."""
    from hamimig.reports import completion

    node = _node(ctx)
    return completion.gpus(*node) if node else []
