"""`list` for people and scripts: `-o wide`, `--no-headers`, the AGE column (from the node's
clock, which `sim clock` moves), the owner's container/device index, and the filters (`--pod`,
`--profile`, repeatable `--state`, `--gpu`), all through the CLI."""

from __future__ import annotations

import pytest

from tests.support.cli import Cli, allocated, idle, ok, sim, sim_create

UID = "3f1c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b"


def _allocate(cli: Cli, pod: str, profile: str, placement: str, *extra: str) -> str:
    args = ["allocate", "--pod", pod, "--gpu", "0", "--profile", profile]
    done = ok(cli.json(*args, "--placement", placement, *extra))
    mig: str = done["instance"]["migUUID"]
    return mig


def _node(cli: Cli) -> dict[str, str]:
    """Two instances of one pod (containers 0 and 1, one with a pod UID), one of another pod,
    an Idle one and an Unmanaged one on GPU 1."""
    return {
        "train0": _allocate(cli, "team-a/train-1", "2g.20gb", "0", "--pod-uid", UID),
        "train1": _allocate(
            cli, "team-a/train-1", "1g.10gb", "2", "--pod-uid", UID, "--container-index", "1"
        ),
        "infer": allocated(cli, "team-b/infer-1", "1g.10gb", "3"),
        "idle": idle(cli, "team-b/old", "1g.10gb", "4"),
        "unmanaged": sim_create(cli, "3g.40gb", "4", gpu="1")["migUUID"],
    }


def _rows(cli: Cli, *args: str, output: str | None = None) -> list[list[str]]:
    ran = cli("list", "--no-headers", *args, output=output)
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    return [line.split() for line in ran.stdout.splitlines()]


def _listed(cli: Cli, *args: str) -> list[str]:
    return sorted(i["migUUID"] for i in ok(cli.json("list", *args))["instances"])


# --- -o wide ---------------------------------------------------------------------------------


