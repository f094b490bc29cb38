"""The CLI's shared behaviour: output formats, error boundary, start-up cost, slice map."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hamimig.cli.app import app, run
from tests.support.cli import Cli


def test_list_json_shape_on_empty_node(cli: Cli) -> None:
    ran = cli.json("list")
    assert ran.exit_code == 0
    data = ran.json()
    assert data["kind"] == "InstanceList"
    assert data["instances"] == []
    assert data["warnings"] == []
    assert [g["index"] for g in data["gpus"]] == [0, 1]
    for gpu in data["gpus"]:
        assert gpu["uuid"].startswith("GPU-")
        assert gpu["model"] == "NVIDIA H100 80GB HBM3"
        assert gpu["migMode"] == "enabled"


def test_list_filters_by_gpu_uuid_and_state(cli: Cli) -> None:
    assert (
        cli("sim", "create", "--gpu", "1", "--profile", "3g.40gb", "--placement", "4").exit_code
        == 0
    )
    assert (
        cli(
            "sim", "create", "--gpu", "1", "--profile", "1g.10gb", "--placement", "0", "--no-ci"
        ).exit_code
        == 0
    )
    gpu1 = cli.json("list").json()["gpus"][1]["uuid"]
    only = cli.json("list", "--gpu", gpu1).json()
    assert [g["index"] for g in only["gpus"]] == [1]
    assert sorted(i["state"] for i in only["instances"]) == ["OrphanGI", "Unmanaged"]
    orphans = cli.json("list", "--state", "orphangi").json()["instances"]
    assert len(orphans) == 1
    assert orphans[0]["migUUID"] is None
    assert orphans[0]["computeInstanceID"] is None
    assert orphans[0]["placement"] == {"start": 0, "size": 1}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["list", "--gpu", "7"], "no GPU 7"),
        (["list", "--gpu", "nonsense"], "invalid GPU"),
        (["list", "--state", "Sleeping"], "'Sleeping' is not one of"),
        (["profiles", "--gpu", "GPU-00000000-0000-0000-0000-000000000000"], "no GPU"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(cli: Cli, args: list[str], needle: str) -> None:
    ran = cli(*args)
    assert ran.exit_code == 2
    assert ran.stdout == ""
    assert needle in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1
    failed = cli.json(*args)
    assert failed.exit_code == 2
    assert failed.json() == {
        "kind": "Error",
        "error": {"code": "usage", "message": failed.json()["error"]["message"]},
    }
    assert needle in failed.json()["error"]["message"]


def test_yaml_output(cli: Cli) -> None:
    ran = cli("profiles", "--gpu", "0", output="yaml")
    assert ran.exit_code == 0
    data = yaml.safe_load(ran.stdout)
    assert data["kind"] == "ProfileList"
    assert {p["name"] for p in data["gpus"][0]["profiles"]} >= {"1g.10gb", "7g.80gb"}


def test_unknown_output_format_is_usage_error(cli: Cli) -> None:
    ran = cli("list", output="xml")
    assert ran.exit_code == 2
    assert "Invalid value for '--output'" in ran.stderr


def test_parse_errors_honour_json_output(
    capsys: pytest.CaptureFixture[str], sim_path: Path
) -> None:
    status = run(["--sim", str(sim_path), "-o", "json", "list", "--no-such-option"])
    out = capsys.readouterr()
    assert status == 2
    data = json.loads(out.out)
    assert data["kind"] == "Error"
    assert data["error"]["code"] == "usage"
    assert "--no-such-option" in data["error"]["message"]


def test_sim_commands_need_sim_path(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sim", "show"])
    assert result.exit_code == 2
    assert "--sim" in result.stderr


def test_missing_sim_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--sim", str(tmp_path / "nope.json"), "list"])
    assert result.exit_code == 2
    assert "sim init" in result.stderr


def test_slice_map_in_a_terminal(cli: Cli) -> None:
    cli("sim", "create", "--gpu", "0", "--profile", "2g.20gb", "--placement", "2")
    argv = [*cli.globals(), "list", "--gpu", "0"]
    result = CliRunner().invoke(app, argv, env={"FORCE_COLOR": "1", "COLUMNS": "160"})
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if "slice" in line]
    assert len(lines) == 1
    cells = result.stdout.splitlines()[result.stdout.splitlines().index(lines[0]) + 1]
    # slices 0-1 free, 2-3 the 2g.20gb (GI 4), 4-7 free
    plain = _strip_ansi(cells)
    fields = [f.strip() for f in plain.strip().split("|")]
    assert fields == ["·", "·", "GI4", "…", "·", "·", "·", "·"]


def test_no_slice_map_when_piped(cli: Cli) -> None:
    ran = cli("list")
    assert "slice" not in ran.stdout
    assert "MIG enabled" in ran.stdout


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _loaded_by_help(prefixes: tuple[str, ...]) -> tuple[str, list[str]]:
    """`hamimig --help` in a fresh interpreter: its output, and the modules it loaded whose
    names start with one of `prefixes`."""
    script = (
        "import sys\n"
        "from hamimig.cli.app import run\n"
        "status = run(['--help'])\n"
        f"heavy = sorted(m for m in sys.modules if m.startswith({prefixes!r}))\n"
        "print(status, heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    status, _, heavy = done.stdout.strip().splitlines()[-1].partition(" ")
    assert status == "0"
    names: list[str] = ast.literal_eval(heavy)  # the list the script printed
    return done.stdout, names


def test_help_imports_neither_pynvml_yaml_nor_rich() -> None:
    out, heavy = _loaded_by_help(("pynvml", "yaml", "rich"))
    assert heavy == []
    assert "Commands" in out


def test_version(cli: Cli) -> None:
    ran = cli("--version")
    assert ran.exit_code == 0
    assert ran.stdout.startswith("hamimig ")


def test_every_command_has_help() -> None:
    runner = CliRunner()
    for args in (["list"], ["profiles"], ["sim"], ["sim", "init"], ["sim", "fault", "add"]):
        result = runner.invoke(app, [*args, "--help"])
        assert result.exit_code == 0, args
        assert "Usage:" in result.stdout


def test_help_loads_neither_the_renderer_nor_the_engine() -> None:
    """`--help` is the cheapest call there is: the output machinery and the lifecycle core
    load only for a command that runs (the check for undecodable arguments included)."""
    prefixes = ("hamimig.engine", "hamimig.cli.render", "hamimig.reports", "hamimig.store")
    assert _loaded_by_help(prefixes)[1] == []
