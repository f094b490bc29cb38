"""What a review of the ergonomics work found, each pinned: `--no-headers` keeps STATE one word,
a profile filter that names nothing is refused, a release dry run shows the idle clock it would
start, an allocation in flight blocks a reclaim window as Creating (not as an orphan), and an
owner that Kubernetes could not have named is refused in records and in pod lists."""

from __future__ import annotations

import json
import re

import pytest

from hamimig.cli.app import app
from tests.support.cli import Cli, allocated, fault, instances, ok, refused, run_hamimig, sim
from tests.support.pods import PodsFile, kube_pod
from tests.support.records import record_path


def test_no_headers_keeps_state_one_word_when_busy(cli: Cli) -> None:
    mig = allocated(cli, "ns/job", "1g.10gb")
    sim(cli, "busy", "--mig-uuid", mig)
    ran = cli("list", "--no-headers", "--state", "Active")
    (line,) = ran.stdout.splitlines()
    assert line.split()[6] == "Active"
    wide = cli("-o", "wide", "list", "--no-headers")
    assert "Active" in wide.stdout.split() and "1" in wide.stdout.split()  # one process


def test_a_profile_filter_naming_nothing_the_node_offers_is_refused(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb")
    assert "--profile must not be empty" in refused(cli.json("list", "--profile", ""), 2, "usage")
    message = refused(cli.json("list", "--profile", "9g.99gb"), 2, "usage")
    assert "unknown profile '9g.99gb'" in message and "1g.10gb" in message
    assert ok(cli.json("list", "--profile", "7g.80gb"))["instances"] == []  # offered, none made
    assert len(ok(cli.json("list", "--profile", "1g.10gb"))["instances"]) == 1


def test_a_release_dry_run_shows_the_idle_clock_it_would_start(cli: Cli) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb")
    (would,) = ok(cli.json("release", "--mig-uuid", mig, "--dry-run"))["released"]
    assert (would["state"], would["owner"]) == ("Idle", None)
    assert would["idleSince"] is not None
    (done,) = ok(cli.json("release", "--mig-uuid", mig))["released"]
    assert done["idleSince"] >= would["idleSince"]


def test_an_allocation_in_flight_blocks_a_reclaim_window_as_creating(cli: Cli) -> None:
    fault(cli, "nvmlGpuInstanceCreateComputeInstance", action="crash-before")
    ran = run_hamimig(
        *cli.globals(),
        "allocate",
        "--pod",
        "ns/n",
        "--gpu",
        "0",
        "--profile",
        "1g.10gb",
        "--placement",
        "2",
    )
    assert ran.returncode == 137
    listed = [i for i in instances(cli) if i["state"] == "Creating"]
    assert len(listed) == 1
    error = cli.json("reclaim", "--gpu", "0", "--placement", "0:8").json()["error"]
    assert error["code"] == "conflict", error
    (blocked,) = error["blockers"]
    assert [(i["state"], i["owner"]["name"]) for i in blocked["instances"]] == [("Creating", "n")]


def test_a_record_whose_owner_kubernetes_could_not_name_is_refused(cli: Cli) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb")
    path = record_path(cli, mig)
    doc = json.loads(path.read_text())
    doc["hamimig"]["owner"]["name"] = "a\x1b[31mX\nb c"
    path.write_text(json.dumps(doc))
    warnings = ok(cli.json("list"))["warnings"]
    assert any("is not a Kubernetes pod name" in w["reason"] for w in warnings)
    assert "\x1b" not in cli("list").stdout


def test_a_pod_list_with_a_name_kubernetes_could_not_issue_is_refused(
    cli: Cli, pods_file: PodsFile
) -> None:
    pods = pods_file(kube_pod("ns/Trainer_0"))
    message = refused(cli.json("recover", "--pods", pods), 2, "usage")
    assert "metadata.name 'Trainer_0' is not a Kubernetes pod name" in message


def test_below_80_columns_prefixes_stay_whole_and_owners_readable(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(2):
        allocated(cli, f"default/p{n}", "1g.10gb")
    allocated(cli, "team-a/a-very-long-pod-name-0", "1g.10gb")
    for width in (60, 70):
        monkeypatch.setenv("COLUMNS", str(width))
        for ran in (cli("list"), cli("release", "--pod", "default/p0", "--dry-run")):
            lines = ran.stdout.splitlines()
            assert all(len(line) <= width for line in lines), ran.stdout
            shown = re.findall(r"MIG-[0-9a-f-]+", ran.stdout)
            assert shown and all(len(s.replace("-", "")) >= 3 + 8 for s in shown)
            every = [i["migUUID"] for i in instances(cli)]
            for prefix in shown:  # each one unique among the instances, shortened or whole
                assert sum(m.startswith(prefix.rstrip("…")) for m in every) == 1
        listed = cli("list").stdout
        assert "default/p0" in listed
        # The long owner wraps (folded at the column's edge) but is never cut.
        folded = "".join(line.split()[-1] for line in listed.splitlines() if line.strip())
        assert "team-a/a-very-long-pod-name-0" in folded


def test_a_release_shortened_in_its_table_names_the_whole_uuid(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb")
    monkeypatch.setenv("COLUMNS", "80")
    ran = cli("release", "--mig-uuid", mig[:12])
    assert ran.exit_code == 0
    assert f"released {mig}" in ran.stdout


def test_forget_by_prefix_is_refused_while_a_record_cannot_be_read(cli: Cli) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb")
    ok(cli.json("release", "--mig-uuid", mig))
    bad = cli.state_dir / f"hami-owned-mig-{'0' * 64}.json"
    bad.write_text("{broken")
    bad.chmod(0o600)
    message = refused(cli.json("forget", mig[:12], "--dry-run"), 5, "unverifiable")
    assert "cannot be read" in message and "give the whole MIG UUID" in message
    ok(cli.json("forget", mig, "--dry-run"))  # the whole UUID still works


def test_a_mig_uuid_in_capitals_names_the_instance(cli: Cli) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb")
    assert ok(cli.json("show", mig.upper()))["migUUID"] == mig
    (released,) = ok(cli.json("release", "--mig-uuid", mig.upper(), "--dry-run"))["released"]
    assert released["migUUID"] == mig


def test_empty_parts_of_a_reference_are_refused(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb")
    assert "names no digits" in refused(cli.json("show", "MIG-"), 2, "usage")
    assert "empty kind" in refused(cli.json("show", "=mig-" + "0" * 64), 2, "usage")


def test_wide_and_json_count_the_processes_on_an_instance(cli: Cli) -> None:
    busy = allocated(cli, "ns/job", "1g.10gb")
    calm = allocated(cli, "ns/calm", "1g.10gb")
    sim(cli, "busy", "--mig-uuid", busy)
    listed = {i["migUUID"]: i for i in instances(cli)}
    assert (listed[busy]["processes"], listed[busy]["processCount"]) == (True, 1)
    assert (listed[calm]["processes"], listed[calm]["processCount"]) == (False, 0)
    rows = {
        line.split()[1]: line.split()
        for line in cli("-o", "wide", "list", "--no-headers").stdout.splitlines()
    }
    assert rows[busy][-2] == "1" and rows[calm][-2] == "none"
    assert ok(cli.json("show", busy))["processCount"] == 1


def test_completion_never_takes_over_another_line(cli: Cli) -> None:
    """Completion is click's (`_HAMIMIG_COMPLETE`), not a command: `__complete` is an unknown
    command like any other word, and `--version` still answers first."""
    allocated(cli, "ns/a", "1g.10gb")
    state = ["--state-dir", str(cli.state_dir)]
    assert cli.runner.invoke(
        app, [*state, "--version", "__complete", "mig-uuids"]
    ).stdout.startswith("hamimig ")
    after_dashes = cli.runner.invoke(app, [*state, "--", "__complete", "mig-uuids"])
    assert after_dashes.exit_code == 2
    hidden = cli.runner.invoke(app, [*state, "__complete", "mig-uuids"])
    assert (hidden.exit_code, hidden.stdout) == (2, "")
    assert "No such command '__complete'" in hidden.stderr


def test_an_age_ahead_of_the_clock_is_shown_as_invalid(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb")
    sim(cli, "clock", "--set", "2020-01-01T00:00:00Z")
    (line,) = cli("list", "--no-headers").stdout.splitlines()
    assert line.split()[-1] == "<invalid>"
