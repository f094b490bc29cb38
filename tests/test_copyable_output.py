"""Output meant to be copied is never cut: at 80 and 120 columns (`COLUMNS`, as scripts and
narrow terminals set it) doctor's check names, paths and fixes, `config show`'s keys and values
and the event journal's cells fold onto more lines instead of ending in `…`; doctor's JSON names
each file whole; and `-o wide list` shows every column plain `list` shows at the same width."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from hamimig.store.records import record_name
from tests.support.cli import Cli, allocated, idle, ok, sim, sim_create
from tests.support.tables import boxed_rows, plain_rows

LONG_OWNER = "team-a/a-very-long-pod-name-for-training-0"


def _printed(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, width: int, *args: str, code: int = 0
) -> list[str]:
    """The lines `hamimig ARGS` prints at `COLUMNS=width`, none wider than that."""
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    ran = cli(*args)
    assert ran.exit_code == code, (ran.stdout, ran.stderr)
    lines = ran.stdout.splitlines()
    assert all(len(line) <= width for line in lines), ran.stdout
    return lines


def _unspaced(text: str) -> str:
    return text.replace(" ", "")


def _corrupt_record(cli: Cli) -> tuple[str, str]:
    """A node whose one record is not valid JSON (doctor fails it and names the `hamimig
    forget` line); returns the record's check name and the record's path."""
    mig = allocated(cli, LONG_OWNER, "1g.10gb", "0")
    name = record_name(mig)
    (cli.state_dir / name).write_text('{"version": 1, "migUUID": ')
    return f"record/{name.removeprefix('hami-owned-').removesuffix('.json')}", str(
        cli.state_dir / name
    )


@pytest.mark.parametrize("width", [80, 120])
def test_doctor_folds_a_failing_records_name_path_and_fix(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    check, path = _corrupt_record(cli)
    report = cli.json("doctor").json()
    assert report["summary"]["fail"] >= 1
    lines = _printed(cli, monkeypatch, width, "doctor", code=5)
    assert not any("…" in line for line in lines), "\n".join(lines)
    rows = {row["CHECK"]: row for row in boxed_rows(lines, "CHECK", "STATUS")}
    # Every check of the report is in the table under its whole name, with its whole detail
    # and fix (a path folds mid-word, never cut).
    assert sorted(rows) == sorted(c["name"] for c in report["checks"])
    for c in report["checks"]:
        row = rows[c["name"]]
        assert row["STATUS"] == c["status"].upper()
        assert _unspaced(row["DETAIL"]) == _unspaced(c["message"]), (row, c)
        assert _unspaced(row["FIX"]) == (_unspaced(c["hint"]) if c["hint"] else "-"), (row, c)
    assert rows[check]["STATUS"] == "FAIL"
    assert path in rows[check]["DETAIL"]
    # The way out, a `hamimig forget` line naming the record's device, is in FIX whole.
    device = Path(path).name.removeprefix("hami-owned-").removesuffix(".json")
    line = shlex.join(["hamimig", *cli.globals(), "forget", device])
    assert _unspaced(line) in _unspaced(rows[check]["FIX"])


def test_doctors_json_names_each_file_whole(cli: Cli) -> None:
    loose = allocated(cli, "ns/b", "1g.10gb", "1")
    orphaned = allocated(cli, "ns/c", "1g.10gb", "2")
    (cli.state_dir / record_name(orphaned)).unlink()  # its spec is now no record's
    check, _ = _corrupt_record(cli)
    os.chmod(cli.state_dir / record_name(loose), 0o644)
    checks = {c["name"]: c for c in cli.json("doctor").json()["checks"]}
    assert not [name for name in checks if "…" in name]
    assert checks[check]["status"] == "fail"
    subject = record_name(loose).removeprefix("hami-owned-").removesuffix(".json")
    assert checks[f"file-mode/{subject}"]["status"] == "warn"
    orphans = [name for name in checks if name.startswith("cdi-spec/")]
    assert orphans and all(re.fullmatch(r"cdi-spec/mig-[0-9a-f]{64}", name) for name in orphans), (
        orphans
    )
    for yaml_line in cli("doctor", output="yaml").stdout.splitlines():
        assert "…" not in yaml_line, yaml_line


@pytest.mark.parametrize("width", [80, 120])
def test_config_show_keys_values_and_sources_whole(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    settings = ok(cli.json("config", "show"))["settings"]
    lines = _printed(cli, monkeypatch, width, "config", "show")
    assert not any("…" in line for line in lines), "\n".join(lines)
    rows = boxed_rows(lines, "SETTING", "SETTING")
    assert [row["SETTING"] for row in rows] == [s["key"] for s in settings]
    for row, setting in zip(rows, settings, strict=True):
        value = setting["value"]
        shown = value if isinstance(value, str) else json.dumps(value)
        assert _unspaced(row["VALUE"]) == _unspaced(shown), (row, setting)
        assert _unspaced(row["SOURCE"]) == _unspaced(setting["source"]), (row, setting)
    assert str(cli.state_dir) in {row["VALUE"] for row in rows}
    # Where they fit beside the other columns (80 is wide enough), keys stay on one line each.
    for setting in settings:
        assert any(f"│ {setting['key']} " in line for line in lines), setting["key"]


def _wide_node(cli: Cli) -> None:
    """Active (one with a long owner, one busy), Idle and Unmanaged instances on two GPUs."""
    allocated(cli, LONG_OWNER, "2g.20gb", "0")
    busy = allocated(cli, "ns/a", "1g.10gb", "2")
    sim(cli, "busy", "--mig-uuid", busy)
    idle(cli, "team-b/old", "1g.10gb", "4")
    sim_create(cli, "3g.40gb", "4", gpu="1")


def _wide_header(lines: list[str]) -> list[str]:
    """The column names of `-o wide`'s table (kubectl's look: names two spaces apart or more)."""
    assert lines[0] == "MIG instances", lines
    return re.split(r" {2,}", lines[1].strip())


@pytest.mark.parametrize("width", [80, 100, 120])
def test_wide_list_shows_every_column_plain_list_shows(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    _wide_node(cli)
    plain = boxed_rows(_printed(cli, monkeypatch, width, "list"), "GPU", "GPU")
    wide = _wide_header(_printed(cli, monkeypatch, width, "-o", "wide", "list"))
    # Wide means more, never less: its CDI DEVICE is the whole of plain's CDI, its PROCESSES
    # column what plain's `(busy)` says.
    expected = {"CDI DEVICE" if name == "CDI" else name for name in plain[0]}
    assert expected <= set(wide), (list(plain[0]), wide)
    assert any("(busy)" in row["STATE"] for row in plain)
    assert "PROCESSES" in wide


def test_wide_list_shows_uuids_whole_where_plain_list_does(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wide_node(cli)
    uuids = {i["migUUID"] for i in ok(cli.json("list"))["instances"]}
    plain = boxed_rows(_printed(cli, monkeypatch, 120, "list"), "GPU", "GPU")
    assert {row["MIG UUID"] for row in plain} == uuids
    wide = _printed(cli, monkeypatch, 120, "-o", "wide", "list")
    assert {line.split()[1] for line in wide[2:] if line[:1].isdigit()} == uuids


@pytest.mark.parametrize("width", [80, 120])
def test_events_fold_long_pods_instead_of_cutting_the_row(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    _wide_node(cli)
    events = ok(cli.json("events"))["events"]
    lines = _printed(cli, monkeypatch, width, "events")
    # Rules where they fit (120); kubectl's look where they would leave REASON no room (80).
    rows = boxed_rows(lines, "TIME", "TIME") if width > 80 else plain_rows(lines, "TIME")
    assert len(rows) == len(events)
    for row, event in zip(rows, events, strict=True):
        assert row["ACTION"] == event["action"], row
        assert row["POD"] == (event.get("pod") or "-"), row
        assert row["TIME"].endswith("Z") and "…" not in row["TIME"], row
        assert "…" not in row.get("REASON", ""), row
