"""The `hamimig` Typer application: global options, command registration, error boundary."""

from __future__ import annotations

import functools
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from hamimig import __version__
from hamimig.cli import (
    complete_cmd,
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
from hamimig.cli.context import Globals
from hamimig.cli.options import NAME_COMMANDS, Output
from hamimig.defaults import DEFAULT_CDI_DIR, DEFAULT_CONFIG, DEFAULT_STATE_DIR
from hamimig.errors import HamimigError, UsageError


class _Boundary(typer.core.TyperGroup):
    """The root command with hamimig's error boundary built in, so that every caller (the
    `hamimig` script, `python -m hamimig`, a test's CliRunner) gets the same one-line errors in
    the requested format and the contract's exit codes, never click's usage block."""

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> int:
        argv = list(sys.argv[1:] if args is None else args)
        valued = {o for p in _options(self) if not p.is_flag for o in p.opts}
        answered = complete_cmd.answer(argv, valued)  # shell completion, before any parsing
        if answered is not None:
            if standalone_mode:
                sys.exit(answered)
            return answered
        status = _guarded(
            lambda: super(_Boundary, self).main(
                args=hoist_globals(self, argv),
                prog_name=prog_name or "hamimig",
                standalone_mode=False,
                **extra,
            ),
            argv,
        )
        if standalone_mode:
            sys.exit(status)
        return status


_NOT_HOISTED = ("--help", "--version")


def hoist_globals(root: Any, argv: list[str]) -> list[str]:
    """Move the global options (`--sim`, `--state-dir`, `--cdi-dir`, `--config`, `--node`,
    `-o/--output`) found after a command name to the front, in their order, as kubectl takes
    its flags anywhere: `hamimig list -o json`, `hamimig sim fault add ... -o json`. Given
    twice, the last one wins, as on the root.

    The walk follows the command tree, so a value of a command's own option (`--pod -o`) is
    never taken for a global, and nothing after `--` moves. No command has an option of the
    same name as a global one (a test checks that), so nothing is taken away from a command.
    """
    globals_: dict[str, bool] = {}  # option string -> takes a value
    for param in _options(root):
        if not set(param.opts) & set(_NOT_HOISTED):
            for opt in param.opts:
                globals_[opt] = not param.is_flag
    front: list[str] = []
    rest: list[str] = []
    command: Any = root
    i, at_root, first = 0, True, len(argv)
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i:]
            break
        name, eq, _ = arg.partition("=")
        short = arg[:2] if arg.startswith("-") and not arg.startswith("--") else None
        if name in globals_ or (short in globals_ and short != arg and globals_[short]):
            # `-o=json` as kubectl takes it: click would read the value as `=json`.
            taken = [short, arg[3:]] if short in globals_ and arg[2:3] == "=" else [arg]
            if name in globals_ and globals_[name] and not eq:
                if i + 1 == len(argv):
                    # Moved to the front it would take the command name for its value.
                    raise UsageError(f"option {arg} needs a value")
                taken.append(argv[i + 1])
                i += 1
            (front if not at_root else rest).extend(taken)
            i += 1
            continue
        if arg.startswith("-"):
            rest.append(arg)
            if _takes_value(command, name) and not eq and i + 1 < len(argv):
                rest.append(argv[i + 1])
                i += 1
            i += 1
            continue
        if at_root:
            first = len(rest)  # where the command name starts: hoisted options go before it
        rest.append(arg)
        sub = getattr(command, "commands", {}).get(arg)
        if sub is not None:
            command, at_root = sub, False
        i += 1
    return rest[:first] + front + rest[first:]


def _options(command: Any) -> list[Any]:
    """A command's options (not its arguments), as the command-line parser knows them."""
    return [p for p in getattr(command, "params", ()) if p.param_type_name == "option"]


def _takes_value(command: Any, opt: str) -> bool:
    for param in _options(command):
        if opt in param.opts or opt in param.secondary_opts:
            return not param.is_flag and not param.count
    return False


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


def _version(value: bool) -> None:
    from hamimig.cli import render

    if value:
        render.text(f"hamimig {__version__}")
        raise typer.Exit(0)


_PATH = "PATH"


