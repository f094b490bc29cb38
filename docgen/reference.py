"""docs/reference.md: the prose of `reference.md.in` with every command's `--help` where the
line `@COMMANDS@` stands, so the reference says what the CLI says and a test catches it stale."""

from __future__ import annotations

from pathlib import Path

import typer

from docgen.manpage import commands

TEMPLATE = Path(__file__).with_name("reference.md.in")
WIDTH = 80
"""The help is wrapped as an 80-column terminal shows it, whatever terminal generates it."""


def reference(app: typer.Typer) -> str:
    sections: list[str] = []
    for path, cmd, ctx in commands(app):
        ctx.terminal_width = ctx.max_content_width = WIDTH
        title = " ".join(("hamimig", *path))
        sections.append(f"## {title}\n\n```text\n{cmd.get_help(ctx).rstrip()}\n```\n")
    template = TEMPLATE.read_text(encoding="utf-8")
    return template.replace("@COMMANDS@\n", "\n".join(sections))
