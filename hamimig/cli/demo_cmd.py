"""`demo`: the lifecycle narrated on a temporary simulated node."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli.context import globals_of
from hamimig.errors import HamimigError

if TYPE_CHECKING:
    from hamimig.engine.demo import DemoStep


def demo(
    ctx: typer.Context,
    step: Annotated[bool, typer.Option("--step", help="Wait for Enter between steps.")] = False,
    keep: Annotated[
        Path | None,
        typer.Option(help="Build the demo node in this (empty) directory and keep it."),
    ] = None,
) -> None:
    """Run the whole lifecycle on a temporary simulated H100 node and narrate it."""
    from hamimig.cli import render
    from hamimig.engine.demo import prepare_keep, transcript

    output = globals_of(ctx).output
    narrate = output == "table"

    def show(s: DemoStep) -> None:
        if narrate:
            render.demo_step(s)
            if step:
                render.wait_for_enter()

    try:
        if keep is not None:
            prepare_keep(keep)
            result = transcript(keep, show)
        else:
            with tempfile.TemporaryDirectory(prefix="hamimig-demo-") as tmp:
                result = transcript(Path(tmp), show)
    except HamimigError as err:
        render.error(err, output)
        raise typer.Exit(err.exit_code) from None
    if narrate:
        render.demo_summary(result)
    else:
        render.emit(result, output)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