@app.callback()
def root(
    ctx: typer.Context,
    state_dir: Annotated[
        str,
        typer.Option(
            envvar="HAMIMIG_STATE_DIR",
            metavar=_PATH,
            help="Ownership records, intents, queues and the node lock (with --sim: "
            "<--sim>.d/state).",
        ),
    ] = str(DEFAULT_STATE_DIR),
    cdi_dir: Annotated[
        str,
        typer.Option(
            envvar="HAMIMIG_CDI_DIR",
            metavar=_PATH,
            help="Where per-instance CDI specs live (with --sim: <--sim>.d/cdi).",
        ),
    ] = str(DEFAULT_CDI_DIR),
    config: Annotated[
        str,
        typer.Option(
            envvar="HAMIMIG_CONFIG",
            metavar=_PATH,
            help="YAML config (a missing file means defaults; with --sim: <--sim>.d/config.yaml).",
        ),
    ] = str(DEFAULT_CONFIG),
    sim: Annotated[
        str | None,
        typer.Option(
            envvar="HAMIMIG_SIM",
            metavar=_PATH,
            help="Use the simulated node stored in PATH instead of NVML; its directories and "
            "config are in PATH.d/ unless named.",
        ),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(
            envvar="NODE_NAME",
            metavar="NAME",
            help="This node's Kubernetes name; filters pod lists.",
        ),
    ] = None,
    output: Annotated[
        Output,
        typer.Option(
            "--output",
            "-o",
            envvar="HAMIMIG_OUTPUT",
            metavar="FORMAT",
            help="How results are printed: " + ", ".join(o.value for o in Output) + ".",
        ),
    ] = Output.TABLE,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Administer HAMi's dynamic MIG instance lifecycle on a GPU node."""
    from hamimig.cli import render
    from hamimig.engine.node import Node

    try:
        for name, value in (
            ("state_dir", state_dir),
            ("cdi_dir", cdi_dir),
            ("config", config),
            ("sim", sim),
            ("node", node),
            ("output", output.value),
        ):
            _refuse_empty(ctx, name, value)
        if output is Output.NAME and ctx.invoked_subcommand not in NAME_COMMANDS:
            given = "-o name" if _source_of(ctx, "output").startswith("option") else None
            raise UsageError(
                f"{given or 'HAMIMIG_OUTPUT=name'} prints MIG UUIDs, and "
                f"{ctx.invoked_subcommand} shows no instances: use it with "
                f"{', '.join(NAME_COMMANDS)}"
            )
    except UsageError as err:
        render.error(err, output.value)
        raise typer.Exit(err.exit_code) from None
    sources = {
        name: _source_of(ctx, name)
        for name in ("state_dir", "cdi_dir", "config", "sim", "node", "output")
    }
    paths = {"state_dir": Path(state_dir), "cdi_dir": Path(cdi_dir), "config": Path(config)}
    if sim is not None:
        # A rehearsal on a GPU node must not leave records or specs that the real device
        # plugin's recovery and the runtime would read: the real node's paths only when named.
        from hamimig.sim.files import node_home

        home = node_home(Path(sim))
        for name, inside in SIM_DEFAULTS.items():
            if sources[name] == "default":
                paths[name], sources[name] = home / inside, "default (--sim)"
    ctx.obj = Globals(
        node=Node(
            state_dir=paths["state_dir"],
            cdi_dir=paths["cdi_dir"],
            config_path=paths["config"],
            sim=None if sim is None else Path(sim),
            node_name=node,
            setting_sources=sources,
        ),
        output=output.value,
    )


SIM_DEFAULTS = {"state_dir": "state", "cdi_dir": "cdi", "config": "config.yaml"}
"""Under `--sim`, the global paths not given on the command line or in the environment: in the
simulated node's home (`<sim>.d/`)."""


def _source_of(ctx: typer.Context, name: str) -> str:
    """Where a global option's value came from, in `config show`'s words."""
    param = next(p for p in ctx.command.params if p.name == name)
    source = ctx.get_parameter_source(name)
    kind = "" if source is None else source.name
    if kind == "COMMANDLINE":
        return f"option {param.opts[-1] if param.opts[-1].startswith('--') else param.opts[0]}"
    if kind == "ENVIRONMENT" and isinstance(param.envvar, str):
        return f"env {param.envvar}"
    return "default"


def _refuse_empty(ctx: typer.Context, name: str, value: str | None) -> None:
    """An empty path or node name is a mistake (an unset shell variable), never "the default".

    The option parser treats an empty environment variable as unset and would fall back to the
    default silently, so the variable is looked at here when the option did not come from the
    command line.
    """
    param = next(p for p in ctx.command.params if p.name == name)
    flag = param.opts[0]
    if value == "":
        raise UsageError(f"{flag} must not be empty")
    if value is not None and _undecodable([value]) is not None:  # from the environment
        where = f" (from {param.envvar})" if isinstance(param.envvar, str) else ""
        raise UsageError(f"{flag}{where} is not valid UTF-8")
    envvar = param.envvar
    source = ctx.get_parameter_source(name)
    from_command_line = source is not None and source.name == "COMMANDLINE"
    if isinstance(envvar, str) and not from_command_line and os.environ.get(envvar) == "":
        raise UsageError(f"environment variable {envvar} is set but empty (for {flag})")


inventory_cmd.register(app)
lifecycle_cmd.register(app)
recovery_cmd.register(app)
doctor_cmd.register(app)
metrics_cmd.register(app)
demo_cmd.register(app)
forget_cmd.register(app)
events_cmd.register(app)
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


def _guarded(invoke: Callable[[], Any], argv: list[str]) -> int:
    fmt = _requested_output(argv)
    bad = _undecodable(argv)
    if bad is not None:
        from hamimig.cli import render

        render.error(bad, fmt)
        return bad.exit_code
    try:
        status = invoke()
    except typer.Exit as done:
        return done.exit_code
    except Exception as exc:
        return _failed(exc, fmt)
    return status if isinstance(status, int) else 0


def _undecodable(argv: list[str]) -> UsageError | None:
    """Arguments that were not UTF-8 arrive with lone surrogates (surrogateescape); no name,
    path or UUID hamimig accepts can contain one, and they would fail later, mid-command."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")  # fails on exactly the lone surrogates; costs no import
        except UnicodeEncodeError:
            from hamimig.cli.render import printable  # output machinery only for output

            return UsageError(f"argument {position} '{printable(arg)}' is not valid UTF-8")
    return None


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
        # A parsing error from Typer's command-line parser: bad option, missing argument. A
        # value outside an option's choices comes worded by pydantic ("Value error, ...").
        message = str(format_message()).replace(": Value error, ", ": ")
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


def _reopen_closed_streams() -> None:
    """Started with stdout or stderr closed (`>&-`), Python sets it to None and every write
    would raise: point it at /dev/null so the command runs and keeps its own exit status."""
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (lives until exit)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115


def main() -> None:
    _reopen_closed_streams()
    for stream in (sys.stdout, sys.stderr):
        # Names read from disk may hold undecodable bytes: print escapes, never fail on them.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    status = run(sys.argv[1:])
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        from hamimig.cli import render

        render.discard_closed_output()
    sys.exit(status)
