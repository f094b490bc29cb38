"""What is meant to be copied is never cut, at any width (`COLUMNS`): old-form MIG UUIDs (drivers
before R470) fold in a narrow `list` that keeps its usual columns; recover's GPU column names the
GPU whole; a failed step in `events` leaves REASON room at 80 columns; `sim show`, `profiles`
and narrow dry runs fold cells and headers instead of ending them in `…`; and `forget --dry-run`
is laid out as the real `forget` is. All through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import Cli, allocated, fault, idle, ok
from tests.test_copyable_output import _plain, _table, _unspaced
from tests.test_narrow_terminals import _boxed, _node

OLD_DRIVER = "460.91.03"


def _at(cli: Cli, monkeypatch: pytest.MonkeyPatch, width: int, *args: str) -> list[str]:
    """The lines `hamimig ARGS` prints at `COLUMNS=width` (exit 0), none wider than that."""
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    ran = cli(*args)
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    lines = ran.stdout.splitlines()
    assert all(len(line) <= width for line in lines), ran.stdout
    return lines


@pytest.fixture
def old(tmp_path: Path) -> Cli:
    """A node whose driver predates R470, with two Active instances on GPU 0."""
    cli = Cli(tmp_path / "old" / "node.json", tmp_path / "state", tmp_path / "cdi")
    args = ("sim", "init", "--model", "A100-SXM4-40GB", "--driver-version", OLD_DRIVER)
    ok(cli.json(*args, "--count", "1"))
    allocated(cli, "a/p1", "1g.5gb", "0")
    allocated(cli, "a/p2", "1g.5gb", "1")
    return cli


def test_old_form_uuids_fold_whole_in_a_narrow_list(
    old: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuids = sorted(i["migUUID"] for i in ok(old.json("list"))["instances"])
    assert all(u.startswith("MIG-GPU-") for u in uuids)
    lines = _at(old, monkeypatch, 80, "list")
    assert not [line for line in lines if "…" in line], "\n".join(lines)
    rows = _boxed(lines, "GPU")
    # The columns a new-form list keeps at 80, each MIG UUID whole (folded over lines).
    assert {"GPU", "MIG UUID", "PROFILE", "PLACEMENT", "STATE", "OWNER"} <= set(rows[0])
    assert sorted(row["MIG UUID"] for row in rows) == uuids
    assert sorted(row["OWNER"] for row in rows) == ["a/p1", "a/p2"]
    for width in (80, 60):
        wide = _at(old, monkeypatch, width, "-o", "wide", "list")[1:]
        plain = _at(old, monkeypatch, width, "list")
        for table in (wide, plain):
            assert not [line for line in table if "…" in line], "\n".join(table)
        rows = _plain(wide[: next(n for n, x in enumerate(wide) if x.startswith("GPU 0 "))], "GPU")
        assert {"GPU", "MIG UUID", "STATE", "OWNER"} <= set(rows[0]), rows
        assert sorted(row["MIG UUID"] for row in rows) == uuids


def test_recover_names_each_gpu_whole(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _node(cli)
    plan = ok(cli.json("recover", "--assume-no-pods", "--dry-run"))["actions"]
    monkeypatch.delenv("COLUMNS", raising=False)
    ran = cli("recover", "--assume-no-pods", "--dry-run")
    rows = _boxed(ran.stdout.splitlines(), "ACTION")
    assert [row["GPU UUID"] for row in rows] == [a["gpuUUID"] or "-" for a in plan]
    for gpu in {a["gpuUUID"] for a in plan if a["gpuUUID"]}:
        assert cli("list", "--gpu", gpu).exit_code == 0  # what is shown is what commands take


def test_a_failed_event_leaves_reason_room_at_80_columns(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "2")
    fault(cli, "nvmlGpuInstanceDestroy", "UNKNOWN")
    assert cli.json("reclaim", "--mig-uuid", mig).exit_code == 4
    events = ok(cli.json("events"))["events"]
    lines = _at(cli, monkeypatch, 80, "events")
    if lines[0].startswith("┏"):  # rules where they fit
        assert lines[1].split("┃")[-2].strip() == "REASON", lines[1]  # the header whole
        rows = _table(lines, "TIME", "TIME")
    else:
        assert lines[0].split()[-1] == "REASON", lines[0]
        rows = _plain(lines, "TIME")
    assert [row["ACTION"] for row in rows] == [e["action"] for e in events]
    failed = rows[-1]
    assert events[-1]["outcome"] == "failed"
    assert "FAILED:" in failed["REASON"]  # the failure said in words, not by colour alone
    assert events[-1]["error"].replace(" ", "") in _unspaced(failed["REASON"])
    start = max(n for n, line in enumerate(lines) if failed["TIME"][:19] in line)  # its row
    assert len(lines) - start <= 12, "\n".join(lines)  # a few lines, not one word per line


def test_sim_show_and_profiles_fold_rather_than_cut(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    migs = _node(cli)
    lines = _at(cli, monkeypatch, 80, "sim", "show")
    assert not [line for line in lines if "…" in line], "\n".join(lines)
    shown = _unspaced("".join(line.split("│")[-3] for line in lines if line.startswith("│")))
    for mig in migs.values():
        assert mig in shown, (mig, "\n".join(lines))
    lines = _at(cli, monkeypatch, 60, "profiles")
    assert not [line for line in lines if "…" in line], "\n".join(lines)
    rows = _boxed(lines, "")
    assert _unspaced(" ".join(rows[0])) == _unspaced(
        "PROFILE ID COMPUTE SLICES MEMORY MiB FREE/TOTAL MEMORY SLICES (placement start:size)"
    )


def test_dry_runs_at_40_columns_keep_the_reason(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _node(cli)
    plan = ok(cli.json("recover", "--assume-no-pods", "--dry-run"))["actions"]
    lines = _at(cli, monkeypatch, 40, "recover", "--assume-no-pods", "--dry-run")
    table = lines[1 : next(n for n, x in enumerate(lines) if x.startswith("summary:"))]
    # Every cell folds over lines (no column keeps a row on one): compared column by column.
    [column] = _plain(table, "ACTION")[:1]
    rows = _plain(table, "REASON")  # one row: every line's fragments of each column joined
    joined = {name: "".join(row[name] for row in rows) for name in column}
    assert "REASON" in joined and "MIG UUID" in joined, joined
    assert joined["ACTION"] == "".join(a["action"] for a in plan)
    assert _unspaced(joined["REASON"]) == _unspaced("".join(a["reason"] for a in plan))
    lines = _at(cli, monkeypatch, 40, "reclaim", "--gpu", "0", "--all-idle", "--dry-run")
    assert "would" in lines[2] and "recla…" not in "".join(lines), "\n".join(lines)


def test_forget_dry_run_is_laid_out_as_forget(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    widths = (100, 101, 102)
    migs = [idle(cli, f"ns/p{n}", "1g.10gb", str(n)) for n in range(len(widths))]
    for width, mig in zip(widths, migs, strict=True):
        dry = _boxed(_at(cli, monkeypatch, width, "forget", "--dry-run", mig), "GPU")
        real = _boxed(_at(cli, monkeypatch, width, "forget", mig), "GPU")
        assert list(dry[0]) == list(real[0]), (width, dry, real)
        assert dry[0]["MIG UUID"] == real[0]["MIG UUID"] == mig, (width, dry, real)
        assert (_unspaced(dry[0]["OUTCOME"]), real[0]["OUTCOME"]) == ("wouldforget", "forgotten")
