"""Completion of values through click's own machinery (the fixed lists from the command tree,
the records' MIG UUIDs, CDI device names, profiles and GPUs, a simulated node's GPUs, through
callbacks that read no more than that), with the scripts Typer generates, and help that reads
well at 80 columns (the man page: tests/test_man_page.py)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from docgen import ZSH_FIRST_TAB
from hamimig.cli.app import app, command
from hamimig.hw.types import Placement
from hamimig.reports.completion import board_profiles
from hamimig.sim.models import MODELS
from hamimig.store.cdi import device_name
from hamimig.store.files import STATE_DIR_MODE, ensure_dir
from hamimig.store.records import Record, RecordStore
from tests.support.cli import COMPLETION_ENV, tab

ROOT = Path(__file__).resolve().parent.parent
BIN = str(Path(sys.executable).parent)  # where the `hamimig` script of this environment is
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")
GPU = "GPU-c1059a53-288d-43fb-9dd6-988998bf929d"

METAVARS = {
    # paths, files and times
    *("PATH", "FILE|-", "SECONDS", "DURATION", "TIME", "DURATION|TIME"),
    # what hamimig names
    *("NS/NAME", "GPU", "PLACEMENT", "PROFILE", "MIG_UUID", "NAME", "UID", "ID", "N", "VERSION"),
    # fixed lists
    *("FORMAT", "STATE", "MODEL", "OP", "ACTION", "ERROR", "KIND"),
}
"""The agreed metavariables: every option value and argument in the help is one of them."""


def _records(state_dir: Path, count: int, profiles: tuple[str, ...] = PROFILES) -> list[str]:
    ensure_dir(state_dir, STATE_DIR_MODE)
    store = RecordStore(state_dir)
    uuids = []
    for i in range(count):
        mig = f"MIG-{uuid.UUID(int=i + 1)}"
        store.write(
            Record(
                mig_uuid=mig,
                gpu_uuid=GPU,
                profile=profiles[i % len(profiles)],
                placement=Placement(i % 7, 1),
                gpu_instance_id=i,
                compute_instance_id=0,
                gpu_index=3 if i == 0 else None,
            )
        )
        uuids.append(mig)
    return sorted(uuids)


def _tab(
    line: str, shell: str = "bash", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A TAB at the end of `line`, answered by a fresh `hamimig` process as the shell's script
    runs it."""
    return subprocess.run(
        [f"{BIN}/hamimig"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "_HAMIMIG_COMPLETE": f"complete_{shell}",
            **COMPLETION_ENV[shell](line),
            **(env or {}),
        },
        check=False,
    )


# --- value completion -------------------------------------------------------------------------


def test_a_tab_lists_the_records_mig_uuids_profiles_and_gpus_quickly(tmp_path: Path) -> None:
    state = tmp_path / "state"
    uuids = _records(state, 50)
    ran = _tab(f"hamimig --state-dir {state} show ")
    assert (ran.returncode, ran.stderr) == (0, "")
    assert ran.stdout.splitlines() == uuids
    env = {"HAMIMIG_STATE_DIR": str(state)}
    assert set(tab("hamimig list --profile ", env=env)) == {*board_profiles(), *PROFILES}
    # after the command, as every global option may be
    assert tab(f"hamimig show --state-dir={state} ") == uuids
    assert tab(f"hamimig forget --state-dir {state} MIG-") == uuids
    assert tab(f"hamimig release --state-dir {state} --mig-uuid ") == uuids
    cdi = sorted(device_name(u) for u in uuids)
    assert tab(f"hamimig --state-dir {state} show mig-") == cdi
    assert tab(f"hamimig --state-dir {state} reclaim --mig-uuid m") == cdi
    assert tab(f"hamimig --state-dir {state} list --gpu ") == ["3", GPU]
    # The budget: a TAB (a fresh process, as the scripts run it) costs at most 1.5 times
    # `hamimig --help`; the best of several runs, as the machine's load comes and goes.
    tab_best = min(_timed(f"hamimig --state-dir {state} show ") for _ in range(5))
    help_best = min(_timed("hamimig", ["--help"]) for _ in range(5))
    assert tab_best <= 1.5 * help_best, f"a TAB took {tab_best:.3f} s, --help {help_best:.3f} s"


