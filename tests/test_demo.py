"""`hamimig demo`: the narrated lifecycle on a temporary simulated node."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hamimig.cli.app import app


def _steps(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["title"]: s for s in data["steps"]}


@pytest.mark.slow
def test_demo_transcript_tells_the_lifecycle(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["-o", "json", "demo", "--keep", str(tmp_path / "node")])
    assert result.exit_code == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["kind"] == "DemoTranscript"
    steps = _steps(data)
    assert len(steps) == 10

    created = steps["Allocate"]["instances"]
    assert [(i["state"], i["owner"]["name"]) for i in created] == [("Active", "train-1")]
    first = created[0]["migUUID"]

    reuse = steps["Exact reuse"]
    assert reuse["creations"] == 0 and reuse["destructions"] == 0
    assert reuse["nvmlCalls"] <= 15  # verify the instance (11), its 3 process lists, MIG mode
    assert [i["migUUID"] for i in reuse["instances"]] == [first]
    assert reuse["outcome"].startswith(f"reused {first}")

    idle_before = {
        i["placement"]["start"]: i["migUUID"]
        for i in steps["Two Idle instances"]["instances"]
        if i["state"] == "Idle"
    }
    assert sorted(idle_before) == [2, 4]
    pressure = steps["Placement pressure"]
    assert f"reclaimed {idle_before[2]}" in pressure["outcome"]
    after = {i["placement"]["start"]: i for i in pressure["instances"]}
    assert after[4]["migUUID"] == idle_before[4] and after[4]["state"] == "Idle"
    assert after[2]["profile"] == "2g.20gb" and after[2]["state"] == "Active"

    assert steps["Active is protected"]["exitCode"] == 3
    assert steps["Active is protected"]["destructions"] == 0

    error = steps["NVML failure -> Error"]
    assert error["exitCode"] == 4
    assert [i["state"] for i in error["instances"] if i["placement"]["start"] == 6] == ["Error"]
    cleared = steps["reconcile clears it"]
    assert cleared["exitCode"] == 0
    assert all(i["placement"]["start"] != 6 for i in cleared["instances"])

    crash = steps["Crash mid-allocation"]
    assert "exit status 137" in crash["outcome"]
    assert [i["state"] for i in crash["instances"] if i["placement"]["start"] == 5] == ["Creating"]
    recovered = steps["recover rolls it back"]
    assert "rollback-intent" in recovered["outcome"]
    final = {i["placement"]["start"]: i["state"] for i in recovered["instances"]}
    assert final == {0: "Active", 2: "Active", 4: "Idle"}
    # The kept node is a real simulated node that later commands can inspect.
    assert (tmp_path / "node" / "node.json").is_file()


@pytest.mark.slow
def test_demo_narrates_and_waits_between_steps() -> None:
    result = CliRunner().invoke(app, ["demo", "--step"], input="\n" * 10)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.count("press Enter for the next step") == 10
    for title in ("Exact reuse", "Placement pressure", "recover rolls it back"):
        assert title in result.stdout
    assert "10 steps" in result.stdout


@pytest.mark.parametrize("kind", ["non-empty", "file", "symlink"])
def test_demo_keep_must_be_absent_or_an_empty_directory(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "keep"
    if kind == "non-empty":
        target.mkdir()
        (target / "notes.txt").write_text("mine")
    elif kind == "file":
        target.write_text("mine")
    else:
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
    before = sorted(str(p) for p in tmp_path.rglob("*"))

    result = CliRunner().invoke(app, ["demo", "--keep", str(target)])

    assert result.exit_code == 2
    assert result.stderr.startswith(f"hamimig: error: --keep {target}: ")
    assert len(result.stderr.splitlines()) == 1
    assert result.stdout == ""
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    if kind != "symlink":
        assert (target / "notes.txt" if kind == "non-empty" else target).read_text() == "mine"


def test_demo_keep_refusal_is_one_json_object(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    result = CliRunner().invoke(app, ["-o", "json", "demo", "--keep", str(tmp_path)])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["code"] == "usage"


@pytest.mark.slow
def test_demo_never_starts_a_hamimig_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash runs the engine in a forked child: no CLI, no interpreter to find, no text to
    parse, so a `hamimig/` package in the current directory cannot stand in for this one."""
    import subprocess

    fake = tmp_path / "hamimig"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("print('not the real hamimig')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the demo started a process: {args}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)

    result = CliRunner().invoke(app, ["-o", "json", "demo"])

    assert result.exit_code == 0, result.stdout + result.stderr
    crash = _steps(json.loads(result.stdout))["Crash mid-allocation"]
    assert "exit status 137" in crash["outcome"]
    assert [i["state"] for i in crash["instances"] if i["placement"]["start"] == 5] == ["Creating"]


def test_in_child_reports_the_childs_exit_status() -> None:
    from hamimig.errors import ConflictError
    from hamimig.rehearsal.demo import in_child

    def crash() -> None:
        os._exit(137)

    def conflict() -> None:
        raise ConflictError("taken")

    assert in_child(crash) == 137
    assert in_child(conflict) == 3
    assert in_child(lambda: None) == 0
    assert in_child(lambda: 1 / 0) == 1


def _no_op(*_: object, **__: object) -> str | None:
    return "reclaimed 1"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "step"),
    [
        ("demo.in_child", "9 (Crash mid-allocation)"),  # the process does not crash
        # the process dies as if crashed, but never ran the allocation: no intent on disk
        ("demo.in_child.137", "9 (Crash mid-allocation)"),
        ("demo.sim_fault_add", "7 (NVML failure -> Error)"),  # the reclaim succeeds instead
        ("demo._reclaim", "6 (Active is protected)"),  # as if an Active instance were reclaimed
        # the instance is destroyed but its CDI spec stays behind
        ("executor.remove_cdi_after_destroy", "8 (reconcile clears it)"),
    ],
)
def test_a_step_that_does_not_go_as_narrated_fails_the_demo(
    monkeypatch: pytest.MonkeyPatch, target: str, step: str
) -> None:
    from hamimig.engine import executor
    from hamimig.rehearsal import demo

    module, name, *status = target.split(".")
    stand_in = _no_op if name != "in_child" else lambda _: int(status[0]) if status else 0
    monkeypatch.setattr({"demo": demo, "executor": executor}[module], name, stand_in)

    result = CliRunner().invoke(app, ["demo"])

    assert result.exit_code == 1
    assert result.stderr.startswith(f"hamimig: error: demo step {step} did not go as narrated")
    assert len(result.stderr.splitlines()) == 1
    title = step.split(" ", 1)[1].strip("()")
    assert title not in result.stdout  # never narrated
    assert "steps," not in result.stdout  # no summary either


def test_piped_demo_rules_fit_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped output stays wide for grep, but a section rule is a line of the terminal's width:
    80 when it is unknown, not 240 dashes."""
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.stdout + result.stderr
    rules = [line for line in result.stdout.splitlines() if re.match(r"\d+\. .* ─+$", line)]
    assert len(rules) == 10 and all(len(line) <= 80 for line in rules), max(rules, key=len)
