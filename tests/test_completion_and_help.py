"""Completion of values (static ones in the generated scripts, the records' MIG UUIDs and
profiles through the hidden, cheap `hamimig __complete`) and help that reads well at 80
columns (the man page: tests/test_man_page.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hamimig.cli.app import app, command
from hamimig.cli.complete_cmd import COMMAND, board_profiles
from hamimig.cli.docs import _all, command_tree, generate
from hamimig.hw.types import Placement
from hamimig.sim.models import MODELS
from hamimig.store.files import ensure_dir
from hamimig.store.records import STATE_DIR_MODE, Record, RecordStore

ROOT = Path(__file__).resolve().parent.parent
BIN = str(Path(sys.executable).parent)  # where the `hamimig` script of this environment is
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")

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
                gpu_uuid="GPU-c1059a53-288d-43fb-9dd6-988998bf929d",
                profile=profiles[i % len(profiles)],
                placement=Placement(i % 7, 1),
                gpu_instance_id=i,
                compute_instance_id=0,
            )
        )
        uuids.append(mig)
    return sorted(uuids)


def _complete(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hamimig", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


# --- __complete -------------------------------------------------------------------------------


def test_complete_lists_the_records_mig_uuids_and_profiles_quickly(tmp_path: Path) -> None:
    state = tmp_path / "state"
    uuids = _records(state, 50)
    ran = _complete("--state-dir", str(state), COMMAND, "mig-uuids")
    assert (ran.returncode, ran.stderr) == (0, "")
    assert ran.stdout.splitlines() == uuids
    ran = _complete(COMMAND, "profiles", env={"HAMIMIG_STATE_DIR": str(state)})
    assert ran.stdout.splitlines() == sorted(PROFILES)
    # after the command, as every global option may be
    assert _complete(COMMAND, "mig-uuids", f"--state-dir={state}").stdout.splitlines() == uuids
    best = min(_timed(["--state-dir", str(state), COMMAND, "mig-uuids"]) for _ in range(3))
    assert best < 0.5, f"__complete took {best:.2f} s"


def test_complete_reads_a_simulated_nodes_state_dir(tmp_path: Path) -> None:
    """Under `--sim` the records are in the node's home unless a state directory is named."""
    sim = tmp_path / "node.json"
    uuids = _records(tmp_path / "node.json.d" / "state", 2)
    assert _complete("--sim", str(sim), COMMAND, "mig-uuids").stdout.splitlines() == uuids
    assert _complete(COMMAND, "mig-uuids", env={"HAMIMIG_SIM": str(sim)}).stdout.splitlines() == (
        uuids
    )
    named = ("--state-dir", str(tmp_path / "absent"), "--sim", str(sim))
    assert _complete(*named, COMMAND, "mig-uuids").stdout == ""


def _timed(args: list[str]) -> float:
    started = time.perf_counter()
    _complete(*args)
    return time.perf_counter() - started


def test_complete_imports_neither_the_engine_nor_pynvml_yaml_or_rich(tmp_path: Path) -> None:
    _records(tmp_path / "state", 3)
    script = (
        "import sys\n"
        "from hamimig.cli.app import run\n"
        f"status = run(['--state-dir', {str(tmp_path / 'state')!r}, '__complete', 'mig-uuids'])\n"
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
    "args",
    [
        [COMMAND, "mig-uuids"],  # the default state directory, absent here
        [COMMAND, "profiles", "extra", "--unknown"],
        [COMMAND, "nonsense"],
        [COMMAND],
        ["--state-dir", "", COMMAND, "mig-uuids"],
        ["-o", "xml", COMMAND, "profiles"],
    ],
)
def test_complete_never_fails_loudly(tmp_path: Path, args: list[str]) -> None:
    ran = _complete(*args, env={"HAMIMIG_STATE_DIR": str(tmp_path / "absent")})
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")


