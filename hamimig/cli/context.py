"""The global options every command shares, and the one way a command runs the engine."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from hamimig.errors import (
    ConflictError,
    HamimigError,
    HardwareError,
    NotFoundError,
    UnverifiableError,
    UsageError,
)

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


@dataclass(frozen=True)
class Refused:
    """A dry run's verdict when the real run would refuse: the plan it could make (None when
    the refusal came first) and the refusal, so a dry run shows both (docs/formats.md)."""

    kind: str
    plan: Result | None
    error: HamimigError

    def plan_json(self) -> dict[str, Any]:
        return self.plan.to_json() if self.plan is not None else {"kind": self.kind, "dryRun": True}


@dataclass
class Globals:
    node: Node
    output: str


GLOBAL_OPTIONS = ("state_dir", "cdi_dir", "config", "sim", "node", "output")
"""The options every command takes, before or after its name (declared on the root command)."""

SIM_DEFAULTS = {"state_dir": "state", "cdi_dir": "cdi", "config": "config.yaml"}
"""Under `--sim`, the global paths not given on the command line or in the environment: in the
simulated node's home (`<sim>.d/`)."""


def globals_of(ctx: typer.Context) -> Globals:
    """The global options as a `Node` and an output format, settled when a command first asks:
    only then has every level of its command line been read (a global option given after the
    command name is recorded on the root, as if given before it)."""
    root = ctx.find_root()
    if root.obj is None:
        root.obj = _settle(root, ctx)
    assert isinstance(root.obj, Globals)
    return root.obj


PASTED = ("sim", "state_dir", "cdi_dir", "config")
"""The global options that choose the node, as a command line to paste names them."""


def _settle(root: Any, ctx: typer.Context) -> Globals:
    """The node, built once and complete: its paths, the command, and for a command that
    changes the node its lock wait and whether it is a dry run (`execute`'s `kind`)."""
    from hamimig.cli.options import NAME_COMMANDS
    from hamimig.engine.node import Node

    command = ctx.command_path.partition(" ")[2]  # as typed after the program name
    first = command.split(" ")[0]
    output = str(getattr(root.params["output"], "value", root.params["output"]))
    try:
        for name in GLOBAL_OPTIONS:
            _refuse_empty(root, name)
        if output == "name" and first not in NAME_COMMANDS:
            given = "-o name" if _source_of(root, "output").startswith("option") else None
            raise UsageError(
                f"{given or 'HAMIMIG_OUTPUT=name'} prints MIG UUIDs, and {first} shows no "
                f"instances: use it with {', '.join(NAME_COMMANDS)}"
            )
    except UsageError as err:
        from hamimig.cli import render

        render.error(err, output)
        raise typer.Exit(err.exit_code) from None
    paths, sources = global_paths(root)
    chosen = {"sim": None if root.params["sim"] is None else Path(root.params["sim"]), **paths}
    node = Node(
        state_dir=paths["state_dir"],
        cdi_dir=paths["cdi_dir"],
        config_path=paths["config"],
        sim=chosen["sim"],
        node_name=root.params["node"],
        lock_timeout=ctx.params.get("lock_timeout", 60.0),
        read_only=ctx.params.get("dry_run", False),
        setting_sources=sources,
        pasted=" ".join(["hamimig", *given_words(root, PASTED, chosen.get)]),
        command=command,
    )
    return Globals(node=node, output=output)


def global_paths(root: Any) -> tuple[dict[str, Path], dict[str, str]]:
    """The state and CDI directories and the config file the root's options name, and where
    every global option's value came from, in `config show`'s words."""
    sources = {name: _source_of(root, name) for name in GLOBAL_OPTIONS}
    paths = {name: Path(root.params[name]) for name in SIM_DEFAULTS}
    sim = root.params["sim"]
    if sim is not None:
        # A rehearsal on a GPU node must not leave records or specs that the real device
        # plugin's recovery and the runtime would read: the real node's paths only when named.
        from hamimig.sim.files import node_home

        home = node_home(Path(sim))
        for name, inside in SIM_DEFAULTS.items():
            if sources[name] == "default":
                paths[name], sources[name] = home / inside, "default (--sim)"
    return paths, sources


def _source_of(root: Any, name: str) -> str:
    """Where a global option's value came from, in `config show`'s words."""
    param = next(p for p in root.command.params if p.name == name)
    source = root.get_parameter_source(name)
    kind = "" if source is None else source.name
    if kind == "COMMANDLINE":
        return f"option {param.opts[-1] if param.opts[-1].startswith('--') else param.opts[0]}"
    if kind == "ENVIRONMENT" and isinstance(param.envvar, str):
        return f"env {param.envvar}"
    return "default"


