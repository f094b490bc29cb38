"""`hamimig demo`: the narrated lifecycle on a temporary simulated node."""

from __future__ import annotations

import json
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
    assert reuse["nvmlCalls"] <= 10
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
