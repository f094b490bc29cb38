"""`config show`: the effective configuration."""

from __future__ import annotations

import typer

from hamimig.cli.context import execute

app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)


@app.command("show")
def show(ctx: typer.Context) -> None:
    """Every setting's effective value and where it came from.

    The source of each: the config file, the environment or the default."""
    from hamimig.reports.settings import show_config

    execute(ctx, show_config)