def test_wide_adds_columns_and_fits_the_width(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    migs = _node(cli)
    monkeypatch.setenv("COLUMNS", "200")
    ran = cli("list", output="wide")
    assert ran.exit_code == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert max(len(line) for line in lines) <= 200
    header = next(line for line in lines if "MIG UUID" in line)
    for column in ("GI", "CI", "AGE", "POD UID", "PROCESSES", "CDI DEVICE", "OWNER"):
        assert column in header, column
    assert UID in ran.stdout
    assert "team-a/train-1[0/0]" in ran.stdout and "team-a/train-1[1/0]" in ran.stdout
    assert "team-b/infer-1[0/0]" in ran.stdout  # wide always shows the slot
    # The whole CDI device is there, folded onto more lines where 200 columns run out.
    device = ok(cli.json("show", migs["infer"]))["cdiDevice"]
    joined = "".join(line.split()[-1] for line in lines if line.strip())
    assert device in joined


def test_wide_piped_without_columns_keeps_each_instance_on_one_line(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    migs = _node(cli)
    monkeypatch.delenv("COLUMNS", raising=False)
    ran = cli("list", output="wide")
    device = ok(cli.json("show", migs["train0"]))["cdiDevice"]
    line = next(x for x in ran.stdout.splitlines() if migs["train0"] in x)
    assert device in line and UID in line and "none" in line.split()


def test_wide_is_the_plain_table_for_other_results(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    for args in (["profiles", "--gpu", "0"], ["show", mig], ["doctor"]):
        assert cli(*args, output="wide").stdout == cli(*args, output="table").stdout, args


def test_wide_release_and_reclaim_tables(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    mig = _allocate(cli, "ns/p", "1g.10gb", "0", "--pod-uid", UID)
    released = cli("release", "--mig-uuid", mig, output="wide")
    assert released.exit_code == 0, released.stderr
    assert "CDI DEVICE" in released.stdout and "AGE" in released.stdout
    assert max(len(line) for line in released.stdout.splitlines()) <= 200
    plain = cli("reclaim", "--mig-uuid", mig, "--dry-run")
    wide = cli("reclaim", "--mig-uuid", mig, "--dry-run", output="wide")
    assert "CDI DEVICE" in wide.stdout and "CDI DEVICE" not in plain.stdout


def test_json_is_the_same_whatever_the_table(cli: Cli) -> None:
    migs = _node(cli)
    found = {i["migUUID"]: i for i in ok(cli.json("list"))["instances"]}
    active, idle_one, unmanaged = (
        found[migs["infer"]],
        found[migs["idle"]],
        found[migs["unmanaged"]],
    )
    assert active["createdAt"] and active["updatedAt"] and active["idleSince"] is None
    assert idle_one["idleSince"] and idle_one["createdAt"]
    assert (unmanaged["createdAt"], unmanaged["updatedAt"], unmanaged["idleSince"]) == (
        None,
        None,
        None,
    )
    assert found[migs["train1"]]["owner"]["containerIndex"] == 1


# --- --no-headers and AGE ----------------------------------------------------------------------


def test_no_headers_is_one_instance_a_line(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    migs = _node(cli)
    monkeypatch.setenv("COLUMNS", "80")  # never cut, even in a narrow terminal
    for output in (None, "wide"):
        ran = cli("list", "--no-headers", output=output)
        lines = ran.stdout.splitlines()
        assert len(lines) == len(migs), ran.stdout
        assert sorted(line.split()[1] for line in lines) == sorted(migs.values())
        assert all(line == line.rstrip() for line in lines)
        assert "MIG UUID" not in ran.stdout and "MIG instances" not in ran.stdout
        widths = {len(line.split()) for line in lines}
        assert len(widths) == 1, lines  # the same number of fields on every line (awk)
    assert "GPU 0" not in ran.stdout
    empty = cli("list", "--no-headers", "--state", "Error")
    assert (empty.exit_code, empty.stdout) == (0, "")


def test_age_comes_from_the_nodes_clock(cli: Cli) -> None:
    active = allocated(cli, "ns/a", "1g.10gb", "0")
    released = allocated(cli, "ns/b", "1g.10gb", "1")
    unmanaged = sim_create(cli, "1g.10gb", "0", gpu="1")["migUUID"]
    sim(cli, "clock", "--advance", "24h")
    ok(cli.json("release", "--mig-uuid", released))
    sim(cli, "clock", "--advance", "3h")
    age = {row[1]: row[-1] for row in _rows(cli)}
    # An Active instance counts from its creation, an Idle one from when it went Idle.
    assert age == {active: "1d3h", released: "3h", unmanaged: "-"}
    wide = {row[1]: row[8] for row in _rows(cli, output="wide")}
    assert wide == age


def test_owner_slot_only_where_a_pod_holds_several(cli: Cli) -> None:
    migs = _node(cli)
    owner = {row[1]: row[7] for row in _rows(cli)}
    assert owner[migs["train0"]] == "team-a/train-1[0/0]"
    assert owner[migs["train1"]] == "team-a/train-1[1/0]"
    assert owner[migs["infer"]] == "team-b/infer-1"
    assert owner[migs["idle"]] == "-"


# --- filters --------------------------------------------------------------------------------


def test_filters_combine(cli: Cli) -> None:
    migs = _node(cli)
    assert _listed(cli, "--pod", "team-a/train-1") == sorted([migs["train0"], migs["train1"]])
    assert _listed(cli, "--pod", "team-a/train-1", "--profile", "1g.10gb") == [migs["train1"]]
    assert _listed(cli, "--profile", "1g.10gb") == sorted(
        [migs["train1"], migs["infer"], migs["idle"]]
    )
    assert _listed(cli, "--state", "idle", "--state", "UNMANAGED") == sorted(
        [migs["idle"], migs["unmanaged"]]
    )
    assert _listed(cli, "--state", "Idle", "--state", "Unmanaged", "--gpu", "1") == [
        migs["unmanaged"]
    ]
    assert _listed(cli, "--state", "Active", "--profile", "2g.20gb") == [migs["train0"]]
    assert _listed(cli, "--pod", "team-b/old") == []  # Idle: no owner any more
    assert _listed(cli, "--pod", "team-a/train-1", "--state", "Idle") == []
    assert _listed(cli, "--profile", "7g.80gb") == []


def test_a_filter_that_matches_nothing_is_an_empty_list(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    _node(cli)
    monkeypatch.setenv("COLUMNS", "200")
    ran = cli("list", "--pod", "nobody/here")
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.startswith("no MIG instances")


@pytest.mark.parametrize("pod", ["bad", "a/b/c", "/name", "Upper/name", ""])
def test_a_malformed_pod_is_a_usage_error(cli: Cli, pod: str) -> None:
    ran = cli("list", "--pod", pod)
    assert ran.exit_code == 2, (ran.stdout, ran.stderr)
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hamimig: error: "), ran.stderr
    doc = cli.json("list", "--pod", pod).json()
    assert (doc["kind"], doc["error"]["code"]) == ("Error", "usage")
