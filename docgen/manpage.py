"""The man page: the hand-written sections of `hamimig.1.in` around a reference of every command
and option read from the click command tree that Typer builds.

PyPI's click-man cannot read that tree (Typer 0.29 vendors its own click, so click-man's
`isinstance` checks fail), hence this walk. Each option and argument is described by the line
`--help` prints for it (`get_help_record`: names, value, help, env var, default, required), so
the page and the help cannot disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from hamimig import __version__

TEMPLATE = Path(__file__).with_name("hamimig.1.in")
"""Roff in plain text: the generator escapes hyphens and backslashes, so it reads as typed;
a line `@GLOBAL_OPTIONS@`, `@COMMANDS@` or `@ENVIRONMENT@` is replaced by what the tree says."""

_NAME = re.compile(r"(?:\\-)+\w(?:\w|\\-)*")
"""An option name once escaped (`\\-\\-dry\\-run`): set in bold."""


def roff(text: str) -> str:
    """Text as roff prints it: `-` is a minus (an option copied from the page works), a
    backslash is printed, and a leading `.` or `'` is not read as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def commands(app: typer.Typer) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """The root and every command a person may run (a hidden one is for scripts), depth first
    by name: its path, the click command and a context to ask it for its parameters."""
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="hamimig", **root.context_settings)
    yield from _walk(root, ctx, ())


def _walk(cmd: Any, ctx: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    yield path, cmd, ctx
    for name, sub in _subcommands(cmd):
        sub_ctx = sub.context_class(sub, info_name=name, parent=ctx, **sub.context_settings)
        yield from _walk(sub, sub_ctx, (*path, name))


def _subcommands(cmd: Any) -> list[tuple[str, Any]]:
    return sorted(
        (name, sub) for name, sub in getattr(cmd, "commands", {}).items() if not sub.hidden
    )


def _help(param: Any, text: str) -> str:
    """The help with the values a fixed-list option takes, where the help does not name them
    all, before the `[env var; default]` note."""
    described = getattr(param, "type_descriptor", None)
    choices = [str(getattr(c, "value", c)) for c in getattr(described, "choices", None) or ()]
    if choices and not all(choice in text for choice in choices):
        head, bracket, tail = text.partition("  [")
        text = f"{head} One of: {', '.join(choices)}.{bracket}{tail}"
    return roff(" ".join(text.split()))


def _parameters(cmd: Any, ctx: Any, skip: set[str | None]) -> list[str]:
    """Arguments then options, each a `.TP` paragraph: names in bold, the value in italics."""
    params = [p for p in cmd.get_params(ctx) if p.name not in skip]
    out = []
    for param in sorted(params, key=lambda p: p.param_type_name != "argument"):
        record = param.get_help_record(ctx)  # None: hidden, or an argument without help
        if record is None:
            continue
        names, text = record
        if param.param_type_name == "argument":
            term = f"\\fI{roff(param.metavar or names)}\\fR"
        else:
            flag = param.is_flag or param.count
            names, value = (names, "") if flag else names.rsplit(" ", 1)
            term = _NAME.sub(r"\\fB\g<0>\\fR", roff(names))
            if value:
                term += f" \\fI{roff(value)}\\fR"
        out += [".TP", term, _help(param, text)]
    return out


def _command(path: tuple[str, ...], cmd: Any, ctx: Any, skip: set[str | None]) -> list[str]:
    """A subsection: the usage, the help's paragraphs, the subcommands, the parameters."""
    usage = [piece for piece in cmd.collect_usage_pieces(ctx) if piece != "[OPTIONS]"]
    title = roff(" ".join(("hamimig", *path))) + "".join(f" \\fI{roff(u)}\\fR" for u in usage)
    paragraphs = [roff(" ".join(p.split())) for p in (cmd.help or "").split("\n\n") if p.strip()]
    if _subcommands(cmd):
        paragraphs.append(roff(f"Commands: {', '.join(name for name, _ in _subcommands(cmd))}."))
    return [f'.SS "{title}"', "\n.PP\n".join(paragraphs), *_parameters(cmd, ctx, skip)]


def _environment(root: Any) -> list[str]:
    """The variables the global options read, with their defaults."""
    out = []
    for param in root.params:
        if isinstance(param.envvar, str):
            default = getattr(param.default, "value", param.default)
            text = f"Same as {max(param.opts, key=len)}."
            if default:
                text += f" Default: {default}."
            out += [".TP", f".B {roff(param.envvar)}", roff(text)]
    return out


def _line(line: str) -> str:
    """A template line escaped: all of a text line, a request's arguments (not comments)."""
    if not line.startswith("."):
        return roff(line)
    request, space, arguments = line.partition(" ")
    return line if request == '.\\"' else request + space + roff(arguments)


def man_page(app: typer.Typer) -> str:
    """The page `scripts/gen-docs.py` writes to man/hamimig.1."""
    (_, root, ctx), *rest = commands(app)
    globals_ = {param.name for param in root.params}  # documented once, not per command
    generated = {
        "@GLOBAL_OPTIONS@": _parameters(root, ctx, set()),
        "@COMMANDS@": [line for c in rest for line in _command(*c, skip=globals_)],
        "@ENVIRONMENT@": _environment(root),
    }
    template = TEMPLATE.read_text(encoding="utf-8").replace("@VERSION@", __version__)
    return "".join(
        f"{line}\n" for raw in template.splitlines() for line in generated.get(raw, [_line(raw)])
    )