def test_a_tab_reads_a_simulated_nodes_state_dir_and_gpus(tmp_path: Path) -> None:
    """Under `--sim` the records are in the node's home unless a state directory is named, and
    the node's file names its GPUs."""
    sim = tmp_path / "node.json"
    subprocess.run(
        [
            f"{BIN}/hamimig",
            "--sim",
            str(sim),
            "sim",
            "init",
            "--model",
            "A100-SXM4-40GB",
            "--count",
            "2",
        ],
        check=True,
        capture_output=True,
    )
    uuids = _records(tmp_path / "node.json.d" / "state", 2)
    assert tab(f"hamimig --sim {sim} show ") == uuids
    assert tab("hamimig show ", env={"HAMIMIG_SIM": str(sim)}) == uuids
    assert tab(f"hamimig --state-dir {tmp_path / 'absent'} --sim {sim} show ") == []
    gpus = tab(f"hamimig sim reset --sim {sim} --gpu ")
    assert gpus[:3] == ["0", "1", "3"] and GPU in gpus and len(gpus) == 6, gpus


def _timed(line: str, args: list[str] | None = None) -> float:
    """Wall time of a TAB at the end of `line`, or with `args` of `hamimig ARGS`."""
    started = time.perf_counter()
    if args is None:
        _tab(line)
    else:
        subprocess.run([f"{BIN}/hamimig", *args], capture_output=True, check=True)
    return time.perf_counter() - started


def test_a_tab_imports_neither_the_engine_nor_pynvml_yaml_rich_or_pydantic(tmp_path: Path) -> None:
    _records(tmp_path / "state", 3)
    script = (
        "import os, sys\n"
        "from hamimig.cli.app import run\n"
        "os.environ.update(_HAMIMIG_COMPLETE='complete_bash', COMP_CWORD='4',\n"
        f"                  COMP_WORDS='hamimig --state-dir {tmp_path / 'state'} show ')\n"
        "try:\n"
        "    run([])\n"
        "except SystemExit as done:\n"
        "    status = done.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pynvml', 'yaml', 'rich')\n"
        "               or m in ('hamimig.engine.node', 'hamimig.config', 'pydantic'))\n"
        "print(status, heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "0 []"
    assert len(lines) == 4  # the three MIG UUIDs, then the verdict


@pytest.mark.parametrize(
    "line",
    [
        "hamimig show ",  # the default state directory, absent here
        "hamimig show MIG- extra --unknown ",
        "hamimig forget --intent ",
        "hamimig --state-dir '' show ",
        "hamimig --sim '' show ",
        "hamimig -o xml show ",
        "hamimig --version show ",
        "hamimig list --gpu ",
    ],
)
def test_a_tab_never_fails_loudly(tmp_path: Path, line: str) -> None:
    ran = _tab(line, env={"HAMIMIG_STATE_DIR": str(tmp_path / "absent")})
    assert (ran.returncode, ran.stdout.strip(), ran.stderr) == (0, "", "")


def test_a_tab_on_a_state_dir_that_is_not_one_offers_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "link").symlink_to(tmp_path)
    for state in (tmp_path / "file", tmp_path / "link", tmp_path / "file" / "below"):
        assert tab(f"hamimig --state-dir {state} show ") == []


def test_a_tab_offers_nothing_a_shell_would_expand(tmp_path: Path) -> None:
    state = tmp_path / "state"
    odd = ("$(touch pwned)", "a b", "`id`", "*")
    _records(state, 5, profiles=("9g.99gb", *odd))
    for shell in ("bash", "zsh", "fish"):
        offered = tab(f"hamimig --state-dir {state} list --profile ", shell)
        assert "9g.99gb" in offered and not set(odd) & set(offered), shell
    assert not (tmp_path / "pwned").exists()


def test_completion_is_no_command_and_no_option() -> None:
    """No hidden command answers completion, and Typer's --install-completion and
    --show-completion are in no help: the scripts are in completions/."""
    ran = CliRunner().invoke(app, ["__complete", "mig-uuids"])
    assert ran.exit_code == 2 and "No such command" in ran.stderr
    for path, _ in _commands(command()):
        assert "completion" not in CliRunner().invoke(app, [*path, "--help"]).stdout, path


# --- the completion scripts -------------------------------------------------------------------


def test_the_scripts_are_the_ones_typer_generates() -> None:
    from typer._completion_shared import get_completion_script

    for shell, name in (("bash", "hamimig.bash"), ("zsh", "_hamimig"), ("fish", "hamimig.fish")):
        script = (ROOT / "completions" / name).read_text(encoding="utf-8")
        made = get_completion_script(
            prog_name="hamimig", complete_var="_HAMIMIG_COMPLETE", shell=shell
        )
        extra = ZSH_FIRST_TAB if shell == "zsh" else ""  # an autoloaded file's first TAB
        assert script == made + "\n" + extra, shell


