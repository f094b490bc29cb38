"""Every command result speaks one protocol: `kind`, `exit_code`, `to_json()`; the CLI takes
its status from `exit_code` and draws its table from the one registry of the renderer."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import typer
from typer.testing import CliRunner

import hamimig
from hamimig.cli import render
from hamimig.cli.context import Globals, execute
from hamimig.engine.node import Node
from hamimig.engine.results import InstanceView, Json, Result


def _result_classes() -> list[type]:
    """Every class in the package that has a kind and a JSON form, but the Instance object,
    which is part of results rather than one itself."""
    found: dict[str, type] = {}
    for module in pkgutil.walk_packages(hamimig.__path__, "hamimig."):
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            ours = cls.__module__.startswith("hamimig.") and cls is not InstanceView
            if ours and isinstance(getattr(cls, "kind", None), str) and hasattr(cls, "to_json"):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(found.values())


def test_the_walk_finds_results_in_every_engine_module() -> None:
    names = {cls.__name__ for cls in _result_classes()}
    assert {"Metrics", "ConfigView", "Forget", "DoctorReport", "SimView"} <= names
    assert {"DemoTranscript", "InstanceList", "ProfileList", "InstanceDetail"} <= names
    assert {"Allocation", "Release", "Reclaim", "ActionReport", "RecoveryReport"} <= names


def test_every_result_has_an_integer_exit_code() -> None:
    missing = [c.__name__ for c in _result_classes() if not hasattr(c, "exit_code")]
    assert missing == []
    cannot_fail = [c for c in _result_classes() if isinstance(vars(c).get("exit_code"), int)]
    assert cannot_fail and all(c.exit_code == 0 for c in cannot_fail)  # type: ignore[attr-defined]


def test_every_result_kind_has_a_table() -> None:
    without = sorted({c.kind for c in _result_classes()} - set(render._TABLES))
    assert without == []


@dataclass(frozen=True)
class _HalfDone:
    kind: ClassVar[str] = "HalfDone"
    exit_code: int

    def to_json(self) -> Json:
        return {"kind": self.kind}


def _one_command(tmp_path: Path, result: Result) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def cmd(ctx: typer.Context) -> None:
        node = Node(state_dir=tmp_path / "s", cdi_dir=tmp_path / "c", config_path=tmp_path / "x")
        ctx.obj = Globals(node=node, output="json")
        execute(ctx, lambda _: result)

    return app


def test_the_cli_exits_with_the_results_exit_code(tmp_path: Path) -> None:
    ran = CliRunner().invoke(_one_command(tmp_path, _HalfDone(exit_code=5)), [])
    assert ran.exit_code == 5
    assert json.loads(ran.stdout) == {"kind": "HalfDone"}  # reported before the status
    ran = CliRunner().invoke(_one_command(tmp_path, _HalfDone(exit_code=0)), [])
    assert ran.exit_code == 0


def test_a_kind_without_a_table_shows_its_json(capsys: pytest.CaptureFixture[str]) -> None:
    render.emit(_HalfDone(exit_code=0), "table")
    out = capsys.readouterr().out
    assert json.loads(out) == {"kind": "HalfDone"}
