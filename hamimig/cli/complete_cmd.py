"""`__complete` (hidden): the values the generated shell completions ask the node for.

`hamimig [--state-dir PATH] [--sim PATH] __complete mig-uuids|profiles` prints one value a line
from the ownership records only (`reports/completion.py`). It is answered before the command line is
parsed, so it costs little more than `hamimig --help`: no Typer parameter conversion (pydantic),
no `Node`, no config, PyYAML, rich or pynvml, no lock, no write. It is in no help and in no
man page, and it never fails: an unknown kind or an unreadable state directory prints nothing,
and it always exits 0. The values every node knows (board profile names, states, formats) are
written into the completion scripts themselves (`docs.py`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection
from pathlib import Path

from hamimig.defaults import DEFAULT_STATE_DIR
from hamimig.sim.models import MODELS

COMMAND = "__complete"
STATE_DIR = "--state-dir"
STATE_DIR_ENV = "HAMIMIG_STATE_DIR"
SIM = "--sim"
SIM_ENV = "HAMIMIG_SIM"


def board_profiles() -> tuple[str, ...]:
    """Every GI profile name of the boards hamimig knows (the simulator's tables), sorted: what
    `--profile` completes to before any record names one."""
    return tuple(sorted({p.name for model in MODELS.values() for p in model.profiles}))


def answer(argv: list[str], valued: Collection[str]) -> int | None:
    """Print what `argv` asks for and return 0 when its command is `__complete`; None for any
    other command line. `valued` names the global options that take a value (skipped with it
    when looking for the command); `--state-dir` and `--sim` may come before or after
    `__complete`, and without `--state-dir` `HAMIMIG_STATE_DIR`, else the simulated node's
    state directory, else the default directory is read, as for every command."""
    state_dir = os.environ.get(STATE_DIR_ENV) or None
    sim = os.environ.get(SIM_ENV) or None
    words: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--" and not words:
            return None  # after `--` a word is an argument, never the hidden command
        if arg == "--":
            words += argv[i + 1 :]
            break
        name, eq, value = arg.partition("=")
        if not words and arg.startswith("-") and name not in (STATE_DIR, SIM, *valued):
            return None  # `--version`, `-h` and the like come first: the line is theirs
        if name in (STATE_DIR, SIM):
            if not eq:
                value = argv[i + 1] if i + 1 < len(argv) else ""
                i += 1
            if name == SIM:
                sim = value
            else:
                state_dir = value
        elif name in valued and not eq:
            i += 1  # its value, which may look like anything
        elif not arg.startswith("-"):
            words.append(arg)
        i += 1
    if not words or words[0] != COMMAND:
        return None
    if state_dir is None and sim:
        from hamimig.sim.files import node_home

        state_dir = str(node_home(Path(sim)) / "state")
    if state_dir is None:
        state_dir = str(DEFAULT_STATE_DIR)
    if len(words) > 1 and state_dir:
        from hamimig.cli import render
        from hamimig.reports.completion import record_values

        values = record_values(Path(state_dir), words[1])
        if values:
            with contextlib.suppress(OSError):  # a closed pipe: the shell stopped listening
                render.text("\n".join(values))
    return 0
