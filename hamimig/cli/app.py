"""The `hamimig` Typer application: global options, command registration, error boundary."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import os
import re
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from hamimig import __version__
from hamimig.cli import (
    completion,
    config_cmd,
    demo_cmd,
    doctor_cmd,
    events_cmd,
    forget_cmd,
    inventory_cmd,
    lifecycle_cmd,
    metrics_cmd,
    recovery_cmd,
    sim_cmd,
)
from hamimig.cli.context import GLOBAL_OPTIONS, undecodable
from hamimig.cli.options import ArgumentsCommand, Output, choices
from hamimig.defaults import DEFAULT_CDI_DIR, DEFAULT_CONFIG, DEFAULT_STATE_DIR
from hamimig.errors import HamimigError, UsageError


class _Boundary(typer.core.TyperGroup):
    """The root command with the error boundary built in, so every caller (script, `-m`,
    CliRunner) gets the same one-line errors and exit codes, never click's usage block.

    Each command gets a copy of the global options that records a command-line value on the
    root; only command-line values, so an environment variable never overrides a flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        shared = []
        for param in self.params:
            if param.name in GLOBAL_OPTIONS:
                given_later = copy.copy(param)
                given_later.expose_value, given_later.callback = False, _on_root
                shared.append(given_later)
        _share(self, shared)

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> int:
        argv = list(sys.argv[1:] if args is None else args)
        fmt = _requested_output(argv)
        completing = completion.COMPLETE_VAR in os.environ
        try:
            with completion.answering() if completing else contextlib.nullcontext():
                bad = undecodable(argv)
                if bad is not None:
                    raise bad
                status = super().main(
                    args=_short_output_equals(argv),
                    prog_name=prog_name or "hamimig",
                    standalone_mode=False,
                    **extra,
                )
        except typer.Exit as done:
            status = done.exit_code
        except Exception as exc:
            status = _failed(exc, fmt)
        status = status if isinstance(status, int) else 0
        if standalone_mode:
            sys.exit(status)
        return status


def _share(group: Any, shared: list[Any]) -> None:
    for sub in group.commands.values():
        sub.params.extend(shared)
        if isinstance(sub, typer.core.TyperGroup):
            _share(sub, shared)


def _on_root(ctx: Any, param: Any, value: Any) -> Any:
    """A global option given after a command name: recorded on the root command's context."""
    source = ctx.get_parameter_source(param.name)
    if source is not None and source.name == "COMMANDLINE":
        root = ctx.find_root()
        root.params[param.name] = value
        root.set_parameter_source(param.name, source)
    return value


def _short_output_equals(argv: list[str]) -> list[str]:
    """`-o=json` as kubectl takes it, where click would read the value as `=json`; a word after
    `--` is an argument and stays as it is."""
    end = argv.index("--") if "--" in argv else len(argv)
    return [
        "-o" + arg[3:] if i < end and arg.startswith("-o=") else arg for i, arg in enumerate(argv)
    ]