def test_complete_on_a_state_dir_that_is_not_one_prints_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "link").symlink_to(tmp_path)
    for state in (tmp_path / "file", tmp_path / "link", tmp_path / "file" / "below"):
        ran = _complete("--state-dir", str(state), COMMAND, "mig-uuids")
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")


def test_complete_offers_nothing_a_shell_would_expand(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _records(state, 4, profiles=("1g.10gb", "$(touch pwned)", "a b", "`id`"))
    ran = _complete("--state-dir", str(state), COMMAND, "profiles")
    assert ran.stdout.splitlines() == ["1g.10gb"]


def test_complete_is_hidden(tmp_path: Path) -> None:
    help_text = CliRunner().invoke(app, ["--help"]).stdout
    assert COMMAND not in help_text
    assert COMMAND not in generate(app)["man/hamimig.1"].split(".SH EXIT STATUS")[0]
    assert all(COMMAND not in cmd.path for cmd in _all(command_tree(app)))


# --- the completion scripts -------------------------------------------------------------------


def _bash(words: list[str], env: dict[str, str] | None = None) -> list[str]:
    script = generate(app)["completions/hamimig.bash"]
    line = " ".join(words)
    program = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _hamimig; "
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
    assert set(_bash([*at, "forget", "''"])) >= {*uuids, "--intent"}
    assert set(_bash([*at, "list", "--profile", "''"])) == {*board_profiles(), "9g.99gb"}
    assert _bash(["hamimig", "allocate", "--profile", "9g"], {"HAMIMIG_STATE_DIR": str(state)}) == [
        "9g.99gb"
    ]
    assert _bash(["hamimig", "-o", "y"]) == ["yaml"]
    assert _bash(["hamimig", "list", "--state", "Id"]) == ["Idle"]
    assert _bash(["hamimig", "sim", "init", "--model", "B2"]) == ["B200-180GB"]
    assert "nvmlGpuInstanceDestroy" in _bash(["hamimig", "sim", "fault", "add", "--op", "nvmlGpuI"])
    sim, simulated = tmp_path / "node.json", _records(tmp_path / "node.json.d" / "state", 2)
    assert set(_bash(["hamimig", "--sim", str(sim), "show", "''"])) >= set(simulated)
    assert _bash(["hamimig", f"--sim={sim}", "show", simulated[1]]) == [simulated[1]]
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
    assert fish("hamimig -o ") == ["json", "name", "table", "wide", "yaml"]
    sim, simulated = tmp_path / "node.json", _records(tmp_path / "node.json.d" / "state", 2)
    assert fish(f"hamimig --sim {sim} show MIG-") == simulated
    assert fish(f"hamimig --sim={sim} show MIG-") == simulated


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_asks_the_records_with_the_state_dir_of_the_command_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    uuids = _records(state, 3)
    script = (ROOT / "completions" / "_hamimig").read_text(encoding="utf-8")
    helper = re.search(r"^_hamimig_records\(\) \{.*?^\}$", script, re.M | re.S)
    assert helper is not None
    sim, simulated = tmp_path / "node.json", _records(tmp_path / "node.json.d" / "state", 2)
    for line, wanted in (
        (f"--state-dir {state}", uuids),
        (f"--sim {sim}", simulated),
        (f"--sim={sim}", simulated),
    ):
        words = f"hamimig {line} show ''"
        program = (
            f"{helper.group(0)}\nwords=({words}); CURRENT={len(words.split())}; "
            "_hamimig_records mig-uuids"
        )
        done = subprocess.run(
            ["zsh", "-f", "-c", program],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
        )
        assert done.stdout.splitlines() == wanted, line


def test_the_scripts_carry_every_board_profile() -> None:
    names = {p.name for model in MODELS.values() for p in model.profiles}
    assert set(board_profiles()) == names
    docs = generate(app)
    bash = next(x for x in docs["completions/hamimig.bash"].splitlines() if " --profile)" in x)
    zsh = next(x for x in docs["completions/_hamimig"].splitlines() if " --profile)" in x)
    for line in (bash, zsh):
        assert names <= set(re.split(r'[\s"(]+', line)), line


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