def _bash(words: list[str], env: dict[str, str] | None = None) -> list[str]:
    script = (ROOT / "completions" / "hamimig.bash").read_text(encoding="utf-8")
    line = " ".join(words)
    program = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _hamimig_completion hamimig; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "-c", program],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", **(env or {})},
    )
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_values(tmp_path: Path) -> None:
    state = tmp_path / "state"
    uuids = _records(state, 5, profiles=("9g.99gb",))
    at = ["hamimig", "--state-dir", str(state)]
    assert set(_bash([*at, "show", "''"])) >= set(uuids)
    assert _bash([*at, "show", uuids[2]]) == [uuids[2]]
    assert _bash([*at, "release", "--mig-uuid", uuids[3]]) == [uuids[3]]
    assert set(_bash([*at, "forget", "''"])) >= set(uuids)
    assert "--intent" in _bash([*at, "forget", "--"])
    assert set(_bash([*at, "list", "--profile", "''"])) == {*board_profiles(), "9g.99gb"}
    assert _bash(["hamimig", "allocate", "--profile", "9g"], {"HAMIMIG_STATE_DIR": str(state)}) == [
        "9g.99gb"
    ]
    assert _bash(["hamimig", "-o", "y"]) == ["yaml"]
    assert _bash(["hamimig", "list", "-o", "y"]) == ["yaml"]
    assert _bash(["hamimig", "list", "--state", "Id"]) == ["Idle"]
    assert _bash(["hamimig", "sim", "init", "--model", "B2"]) == ["B200-180GB"]
    assert "nvmlGpuInstanceDestroy" in _bash(["hamimig", "sim", "fault", "add", "--op", "nvmlGpuI"])
    sim, simulated = tmp_path / "node.json", _records(tmp_path / "node.json.d" / "state", 2)
    assert set(_bash(["hamimig", "--sim", str(sim), "show", "''"])) >= set(simulated)
    assert _bash(["hamimig", f"--sim={sim}", "show", simulated[1]]) == [simulated[1]]
    assert _bash(["hamimig", "show", "--sim", str(sim), simulated[1]]) == [simulated[1]]
    # bash itself splits `--sim=PATH` at the `=` (COMP_WORDBREAKS)
    assert _bash(["hamimig", "--sim", "=", str(sim), "show", "''"]) == simulated
    assert _bash(["hamimig", "-o", "=", "json", "show", "--state-dir", "=", str(state), "''"]) == (
        uuids
    )
    assert _bash(["hamimig", "--state-dir", "=", str(state), "list", "--gpu", "=", "G"]) == [GPU]
    home = {"HOME": str(tmp_path)}  # a `~` the shell has not expanded yet
    assert _bash(["hamimig", "--state-dir", "'~/state'", "show", "''"], home) == uuids
    assert _bash(["hamimig", "show", "--sim", "'~/node.json'", "''"], home) == simulated
    # no record, no MIG UUID: still the static values, and no error
    assert set(_bash(["hamimig", "--state-dir", str(tmp_path / "none"), "list", "--profile", "''"]))
    assert _bash(["hamimig", "--state-dir", str(tmp_path / "none"), "show", "MIG-"]) == []


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_values(tmp_path: Path) -> None:
    state = tmp_path / "state"
    uuids = _records(state, 3, profiles=("9g.99gb",))
    script = ROOT / "completions" / "hamimig.fish"

    def fish(line: str) -> list[str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {script}; complete -C {line!r}"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
        )
        assert done.stderr == ""
        return [x.split("\t")[0] for x in done.stdout.splitlines()]

    assert fish(f"hamimig --state-dir {state} show MIG-") == uuids
    assert fish(f"hamimig --state-dir={state} reclaim --mig-uuid MIG-") == uuids
    assert fish(f"hamimig --state-dir {state} list --profile 9") == ["9g.99gb"]
    assert sorted(fish("hamimig -o ")) == ["json", "name", "table", "wide", "yaml"]
    sim, simulated = tmp_path / "node.json", _records(tmp_path / "node.json.d" / "state", 2)
    assert fish(f"hamimig --sim {sim} show MIG-") == simulated
    assert fish(f"hamimig --sim={sim} show MIG-") == simulated


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_with_the_state_dir_of_the_command_line(tmp_path: Path) -> None:
    """The script's function run as zsh's completion system would (its `compdef` and
    `_arguments` stood in for: they need an interactive shell)."""
    state = tmp_path / "state"
    uuids = _records(state, 3)
    script = (ROOT / "completions" / "_hamimig").read_text(encoding="utf-8")
    sim, simulated = tmp_path / "node.json", _records(tmp_path / "node.json.d" / "state", 2)
    for line, wanted in (
        (f"--state-dir {state}", uuids),
        (f"--sim {sim}", simulated),
        (f"--sim={sim}", simulated),
        (f"-o json --sim {sim}", simulated),
    ):
        words = f"hamimig {line} show ''"
        program = (
            'compdef() { :; }; _arguments() { print -r -- "$@"; }\n'
            f"{script}\nwords=({words}); CURRENT={len(words.split())}; _hamimig_completion"
        )
        done = subprocess.run(
            ["zsh", "-f", "-c", program],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
        )
        assert re.findall(r"MIG-[-0-9a-f]+", done.stdout) == wanted, (line, done.stdout)


