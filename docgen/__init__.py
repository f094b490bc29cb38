"""What `scripts/gen-docs.py` writes: the shell completion scripts Typer generates (they call
back into hamimig: `hamimig/cli/completion.py`), the man page (`manpage.py`) and
docs/reference.md (`reference.py`); a test regenerates them to catch staleness. Build-time
tooling, so it lives beside the package and is not installed with it."""

from __future__ import annotations

import typer

from docgen.manpage import man_page
from docgen.reference import reference
from hamimig.cli.completion import COMPLETE_VAR

COMPLETIONS = {"bash": "hamimig.bash", "zsh": "_hamimig", "fish": "hamimig.fish"}
"""Each shell's completion script, by the file name its completion system looks for."""


ZSH_FIRST_TAB = 'if [ "$funcstack[1]" = "_hamimig" ]; then _hamimig_completion "$@"; fi\n'
"""Completes the first TAB too when zsh autoloads the script as `_hamimig`."""


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
    # Loaded from $fpath, the file is the body of `_hamimig`, run at the first TAB: Typer's
    # script only defines its function there, so that TAB would complete nothing.
    scripts["completions/_hamimig"] += ZSH_FIRST_TAB
    return {**scripts, "man/hamimig.1": man_page(app), "docs/reference.md": reference(app)}