def _refuse_empty(root: Any, name: str) -> None:
    """An empty path or node name is a mistake (an unset shell variable), never "the default".

    The option parser would treat an empty environment variable as unset and fall back to the
    default silently, so the variable itself is looked at here."""
    param = next(p for p in root.command.params if p.name == name)
    value = getattr(root.params[name], "value", root.params[name])
    flag = param.opts[0]
    if value == "":
        raise UsageError(f"{flag} must not be empty")
    if value is not None and undecodable([value]) is not None:  # from the environment
        where = f" (from {param.envvar})" if isinstance(param.envvar, str) else ""
        raise UsageError(f"{flag}{where} is not valid UTF-8")
    envvar = param.envvar
    from_command_line = _source_of(root, name).startswith("option")
    if isinstance(envvar, str) and not from_command_line and os.environ.get(envvar) == "":
        raise UsageError(f"environment variable {envvar} is set but empty (for {flag})")


def undecodable(argv: list[str]) -> UsageError | None:
    """Arguments that were not UTF-8 arrive with lone surrogates (surrogateescape); no name,
    path or UUID hamimig accepts can contain one, and they would fail later, mid-command."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")  # fails on exactly the lone surrogates; costs no import
        except UnicodeEncodeError:
            from hamimig.cli.render import printable  # output machinery only for output

            return UsageError(f"argument {position} '{printable(arg)}' is not valid UTF-8")
    return None


def given_words(
    level: Any, names: Iterable[str] = (), value_of: Callable[[str], object] | None = None
) -> list[str]:
    """The options given on `level`'s command line (those in `names`, in that order; else all
    but --node, which the lines that paste them name themselves), as shell words: a flag
    alone, a value quoted as `value_of` gives it (by default, as it was typed)."""
    params = {p.name: p for p in level.command.params if p.name not in (None, "node")}
    words: list[str] = []
    for name in names or params:
        source = level.get_parameter_source(name)
        if source is None or source.name != "COMMANDLINE":
            continue
        param = params[name]
        flag = max(param.opts, key=len)
        value = level.params.get(name) if value_of is None else value_of(name)
        if getattr(param, "is_flag", False):
            words.append(flag)
        elif value is not None:
            words += [flag, shlex.quote(str(getattr(value, "value", value)))]
    return words


DRY_RUN_VERDICTS = tuple(
    e.exit_code for e in (UsageError, ConflictError, UnverifiableError, NotFoundError)
)
"""The refusals a dry run gives as its verdict (usage, conflict, unverifiable, not found): the
real run's planning makes them. A dry run never exits 7 (it takes no lock) nor 4 for a step
(it applies none); a read of the node that failed (4) or a bug (1) is the dry run's own
failure, `kind: Error` as for any command."""


def _locked(node: Node, action: Callable[[Node], Result], kind: str) -> Result | Refused:
    """Run a mutating command: its lock wait and directories checked before any hardware.

    A dry run's node is read-only, so a step it tried would fail before changing anything; it
    still checks `--lock-timeout` and the directories, so its verdict is the real run's."""
    from hamimig.engine import validate

    try:
        validate.timeout(node.lock_timeout, "--lock-timeout")
        node.check_dirs()
        plan = action(node)
    except HamimigError as err:
        if not node.read_only or err.exit_code not in DRY_RUN_VERDICTS:
            raise
        # A refusal deferred so that planning could go on came first: the real run stops
        # there, before the one planning met later.
        return Refused(kind, None, (node.refusals or [err])[0])
    return Refused(kind, plan, node.refusals[0]) if node.refusals else plan


def execute(
    ctx: typer.Context,
    action: Callable[[Node], Result],
    kind: str | None = None,
    headers: bool = True,
) -> None:
    """Run one engine call and render its result or its failure with the contract exit code.

    `kind`: the call changes the node, and its result is a `kind` (`_locked`). A table reads
    the node's clock (a simulated node's own) only when it shows ages."""
    from hamimig.cli import render  # output machinery loads only when there is output

    g = globals_of(ctx)
    try:
        try:
            result = action(g.node) if kind is None else _locked(g.node, action, kind)
        finally:
            g.node.close()
    except (HamimigError, OSError) as exc:
        err = exc if isinstance(exc, HamimigError) else HardwareError(f"I/O error: {exc}")
        render.error(err, g.output)
        raise typer.Exit(err.exit_code) from None
    if isinstance(result, Refused):
        if result.plan is not None and g.output not in ("json", "yaml"):
            render.emit(result.plan, g.output, headers=headers, clock=g.node.now)
        render.error(result.error, g.output, within=result.plan_json())
        raise typer.Exit(result.error.exit_code)
    render.emit(result, g.output, headers=headers, clock=g.node.now)
    if result.exit_code:  # a pass that reports what it did and what still failed
        raise typer.Exit(result.exit_code)
