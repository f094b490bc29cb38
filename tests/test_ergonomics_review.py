"""What a review of the ergonomics work found, each pinned: `--no-headers` keeps STATE one word,
a profile filter that names nothing is refused, a release dry run shows the idle clock it would
start, an allocation in flight blocks a reclaim window as Creating (not as an orphan), and an
owner that Kubernetes could not have named is refused in records and in pod lists."""

from __future__ import annotations

import json

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
    assert "Active" in wide.stdout.split() and "yes" in wide.stdout.split()


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
