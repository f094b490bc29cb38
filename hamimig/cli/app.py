"""The `hamimig` Typer application: global options, command registration, error boundary."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from hamimig import __version__
from hamimig.cli import (
    config_cmd,
    demo_cmd,
    doctor_cmd,
    forget_cmd,
    inventory_cmd,
    lifecycle_cmd,
    metrics_cmd,
    recovery_cmd,
    sim_cmd,
)
from hamimig.cli.context import OUTPUTS, Globals
from hamimig.defaults import DEFAULT_CDI_DIR, DEFAULT_CONFIG, DEFAULT_STATE_DIR
from hamimig.errors import HamimigError, UsageError

app = typer.Typer(
    name="hamimig",
    help="Administer HAMi's dynamic MIG instance lifecycle on a GPU node.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    from hamimig.cli import render

    if value:
        render.text(f"hamimig {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    state_dir: Annotated[
        Path,
        typer.Option(
            envvar="HAMIMIG_STATE_DIR",
            help="Ownership records, intents, queues and the node lock.",
        ),
    ] = DEFAULT_STATE_DIR,
    cdi_dir: Annotated[
        Path, typer.Option(envvar="HAMIMIG_CDI_DIR", help="Where per-instance CDI specs live.")
    ] = DEFAULT_CDI_DIR,
    config: Annotated[
        Path,
        typer.Option(envvar="HAMIMIG_CONFIG", help="YAML config (a missing file means defaults)."),
    ] = DEFAULT_CONFIG,
    sim: Annotated[
        Path | None,
        typer.Option(
            envvar="HAMIMIG_SIM", help="Use the simulated node stored in PATH instead of NVML."
        ),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(envvar="NODE_NAME", help="This node's Kubernetes name; filters pod lists."),
    ] = None,
    output: Annotated[
        str,
        typer.Option("--output", "-o", envvar="HAMIMIG_OUTPUT", help="table, json or yaml."),
    ] = "table",
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Administer HAMi's dynamic MIG instance lifecycle on a GPU node."""
    from hamimig.cli import render
    from hamimig.engine.node import Node

    if output not in OUTPUTS:
        err = UsageError(f"invalid output format {output!r}: use table, json or yaml")
        render.error(err, "table")
        raise typer.Exit(err.exit_code)
    ctx.obj = Globals(
        node=Node(
            state_dir=state_dir, cdi_dir=cdi_dir, config_path=config, sim=sim, node_name=node
        ),
        output=output,
    )


inventory_cmd.register(app)
lifecycle_cmd.register(app)
recovery_cmd.register(app)
doctor_cmd.register(app)
metrics_cmd.register(app)
demo_cmd.register(app)
forget_cmd.register(app)
app.add_typer(sim_cmd.app, name="sim")
app.add_typer(config_cmd.app, name="config")


def _requested_output(argv: list[str]) -> str:
    """The output format asked for, read before parsing so parse errors honour it too."""
    fmt = os.environ.get("HAMIMIG_OUTPUT", "table")
    for i, arg in enumerate(argv):
        if arg in ("-o", "--output") and i + 1 < len(argv):
            fmt = argv[i + 1]
        elif arg.startswith("--output="):
            fmt = arg.split("=", 1)[1]
        elif arg.startswith("-o") and len(arg) > 2:
            fmt = arg[2:]
    return fmt if fmt in OUTPUTS else "table"


def run(argv: list[str]) -> int:
    """Run the CLI on `argv`; returns the exit status. Never lets a traceback reach the user."""
    command = typer.main.get_command(app)
    fmt = _requested_output(argv)
    try:
        status = command.main(args=argv, prog_name="hamimig", standalone_mode=False)
    except typer.Exit as done:
        return done.exit_code
    except Exception as exc:
        return _failed(exc, fmt)
    return status if isinstance(status, int) else 0


def _failed(exc: Exception, fmt: str) -> int:
    """Report a failure that escaped the command as one line (or one JSON object)."""
    from hamimig.cli import render  # output machinery loads only when there is output

    if isinstance(exc, typer.Abort):
        render.text("aborted", err=True)
        return 1
    if isinstance(exc, HamimigError):
        render.error(exc, fmt)
        return exc.exit_code
    exit_code = getattr(exc, "exit_code", None)
    format_message = getattr(exc, "format_message", None)
    if isinstance(exit_code, int) and callable(format_message):
        if type(exc).__name__ == "NoArgsIsHelpError":  # `hamimig` alone: show the help
            render.text(str(format_message()), err=True)
            return 2
        # A parsing error from Typer's command-line parser: bad option, missing argument.
        render.error(UsageError(str(format_message())), fmt)
        return 2
    if os.environ.get("HAMIMIG_DEBUG"):
        raise exc
    render.error(
        HamimigError(
            f"internal error: {type(exc).__name__}: {exc} (a bug; rerun with HAMIMIG_DEBUG=1 "
            "for the traceback)"
        ),
        fmt,
    )
    return 1


def main() -> None:
    sys.exit(run(sys.argv[1:]))
