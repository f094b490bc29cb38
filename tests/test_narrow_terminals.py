"""Tables in an 80-column terminal: `list` (and `-o wide`), `recover` and `reconcile` keep the
columns that matter, shorten MIG UUIDs to unique prefixes, wrap owners and reasons rather than
cut them, and never draw a line wider than the terminal; `profiles` names compute and memory
slices; the slice map has a legend and reads without colour. What is meant to be copied is
never cut at any width: old-form MIG UUIDs (drivers before R470) fold whole; recover names each
GPU whole; a failed event leaves REASON room; `sim show`, `profiles` and dry runs at 40 columns
fold rather than cut; `forget --dry-run` is laid out as `forget`. All through the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hamimig.cli.render import _short_uuids
from tests.support.cli import Cli, allocated, fault, idle, ok, sim_create
from tests.support.pods import PodsFile
from tests.support.tables import boxed_rows, plain_rows

WIDTH = 80
LONG_OWNER = "team-a/a-very-long-pod-name-for-training-0"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_COLOUR = re.compile(r"\x1b\[[0-9;]*(?:3[0-9]|9[0-7]|38;)[0-9;]*m")


def _node(cli: Cli) -> dict[str, str]:
    """Two Active instances (one with a long owner), an Idle one, an Unmanaged one on GPU 1."""
    return {
        "short": allocated(cli, "ns/a", "1g.10gb", "0"),
        "long": allocated(cli, LONG_OWNER, "2g.20gb", "2"),
        "idle": idle(cli, "team-b/old", "1g.10gb", "4"),
        "unmanaged": sim_create(cli, "3g.40gb", "4", gpu="1")["migUUID"],
    }


def _narrow(monkeypatch: pytest.MonkeyPatch, terminal: bool, no_color: bool = False) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.delenv("NO_COLOR", raising=False)
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")  # rich then takes the output for a terminal
    else:
        monkeypatch.delenv("FORCE_COLOR", raising=False)
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")


def _lines(cli: Cli, *args: str, output: str | None = None) -> list[str]:
    ran = cli(*args, output=output)
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    lines = [_ANSI.sub("", line) for line in ran.stdout.splitlines()]
    too_wide = [line for line in lines if len(line) > WIDTH]
    assert not too_wide, "\n".join(lines)
    return lines


def _assert_unique_prefixes(shown: list[str], uuids: list[str]) -> None:
    for cell in shown:
        if cell == "-":
            continue
        prefix = cell.removesuffix("…")
        assert len(prefix) >= len("MIG-") + 8, cell
        matches = [u for u in uuids if u.startswith(prefix)]
        assert len(matches) == 1, (cell, uuids)
        assert cell.endswith("…") or cell in uuids, cell


@pytest.mark.parametrize("terminal", [False, True], ids=["columns", "terminal"])
def test_list_keeps_what_matters_at_80_columns(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    migs = _node(cli)
    _narrow(monkeypatch, terminal)
    lines = _lines(cli, "list")
    rows = boxed_rows(lines, "GPU")
    assert list(rows[0]) == ["GPU", "MIG UUID", "PROFILE", "PLACEMENT", "STATE", "OWNER"]
    assert len(rows) == len(migs)
    # Each MIG UUID is a prefix naming exactly one instance, and cut only after the prefix.
    shown = [row["MIG UUID"] for row in rows]
    assert all(cell.endswith("…") for cell in shown), shown
    _assert_unique_prefixes(shown, list(migs.values()))
    # The owner wraps, never cut.
    assert sorted(row["OWNER"] for row in rows) == sorted(["-", "-", "ns/a", LONG_OWNER])
    assert sorted(row["STATE"] for row in rows) == ["Active", "Active", "Idle", "Unmanaged"]
    assert "MIG instances" in lines
    assert lines[0] == "MIG instances"  # the title: no padding
    assert all(line == line.rstrip() for line in lines if line.startswith("GPU "))


def test_wide_list_at_80_columns_drops_extras_before_the_owner(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    migs = _node(cli)
    _narrow(monkeypatch, terminal=False)
    lines = _lines(cli, "list", output="wide")
    assert lines[0] == "MIG instances"
    header = lines[1].split()
    assert header[:6] == ["GPU", "MIG", "UUID", "PROFILE", "PLACEMENT", "STATE"]
    assert "OWNER" in header and "CDI" not in header and "GI" not in header
    # The whole owner (with its slot, as -o wide always shows it) is there, maybe over lines.
    owner = lines[1].index("OWNER")  # kubectl's look: each column starts under its name
    text = "".join(line[owner:].split(" ")[0] for line in lines[2:])
    assert f"{LONG_OWNER}[0/0]" in text
    shown = [line.split()[1] for line in lines[2:] if line[:1].isdigit()]
    assert len(shown) == len(migs)
    _assert_unique_prefixes(shown, list(migs.values()))


def test_piped_without_columns_keeps_every_column_whole(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    migs = _node(cli)
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    ran = cli("list")
    assert ran.exit_code == 0, ran.stderr
    rows = boxed_rows(ran.stdout.splitlines(), "GPU")
    assert list(rows[0]) == [
        "GPU",
        "MIG UUID",
        "PROFILE",
        "PLACEMENT",
        "GI",
        "CI",
        "STATE",
        "OWNER",
        "CDI",
        "AGE",
    ]
    assert sorted(row["MIG UUID"] for row in rows) == sorted(migs.values())
    assert all(len(line.split("│")) in (1, 12) for line in ran.stdout.splitlines()[3:-3])


def test_recover_keeps_action_and_reason_at_80_columns(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    migs = _node(cli)
    plan = ok(cli.json("recover", "--assume-no-pods", "--dry-run"))["actions"]
    _narrow(monkeypatch, terminal=True)
    lines = _lines(cli, "recover", "--assume-no-pods", "--dry-run")
    assert lines[0] == "recovery (dry run: nothing changed)"
    rows = boxed_rows(lines, "ACTION")
    assert {"ACTION", "MIG UUID", "REASON"} <= set(rows[0])
    assert [row["ACTION"] for row in rows] == [a["action"] for a in plan]
    # Every reason is there whole, wrapped over lines (compared without the spaces it wraps at).
    for row, action in zip(rows, plan, strict=True):
        assert _unspaced(row["REASON"]) == _unspaced(action["reason"]), row
    _assert_unique_prefixes([row["MIG UUID"] for row in rows], list(migs.values()))


def _unspaced(text: str) -> str:
    return text.replace(" ", "")


def test_reconcile_at_80_columns(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, pods_file: PodsFile
) -> None:
    migs = _node(cli)
    pods = pods_file()  # no pods: the Active instances' pods are gone
    plan = ok(cli.json("reconcile", "--pods", pods, "--dry-run"))["actions"]
    assert plan
    _narrow(monkeypatch, terminal=False)
    lines = _lines(cli, "reconcile", "--pods", pods, "--dry-run")
    assert lines[0] == "reconcile (dry run: nothing changed)"
    rows = boxed_rows(lines, "ACTION")
    assert {"ACTION", "MIG UUID", "REASON"} <= set(rows[0])
    for row, action in zip(rows, plan, strict=True):
        assert _unspaced(row["REASON"]) == _unspaced(action["reason"]), row
    _assert_unique_prefixes([row["MIG UUID"] for row in rows], list(migs.values()))


def test_profiles_names_compute_and_memory_slices(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    _narrow(monkeypatch, terminal=True)
    lines = _lines(cli, "profiles")
    text = "\n".join(lines)
    assert "COMPUTE SLICES" in text and "MEMORY SLICES" in text and "start:size" in text
    titles = [line for line in lines if line.startswith("GPU ")]
    assert len(titles) == 2
    assert all(line == line.rstrip() for line in titles)
    # 3g.40gb: 3 compute slices, placed on 4 memory slices; each column says which it counts.
    rows = boxed_rows(lines, "PROFILE")
    assert list(rows[0]) == [
        "PROFILE",
        "ID",
        "COMPUTE SLICES",
        "MEMORY MiB",
        "FREE/TOTAL",
        "MEMORY SLICES (placement start:size)",
    ]
    three = next(row for row in rows if row["PROFILE"] == "3g.40gb")
    assert three["COMPUTE SLICES"] == "3"
    assert three["MEMORY SLICES (placement start:size)"].split() == ["0:4", "4:4"]


def test_slice_map_reads_without_colour(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _node(cli)
    _narrow(monkeypatch, terminal=True, no_color=True)
    ran = cli("list")
    assert ran.exit_code == 0, ran.stderr
    assert not _COLOUR.search(ran.stdout), ran.stdout
    lines = _lines(cli, "list")
    legend = "\n".join(lines[next(i for i, x in enumerate(lines) if x.startswith("legend:")) :])
    for words in ("GI<n>=GPU instance", "…=it goes on", "·=free"):
        assert words in legend, legend
    for state in ("A=Active", "I=Idle", "U=Unmanaged"):
        assert state in legend, legend
    assert "Error" not in legend  # only the states on the maps
    # Under each slice the state's letter: GPU 0 holds 1g (0), 2g (2-3), Idle 1g (4); GPU 1 a 3g.
    states = [line.split()[1:] for line in lines if line.startswith("  state")]
    assert states == [["A", "A", "A", "I"], ["U", "U", "U", "U"]]
    slices = next(line for line in lines if line.startswith("  memory slice"))
    cells = lines[lines.index(slices) + 1]
    state_row = lines[lines.index(slices) + 2]
    # The letters stand under their cells: the first GI's label and its state share a column.
    assert state_row.index("A") == cells.index("GI") + 1


def test_title_lines_have_no_trailing_spaces(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _node(cli)
    _narrow(monkeypatch, terminal=False)
    titles = {
        ("list",): "MIG instances",
        ("recover", "--assume-no-pods", "--dry-run"): "recovery (dry run: nothing changed)",
        ("doctor",): f"doctor: simulated node {cli.sim}",  # long: wrapped over lines
        ("sim", "show"): f"simulated node {cli.sim}",
        ("profiles", "--gpu", "0"): "GPU 0  NVIDIA H100 80GB HBM3  GPU-",
    }
    for args, title in titles.items():
        lines = _lines(cli, *args)
        above = lines[: next(i for i, line in enumerate(lines) if line.startswith("┏"))]
        assert above, (args, lines)
        assert all(line == line.rstrip() for line in above), (args, above)
        assert " ".join(above).replace(" ", "").startswith(_unspaced(title)), (args, above)


def test_short_uuids_are_unique_prefixes() -> None:
    uuids = [
        "MIG-aaaaaaaa-1111-4000-8000-000000000000",
        "MIG-aaaaaaaa-2222-4000-8000-000000000000",
        "MIG-bbbbbbbb-1111-4000-8000-000000000000",
        "-",
    ]
    # Long enough to tell the first two apart, never ending on a dash, the same on every row.
    assert _short_uuids(uuids) == [
        "MIG-aaaaaaaa-1…",
        "MIG-aaaaaaaa-2…",
        "MIG-bbbbbbbb-1…",
        "-",
    ]
    old = ["MIG-GPU-12345678-1234-1234-1234-123456789abc/1/0"]
    assert _short_uuids(old) == old  # every instance on the GPU shares its digits: whole
    assert _short_uuids(["-"]) == ["-"]


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_skipped_lines_fold_whole_words_at_80_columns(
    cli: Cli, pods_file: PodsFile, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    """reclaim --all-idle lists what it kept: each MIG UUID and pod whole on one line, the
    reason folded at spaces under it, no trailing blanks, nothing cut."""
    from tests.support.pods import entry, kube_pod

    holder = "tenant-a-namespace/training-job-with-a-rather-long-name-0"
    kept = [idle(cli, "ns/a", "1g.10gb", start) for start in ("0", "1")]
    listed = {i["migUUID"]: i for i in ok(cli.json("list"))["instances"]}
    entries = [entry(listed[mig], device=n) for n, mig in enumerate(kept)]
    pods = pods_file(kube_pod(holder, entries))
    _narrow(monkeypatch, terminal)
    lines = _lines(cli, "reclaim", "--gpu", "0", "--all-idle", "--pods", pods)
    assert [line for line in lines if line != line.rstrip()] == []
    starts = [n for n, line in enumerate(lines) if line.startswith("skipped ")]
    assert len(starts) == 2
    for n in starts:
        block = lines[n : n + 3]
        [mig] = [mig for mig in kept if block[0].startswith(f"skipped {mig}: ")]
        assert all(line.startswith("  ") for line in block[1:])  # one item reads as one
        assert any(holder in line for line in block)  # the pod whole, never split
        text = " ".join(line.strip() for line in block)
        assert text == f"skipped {mig}: pod {holder}'s allocation annotation names it"


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
    rows = boxed_rows(lines, "GPU")
    # The columns a new-form list keeps at 80, each MIG UUID whole (folded over lines).
    assert {"GPU", "MIG UUID", "PROFILE", "PLACEMENT", "STATE", "OWNER"} <= set(rows[0])
    assert sorted(row["MIG UUID"] for row in rows) == uuids
    assert sorted(row["OWNER"] for row in rows) == ["a/p1", "a/p2"]
    for width in (80, 60):
        wide = _at(old, monkeypatch, width, "-o", "wide", "list")[1:]
        plain = _at(old, monkeypatch, width, "list")
        for table in (wide, plain):
            assert not [line for line in table if "…" in line], "\n".join(table)
        rows = plain_rows(
            wide[: next(n for n, x in enumerate(wide) if x.startswith("GPU 0 "))], "GPU"
        )
        assert {"GPU", "MIG UUID", "STATE", "OWNER"} <= set(rows[0]), rows
        assert sorted(row["MIG UUID"] for row in rows) == uuids


def test_recover_names_each_gpu_whole(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _node(cli)
    plan = ok(cli.json("recover", "--assume-no-pods", "--dry-run"))["actions"]
    monkeypatch.delenv("COLUMNS", raising=False)
    ran = cli("recover", "--assume-no-pods", "--dry-run")
    rows = boxed_rows(ran.stdout.splitlines(), "ACTION")
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
        rows = boxed_rows(lines, "TIME")
    else:
        assert lines[0].split()[-1] == "REASON", lines[0]
        rows = plain_rows(lines, "TIME")
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
    rows = boxed_rows(lines, "")
    assert _unspaced(" ".join(rows[0])) == _unspaced(
        "PROFILE ID COMPUTE SLICES MEMORY MiB FREE/TOTAL MEMORY SLICES (placement start:size)"
    )


def test_dry_runs_at_40_columns_keep_the_reason(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _node(cli)
    plan = ok(cli.json("recover", "--assume-no-pods", "--dry-run"))["actions"]
    lines = _at(cli, monkeypatch, 40, "recover", "--assume-no-pods", "--dry-run")
    table = lines[1 : next(n for n, x in enumerate(lines) if x.startswith("summary:"))]
    # Every cell folds over lines (no column keeps a row on one): compared column by column.
    [column] = plain_rows(table, "ACTION")[:1]
    rows = plain_rows(table, "REASON")  # one row: every line's fragments of each column joined
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
        dry = boxed_rows(_at(cli, monkeypatch, width, "forget", "--dry-run", mig), "GPU")
        real = boxed_rows(_at(cli, monkeypatch, width, "forget", mig), "GPU")
        assert list(dry[0]) == list(real[0]), (width, dry, real)
        assert dry[0]["MIG UUID"] == real[0]["MIG UUID"] == mig, (width, dry, real)
        assert (_unspaced(dry[0]["OUTCOME"]), real[0]["OUTCOME"]) == ("wouldforget", "forgotten")