app = typer.Typer(
    name="hamimig",
    cls=_Boundary,
    help="Administer HAMi's dynamic MIG instance lifecycle on a GPU node.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:  # not while completing a command line
        from hamimig.cli import render

        render.text(f"hamimig {__version__}")
        raise typer.Exit(0)


def _global(envvar: str, help: str, metavar: str = "PATH") -> Any:
    """A global option: from the command line (before or after the command) or `envvar`."""
    return typer.Option(envvar=envvar, metavar=metavar, help=help)


@app.callback()
def root(
    state_dir: Annotated[
        str,
        _global(
            "HAMIMIG_STATE_DIR",
            "Ownership records, intents, queues and the node lock (with --sim: <--sim>.d/state).",
        ),
    ] = str(DEFAULT_STATE_DIR),
    cdi_dir: Annotated[
        str,
        _global(
            "HAMIMIG_CDI_DIR", "Where per-instance CDI specs live (with --sim: <--sim>.d/cdi)."
        ),
    ] = str(DEFAULT_CDI_DIR),
    config: Annotated[
        str,
        _global(
            "HAMIMIG_CONFIG",
            "YAML config (a missing file means defaults; with --sim: <--sim>.d/config.yaml).",
        ),
    ] = str(DEFAULT_CONFIG),
    sim: Annotated[
        str | None,
        _global(
            "HAMIMIG_SIM",
            "Use the simulated node stored in PATH instead of NVML; its directories and config "
            "are in PATH.d/ unless named.",
        ),
    ] = None,
    node: Annotated[
        str | None,
        _global("NODE_NAME", "This node's Kubernetes name; filters pod lists.", metavar="NAME"),
    ] = None,
    output: Annotated[
        Output,
        typer.Option(
            "--output",
            "-o",
            envvar="HAMIMIG_OUTPUT",
            metavar="FORMAT",
            help=f"How results are printed: {choices(Output)}.",
        ),
    ] = Output.TABLE,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Administer HAMi's dynamic MIG instance lifecycle on a GPU node.

    The global options are settled when a command asks for them (`context.globals_of`): only
    then has click read those given after the command name too."""


COMMANDS: dict[str, Callable[..., None]] = {
    "list": inventory_cmd.list_,
    "profiles": inventory_cmd.profiles,
    "show": lifecycle_cmd.show,
    "allocate": lifecycle_cmd.allocate,
    "release": lifecycle_cmd.release,
    "reclaim": lifecycle_cmd.reclaim,
    "reconcile": lifecycle_cmd.reconcile,
    "recover": recovery_cmd.recover,
    "adopt": recovery_cmd.adopt,
    "doctor": doctor_cmd.doctor,
    "metrics": metrics_cmd.metrics,
    "demo": demo_cmd.demo,
    "forget": forget_cmd.forget,
    "events": events_cmd.events,
}
"""The commands, in the order help lists them (`show` and `forget` take a positional MIG_UUID)."""
for name, function in COMMANDS.items():
    app.command(name, cls=ArgumentsCommand if name in ("show", "forget") else None)(function)
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
            fmt = arg[2:].removeprefix("=")
    return fmt if fmt in {o.value for o in Output} else Output.TABLE.value


@functools.cache
def command() -> typer.core.TyperGroup:
    """The click command behind `app`, built once per process: building it inspects every
    command function's signature (tens of milliseconds), and it holds no per-run state."""
    built = typer.main.get_command(app)
    assert isinstance(built, typer.core.TyperGroup)
    return built


def run(argv: list[str]) -> int:
    """Run the CLI on `argv`; returns the exit status. Never lets a traceback reach the user."""
    status = command().main(args=argv, prog_name="hamimig", standalone_mode=False)
    assert isinstance(status, int)
    return status


def _failed(exc: Exception, fmt: str) -> int:
    """Report a failure that escaped the command as one line (or one JSON object)."""
    from hamimig.cli import render  # output machinery loads only when there is output

    if isinstance(exc, typer.Abort):
        render.text("aborted", err=True)
        return 1
    if isinstance(exc, HamimigError):
        render.error(exc, fmt)
        return exc.exit_code
    if isinstance(exc, typer.TyperException):
        if type(exc).__name__ == "NoArgsIsHelpError":  # `hamimig` alone: show the help
            render.text(exc.format_message(), err=True)
            return 2
        # A parsing error from Typer's command-line parser: bad option, missing argument. A
        # value outside an option's choices comes worded by pydantic ("Value error, ...").
        message = exc.format_message().replace(": Value error, ", ": ")
        needs = re.fullmatch(r"Option '(.+)' requires an argument\.", message)
        message = f"option {needs.group(1)} needs a value" if needs else message
        render.error(UsageError(message), fmt)
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
    for name in ("stdout", "stderr"):
        # Started with it closed (`>&-`), Python sets it to None and every write would raise:
        # pointed at /dev/null, the command runs and keeps its own exit status.
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
        # Names read from disk may hold undecodable bytes: print escapes, never fail on them.
        stream = getattr(sys, name)
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    status = run(sys.argv[1:])
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        from hamimig.cli import render

        render.discard_closed_output()
    sys.exit(status)
