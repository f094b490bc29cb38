"""The global options every command shares, and the one way a command runs the engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from hamimig.errors import HamimigError, HardwareError

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


@dataclass(frozen=True)
class Refused:
    """A dry run's verdict when the real run would refuse: the plan it could make (None when
    the refusal came before there was one) and the refusal, whose exit code it exits with.

    Printed as the plan, then the error line; in JSON and YAML as the plan object (`kind`,
    `dryRun` and whatever it has) carrying the refusal as `error`, not `kind: Error`."""

    kind: str
    plan: Result | None
    error: HamimigError

    def plan_json(self) -> dict[str, Any]:
        return self.plan.to_json() if self.plan is not None else {"kind": self.kind, "dryRun": True}


@dataclass
class Globals:
    node: Node
    output: str


def globals_of(ctx: typer.Context) -> Globals:
    root = ctx.find_root()
    obj = root.obj
    assert isinstance(obj, Globals), "the root callback sets the globals"
    return obj


def command_name(ctx: typer.Context) -> str:
    """The command as typed after the program name (`allocate`, `sim fault add`)."""
    names: list[str] = []
    current: Any = ctx  # typer's and click's Context alike
    while current is not None and current.parent is not None:
        names.append(current.info_name or "")
        current = current.parent
    return " ".join(reversed(names))


def execute(
    ctx: typer.Context, action: Callable[[Node], Result | Refused], headers: bool = True
) -> None:
    """Run one engine call and render its result or its failure with the contract exit code.

    `headers=False` (`list --no-headers`) leaves a table's title and header row out. A table
    reads the node's clock (`Node.now`, a simulated node's own) only when it shows ages."""
    from hamimig.cli import render  # output machinery loads only when there is output

    g = globals_of(ctx)
    g.node.command = command_name(ctx)
    try:
        try:
            result = action(g.node)
        finally:
            g.node.close()
    except HamimigError as err:
        render.error(err, g.output)
        raise typer.Exit(err.exit_code) from None
    except OSError as exc:
        io_error = HardwareError(f"I/O error: {exc}")
        render.error(io_error, g.output)
        raise typer.Exit(io_error.exit_code) from None
    if isinstance(result, Refused):
        if result.plan is not None and g.output not in ("json", "yaml"):
            render.emit(result.plan, g.output, headers=headers, clock=g.node.now)
        render.error(result.error, g.output, within=result.plan_json())
        raise typer.Exit(result.error.exit_code)
    render.emit(result, g.output, headers=headers, clock=g.node.now)
    if result.exit_code:  # a pass that reports what it did and what still failed
        raise typer.Exit(result.exit_code)
