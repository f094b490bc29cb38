"""`demo`: the lifecycle narrated on a temporary simulated node."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli.context import execute, globals_of
from hamimig.errors import PathUnusable

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result
    from hamimig.rehearsal.demo import DemoStep


def demo(
    ctx: typer.Context,
    step: Annotated[bool, typer.Option("--step", help="Wait for Enter between steps.")] = False,
    keep: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH", help="Build the demo node in this (empty) directory and keep it."
        ),
    ] = None,
) -> None:
    """Narrate the whole lifecycle on a temporary simulated node.

    The node is a simulated H100, built in a temporary directory (or in --keep PATH)."""
    from hamimig.cli import render
    from hamimig.rehearsal.demo import prepare_keep, transcript

    narrate = globals_of(ctx).output in ("table", "wide")

    def show(s: DemoStep) -> None:
        if narrate:
            render.demo_step(s)
            if step:
                render.wait_for_enter()

    def action(_: Node) -> Result:
        if keep is not None:
            try:
                prepare_keep(keep)
            except PathUnusable as err:
                raise err.for_option("--keep") from None
            return transcript(keep, show)
        with tempfile.TemporaryDirectory(prefix="hamimig-demo-") as tmp:
            return transcript(Path(tmp), show)

    execute(ctx, action)
