"""Completions, the man page and docs/reference.md are generated from the CLI and must never be
stale; every command is on the README's front page, the README links every document, and every
command line the documents show parses (the man page's content: tests/test_man_page.py)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

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
            assert f"| `{path[0]}" in readme, path


DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_links_every_document() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+)", readme))
    for path in DOCUMENTS[1:]:
        assert path.relative_to(ROOT).as_posix() in linked, path.name
    assert all((ROOT / target).is_file() for target in linked), linked


_BREAK = {"|", "||", "&&", ";", ">", ">>", "<", "&", "(", ")"}


def _command_lines(line: str) -> list[list[str]]:
    """The arguments of each `hamimig` command on a shell line (after environment assignments,
    up to a pipe, a redirection or the next command); `<placeholder>` words stand as `X`."""
    lexer = shlex.shlex(re.sub(r"<[^<>\s]+>", "X", line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found, words = [], []
    for word in [*lexer, ";"]:
        if word not in _BREAK:
            words.append(word)
            continue
        while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
            words.pop(0)
        if words[:1] == ["hamimig"]:
            found.append(words[1:])
        words = []
    return found


def _examples(text: str) -> list[list[str]]:
    """Every command line a document shows: in shell blocks, `$ ` lines of output blocks and
    inline code that is a whole command (no `[optional]`, `A|B` or `…` syntax)."""
    found: list[list[str]] = []
    fence, pending = None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
        elif fence is None:
            for span in re.findall(r"`(hamimig [^`]+)`", line):
                if not re.search(r"[\[\]|{}…]", span):
                    found += _command_lines(span)
        elif fence in ("sh", "bash") or line.startswith("$ "):
            pending += line.removeprefix("$ ").removesuffix("\\") + " "
            if not line.endswith("\\"):
                found += _command_lines(pending.split(" #")[0])
                pending = ""
    return found


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_every_command_line_the_documents_show_parses(path: Path) -> None:
    """Each example names a command and options that exist, with the values they take: click
    parses the whole line, then `--help` stops it before anything runs."""
    runner = CliRunner()
    for args in _examples(path.read_text(encoding="utf-8")):
        if "--" in args:  # --help after it would be an argument
            continue
        done = runner.invoke(app, [*args, "--help"])
        assert done.exit_code == 0, f"{path.name}: hamimig {shlex.join(args)}: {done.output}"


def test_the_documents_show_command_lines_and_the_reader_sees_a_bad_option() -> None:
    assert sum(len(_examples(p.read_text(encoding="utf-8"))) for p in DOCUMENTS) >= 50
    text = "```sh\nCOLUMNS=80 hamimig list --bogus | head\n```\n"
    assert _examples(text) == [["list", "--bogus"]]
    assert CliRunner().invoke(app, ["list", "--bogus", "--help"]).exit_code == 2


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
