"""Completions and the man page are generated from the CLI and must never be stale; every
command is in the README (the man page's content: tests/test_man_page.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from docgen import generate
from docgen.manpage import commands
from hamimig.cli.app import app

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("relative", sorted(generate(app)))
def test_generated_file_is_up_to_date(relative: str) -> None:
    path = ROOT / relative
    assert path.is_file(), f"{relative} is missing: run python scripts/gen-docs.py"
    assert path.read_text(encoding="utf-8") == generate(app)[relative], (
        f"{relative} is stale: run python scripts/gen-docs.py"
    )


def test_readme_mentions_every_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path, _, _ in commands(app):
        if len(path) == 1:
            assert f"hamimig {path[0]}" in readme or f" {path[0]} " in readme, path


def _bash_complete(words: list[str], word: str = "''") -> list[str]:
    """What bash offers for `word` after `words`, through the script in completions/."""
    script = generate(app)["completions/hamimig.bash"]
    line = " ".join(words)
    program = (
        f"{script}\nCOMP_WORDS=({line} {word}); COMP_CWORD={len(words)}; "
        '_hamimig_completion hamimig; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-c", program],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": path},
    )
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes_commands_and_options() -> None:
    """Option names once the word starts with a dash, as click completes them."""
    assert {"allocate", "recover", "sim"} <= set(_bash_complete(["hamimig"]))
    assert "--state-dir" in _bash_complete(["hamimig"], "--")
    assert set(_bash_complete(["hamimig", "sim"])) >= {"init", "fault", "create"}
    assert set(_bash_complete(["hamimig", "sim", "fault"])) >= {"add", "clear"}
    assert "--op" in _bash_complete(["hamimig", "--sim", "x.json", "sim", "fault", "add"], "-")
    assert "--profile" in _bash_complete(["hamimig", "allocate", "--pod", "ns/p"], "--")
    assert "--sim" in _bash_complete(["hamimig", "allocate", "--pod", "ns/p"], "--")


@pytest.mark.parametrize(
    ("shell", "relative", "check"),
    [
        ("bash", "completions/hamimig.bash", ["bash", "-n"]),
        ("zsh", "completions/_hamimig", ["zsh", "-n"]),
        ("fish", "completions/hamimig.fish", ["fish", "--no-execute"]),
    ],
)
def test_completion_script_parses(shell: str, relative: str, check: list[str]) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    subprocess.run([*check, str(ROOT / relative)], check=True, capture_output=True)
