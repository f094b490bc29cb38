"""`metrics`: Prometheus text format for node-exporter's textfile collector, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hamimig.cli.context import execute


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
    """Prometheus metrics: HAMi-compatible instance info, instances per GPU and state, and
    lifecycle counters (creations, reuses, reclaims, failures) kept in the state directory."""
    from hamimig.engine import metrics as engine_metrics

    execute(ctx, lambda node: engine_metrics.export(node, textfile))


def register(app: typer.Typer) -> None:
    app.command("metrics")(metrics)
