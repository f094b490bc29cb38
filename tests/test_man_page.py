"""The man page documents every command, argument and option as the CLI defines them, every
environment variable hamimig reads, and examples that are real command lines; groff renders it
without a warning (its staleness is tests/test_docs.py's)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docgen.manpage import commands, man_page
from hamimig.cli.app import app
from hamimig.config import KEYS

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = (
    *("NAME", "SYNOPSIS", "DESCRIPTION", "GLOBAL OPTIONS", "COMMANDS", "EXIT STATUS", "FILES"),
    *("ENVIRONMENT", "EXAMPLES", "SEE ALSO"),
)


def _man() -> str:
    return man_page(app).replace("\\-", "-").replace("\\e", "\\")


def _section(name: str) -> str:
    return _man().split(f".SH {name}\n", 1)[1].split("\n.SH ", 1)[0]


def _words(text: str | None) -> str:
    return " ".join((text or "").split())


def test_man_page_has_its_sections_in_order() -> None:
    headings = re.findall(r"^\.SH (.+)$", _man(), re.MULTILINE)
    assert tuple(headings) == SECTIONS


def test_man_page_documents_every_command_argument_and_option_with_its_help() -> None:
    """Each in its own command's subsection (global options once, in theirs): names, value and
    the help's first sentence, as the command defines them."""
    (_, root, root_ctx), *rest = commands(app)
    globals_ = {p.name for p in root.params}
    subsections = {}
    for block in _section("COMMANDS").split(".SS ")[1:]:
        title, body = block.split("\n", 1)
        path = tuple(re.sub(r"\\f.", "", title).strip('"').split()[1:])
        subsections[tuple(w for w in path if w.islower())] = _words(body)
    assert list(subsections) == [path for path, _, _ in rest]
    for path, cmd, ctx in [((), root, root_ctx), *rest]:
        text = _words(_section("GLOBAL OPTIONS")) if not path else subsections[path]
        assert _words(cmd.help).split(". ")[0] in text or not path, path
        for param in cmd.get_params(ctx):
            if param.hidden or (path and param.name in globals_):
                continue
            names = param.opts + param.secondary_opts if param.opts[0].startswith("-") else []
            for name in names or [param.metavar]:
                assert re.search(rf"\\fB{re.escape(name)}\\fR|\\fI{name}\\fR", text), (path, name)
            assert _words(param.help).split(": ")[0].split(". ")[0] in text, (path, param.name)


def test_man_page_lists_every_exit_status() -> None:
    statuses = re.findall(r"^\.B (\d+)$", _section("EXIT STATUS"), re.MULTILINE)
    assert statuses == [str(code) for code in range(8)]


def test_man_page_names_every_hamimig_variable_the_code_reads() -> None:
    read = set()
    for path in (ROOT / "hamimig").rglob("*.py"):
        read |= set(
            re.findall(r"(?<![A-Z])_?HAMIMIG_[A-Z_]+[A-Z]", path.read_text(encoding="utf-8"))
        )
    assert {"HAMIMIG_DEBUG", "HAMIMIG_CDI_KIND", "HAMIMIG_ADOPT_EXISTING_MIG_INSTANCES"} <= read
    environment = _section("ENVIRONMENT")
    for name in sorted(read):
        assert f".B {name}\n" in environment, name
    for name in ("NODE_NAME", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "COLUMNS", "NO_COLOR"):
        assert f".B {name}\n" in environment, name


def _entry(variable: str) -> str:
    return _words(_section("ENVIRONMENT").split(f".B {variable}\n", 1)[1].split("\n.", 1)[0])


def test_every_config_override_says_which_setting_and_what_its_value_means() -> None:
    """The setting the code maps it to, and not its own name again ("events.maxBytes:
    events.maxBytes"); the config's page in docs/formats.md names every key and variable too."""
    formats = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    block = formats.split("\n## Config\n", 1)[1].split("\n## ", 1)[0]
    yaml_blocks = block.split("```yaml")[1:]
    for var, key in ((k.env, k.path) for _, k in KEYS if k.env):
        entry = _entry(var)
        assert entry.startswith(f"Overrides the config file's {key}: "), entry
        assert not entry.endswith(f"{key}: {key}."), entry
        assert f"`{var}`" in block, var
        leaf = key.rsplit(".", 1)[1]
        assert any(f"  {leaf}:" in part.split("```")[0] for part in yaml_blocks), key


def test_man_page_gives_the_global_options_variables_and_defaults() -> None:
    globals_ = _words(_section("GLOBAL OPTIONS"))
    for default in ("/var/run/hami/dynamic-mig-state", "/var/run/cdi", "/etc/hamimig/config.yaml"):
        assert f"default: {default}]" in globals_, default
    assert "default: table]" in globals_
    (_, root, _), *_ = commands(app)
    for param in root.params:
        if isinstance(param.envvar, str):
            assert _entry(param.envvar).startswith(f"Same as {max(param.opts, key=len)}.")
    assert _entry("HAMIMIG_STATE_DIR").endswith("Default: /var/run/hami/dynamic-mig-state.")
    assert _entry("HAMIMIG_OUTPUT").endswith("Default: table.")


def test_every_example_is_a_command_line_hamimig_accepts() -> None:
    """Each parses (`--help` after it: known commands and options, nothing run), and together
    they show the everyday commands."""
    blocks = re.findall(r"^\.nf\n(.*?)^\.fi$", _section("EXAMPLES"), re.MULTILINE | re.DOTALL)
    lines = [line for block in blocks for line in block.splitlines()]
    assert len(lines) >= 10
    named = set()
    for line in lines:
        words = shlex.split(line.split(" | ")[0])
        words = words[words.index("hamimig") + 1 :]
        ran = CliRunner().invoke(app, [*words, "--help"])
        assert ran.exit_code == 0, (line, ran.stderr)
        named.add(ran.stdout.split()[2])  # Usage: hamimig COMMAND ...
    assert {"list", "show", "recover", "reclaim", "reconcile", "sim", "allocate"} <= named


def test_man_page_renders() -> None:
    """Without a warning, and no roff escape is printed as text."""
    if shutil.which("groff") is None:
        pytest.skip("groff is not installed")
    done = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-P", "-cbou", str(ROOT / "man" / "hamimig.1")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "EXIT STATUS" in done.stdout
    assert done.stderr == ""
    assert "\\" not in done.stdout
    assert "hamimig forget [MIG_UUID]" in done.stdout
