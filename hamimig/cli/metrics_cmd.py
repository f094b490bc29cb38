"""`metrics`: Prometheus text format for node-exporter's textfile collector, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli.context import execute
from hamimig.errors import PathUnusable

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


def metrics(
    ctx: typer.Context,
    textfile: Annotated[
        Path | None,
        typer.Option(
            "--textfile",
            metavar="PATH",
            help=(
                "Replace PATH atomically (mode 0644) instead of printing; for node-exporter's "
                "textfile collector PATH is <--collector.textfile.directory>/hamimig.prom."
            ),
        ),
    ] = None,
) -> None:
    """Prometheus metrics, for node-exporter's textfile collector.

    HAMi-compatible instance info, instances per GPU and state, and lifecycle counters
    (creations, reuses, reclaims, failures) kept in the state directory."""
    from hamimig.reports import metrics as metrics_report

    def action(node: Node) -> Result:
        try:
            return metrics_report.export(node, textfile)
        except PathUnusable as err:
            raise err.for_option("--textfile") from None

    execute(ctx, action)


def register(app: typer.Typer) -> None:
    app.command("metrics")(metrics)
