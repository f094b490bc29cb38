"""Messages that point the right way: the advice a command gives names options it has, and a
setting that would silently do nothing is called out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hamimig.cli.app import app
from tests.support.cli import Cli, idle, ok, refused
from tests.support.node import node_dir


def test_metrics_textfile_warns_when_the_collector_would_ignore_it(
    cli: Cli, tmp_path: Path
) -> None:
    idle(cli, "ns/a", "1g.10gb")
    target = tmp_path / "hamimig.txt"
    written = ok(cli.json("metrics", "--textfile", str(target)))
    assert target.exists()
    (warning,) = [w for w in written["warnings"] if w["file"] == str(target)]
    assert "reads only *.prom files" in warning["reason"]
    table = cli("metrics", "--textfile", str(target))
    assert table.exit_code == 0 and "reads only *.prom files" in table.stderr
    fine = ok(cli.json("metrics", "--textfile", str(tmp_path / "hamimig.prom")))
    assert "warnings" not in fine


def test_reconcile_never_suggests_an_option_it_does_not_have(cli: Cli) -> None:
    for ran in (cli.json("reconcile", "--assume-no-pods"), cli("reconcile", "--help")):
        assert "--assume-no-pods" not in ran.stdout.replace("No such option: --assume-no-pods", "")


def test_reclaim_names_the_options_that_conflict(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "1g.10gb")
    message = refused(cli.json("reclaim", "--mig-uuid", mig, "--gpu", "1"), 2, "usage")
    assert "--mig-uuid and --gpu exclude each other" in message


def test_config_show_names_the_real_source_of_each_global_option(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAMIMIG_CDI_DIR", str(cli.cdi_dir))
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("HAMIMIG_CONFIG", raising=False)
    argv = ["--sim", str(cli.sim), "--state-dir", str(cli.state_dir), "-o", "json"]
    ran = cli.runner.invoke(app, [*argv, "config", "show"], catch_exceptions=False)
    settings = {s["key"]: (s["value"], s["source"]) for s in json.loads(ran.stdout)["settings"]}
    assert settings["stateDir"] == (str(cli.state_dir), "option --state-dir")
    assert settings["cdiDir"] == (str(cli.cdi_dir), "env HAMIMIG_CDI_DIR")
    assert settings["sim"] == (str(cli.sim), "option --sim")
    assert settings["node"] == (None, "default")
    assert settings["config"] == (str(node_dir(cli.sim) / "config.yaml"), "default (--sim)")
