"""A pod snapshot cannot be from the future, one Pod is not a list, and an old list is said.

A `--pods` file whose modification time is ahead of the clock (the clock stepped back, a copy
that kept its mtime) would read as newer than every record, so a pod allocated after the list
was really taken would look gone. A bare `kind: Pod` document says nothing of the node's other
pods. A list older than 5 minutes may miss a hand-out by HAMi's plugin.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from tests.support.cli import Cli, allocated, idle, ok, refused
from tests.support.pods import PodsFile, kube_pod
from tests.support.unchanged import Unchanged

COMMANDS = [
    ["recover"],
    ["adopt", "--exclusive-owner"],
    ["reconcile"],
    ["allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb"],
    ["reclaim", "--gpu", "0", "--all-idle"],
]
IDS = [c[0] for c in COMMANDS]


def aged(path: str, seconds: float) -> str:
    """`path` with a modification time `seconds` in the past (negative: the future)."""
    when = time.time() - seconds
    os.utime(path, (when, when))
    return path


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_pod_list_from_the_future_is_refused(
    cli: Cli, pods_file: PodsFile, command: list[str]
) -> None:
    allocated(cli, "ns/p", "1g.10gb", "0")
    idle(cli, "ns/q", "1g.10gb", "1")
    pods = aged(pods_file(kube_pod("ns/p")), -600)
    before = Unchanged(cli)
    for dry in ([], ["--dry-run"]):
        message = refused(cli.json(*command, "--pods", pods, *dry), 5, "unverifiable")
        assert "ahead of this node's clock" in message
        times = re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", message)
        assert len(times) == 2 and times[0] > times[1]  # the list's time, then the clock's
    before.check()


def test_a_few_seconds_ahead_is_clock_granularity(cli: Cli, pods_file: PodsFile) -> None:
    pods = aged(pods_file(), -3)
    ok(cli.json("recover", "--pods", pods))


def test_doctor_fails_on_a_pod_list_from_the_future(cli: Cli, pods_file: PodsFile) -> None:
    ran = cli.json("doctor", "--pods", aged(pods_file(), -600))
    checks = {c["name"]: c for c in ran.json()["checks"]}
    assert checks["recovery/pods"]["status"] == "fail"
    assert "ahead of this node's clock" in checks["recovery/pods"]["message"]


@pytest.mark.parametrize("command", [*COMMANDS, ["doctor"]], ids=[*IDS, "doctor"])
def test_one_pod_is_not_a_pod_list(cli: Cli, command: list[str]) -> None:
    path = cli.state_dir.parent / "pod.json"
    path.write_text(json.dumps(kube_pod("ns/p")))
    before = Unchanged(cli)
    ran = cli.json(*command, "--pods", str(path))
    if command[0] == "doctor":
        checks = {c["name"]: c for c in ran.json()["checks"]}
        assert "is a single Pod" in checks["recovery/pods"]["message"]
    else:
        message = refused(ran, 2, "usage")
        assert "is a single Pod, not the node's pod list" in message
    before.check()


@pytest.mark.parametrize("command", [["recover"], ["adopt", "--exclusive-owner"], ["reconcile"]])
def test_an_old_pod_list_is_warned_about(cli: Cli, pods_file: PodsFile, command: list[str]) -> None:
    pods = aged(pods_file(), 400)
    data = ok(cli.json(*command, "--pods", pods))
    [warning] = [w for w in data.get("warnings", []) if w["file"].endswith(os.path.basename(pods))]
    assert "was taken 6m" in warning["reason"] and "at most 5m old" in warning["reason"]
    table = cli(*command, "--pods", pods)
    assert table.exit_code == 0
    assert "was taken 6m" in " ".join((table.stdout + table.stderr).split())
    fresh = ok(cli.json(*command, "--pods", pods_file()))
    assert not [w for w in fresh.get("warnings", []) if "was taken" in w["reason"]]


def test_doctor_warns_about_an_old_pod_list(cli: Cli, pods_file: PodsFile) -> None:
    ran = cli.json("doctor", "--pods", aged(pods_file(), 400))
    checks = {c["name"]: c for c in ran.json()["checks"]}
    assert checks["recovery/pods"]["status"] == "warn"
    assert "was taken 6m" in checks["recovery/pods"]["message"]
