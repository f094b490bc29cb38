"""What `scripts/gen-docs.py` writes: the shell completion scripts Typer generates (they call
back into hamimig: `cli/completion.py`) and the man page (`cli/manpage.py`); a test regenerates
them to catch staleness."""

from __future__ import annotations

import typer

from hamimig.cli.completion import COMPLETE_VAR
from hamimig.cli.manpage import man_page

COMPLETIONS = {"bash": "hamimig.bash", "zsh": "_hamimig", "fish": "hamimig.fish"}
"""Each shell's completion script, by the file name its completion system looks for."""


def generate(app: typer.Typer) -> dict[str, str]:
    """Relative path -> content, for everything `scripts/gen-docs.py` writes."""
    from typer._completion_shared import get_completion_script

    scripts = {
        f"completions/{name}": get_completion_script(
            prog_name="hamimig", complete_var=COMPLETE_VAR, shell=shell
        )
        + "\n"
        for shell, name in COMPLETIONS.items()
    }
    return {**scripts, "man/hamimig.1": man_page(app)}