def test_zsh_completes_the_first_tab_of_an_autoloaded_script(tmp_path: Path) -> None:
    """compinit autoloads `_hamimig` from $fpath: the file is the function's body, and its
    first run (the first TAB) must complete, not only define the completion function."""
    state = tmp_path / "state"
    uuids = _records(state, 2)
    script = (ROOT / "completions" / "_hamimig").read_text(encoding="utf-8")
    words = f"hamimig --state-dir {state} show ''"
    program = (
        'compdef() { :; }; _arguments() { print -r -- "$@"; }\n'
        f"functions[_hamimig]={shlex.quote(script)}\n"
        f"words=({words}); CURRENT={len(words.split())}; _hamimig\n"
        "print -r -- sourced; source /dev/stdin <<< $functions[_hamimig]"
    )
    done = subprocess.run(
        ["zsh", "-f", "-c", program],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
    )
    first, sourced = done.stdout.split("sourced\n")
    assert re.findall(r"MIG-[-0-9a-f]+", first) == uuids, done.stdout
    assert sourced == "", sourced  # sourced (not autoloaded), it only defines the function


def test_profile_completion_offers_every_board_profile() -> None:
    names = {p.name for model in MODELS.values() for p in model.profiles}
    assert set(board_profiles()) == names
    for line in (
        "hamimig list --profile ",
        "hamimig allocate --profile ",
        "hamimig sim create --profile ",
    ):
        assert names <= set(tab(line, env={"HAMIMIG_STATE_DIR": "/nonexistent"})), line


# --- help at 80 columns -----------------------------------------------------------------------


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, cmd)]
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not sub.hidden:
            found += _commands(sub, (*path, name))
    return found


@pytest.mark.parametrize(
    ("path", "cmd"), _commands(command()), ids=lambda p: " ".join(p) if isinstance(p, tuple) else ""
)
def test_help_reads_well_at_80_columns(path: tuple[str, ...], cmd: Any) -> None:
    ran = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert ran.exit_code == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [x for x in lines if len(x) > 80]
    usage = lines[0]
    assert usage.startswith("Usage: hamimig") and "{" not in usage and "}" not in usage, usage
    if "Commands:" in lines:
        rows = lines[lines.index("Commands:") + 1 :]
        assert rows and not any("..." in r or "…" in r for r in rows), rows
    for param in cmd.params:
        if param.param_type_name == "argument" or not (param.is_flag or param.count):
            if "--help" in getattr(param, "opts", ()):
                continue
            assert param.metavar in METAVARS, (path, param.name, param.metavar)
            assert f"{param.metavar} <" not in ran.stdout  # no `<str>` after a metavariable
    assert not re.search(r"^\s+-[-\w]+(?:, -[-\w]+)* <\w", ran.stdout, re.M), ran.stdout


def test_every_command_summary_fits_the_command_list() -> None:
    for path, cmd in _commands(command()):
        if path:
            first = (cmd.help or "").strip().split("\n\n")[0]
            assert "\n" not in first.strip(), (path, first)  # one line
            assert len(first) <= 62, (path, first)


def test_the_adoption_opt_in_names_its_other_spelling() -> None:
    """`recover --adopt` and `adopt --exclusive-owner` are one opt-in: each help says so."""
    recover = CliRunner().invoke(app, ["recover", "--help"], env={"COLUMNS": "200"})
    adopt = CliRunner().invoke(app, ["adopt", "--help"], env={"COLUMNS": "200"})
    assert "adopt spells --exclusive-owner" in " ".join(recover.stdout.split())
    assert "recover spells --adopt" in " ".join(adopt.stdout.split())
