"""A dry run gives the real run's verdict.

On a node the real run refuses, each mutating command's `--dry-run` exits with the same code
(2, 3, 5 or 6) and the same error, carried on its plan object (`kind` the command's,
`dryRun: true`, `error`) rather than `kind: Error`, and it changes nothing: the state and CDI
directories, the GI/CI layout and the mutating NVML calls are as they were. Where the engine can
plan past the refusal (an unsafe node, recovery's collected refusals), the object holds that
plan and the table shows it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.cdi import spec_path
from tests.support.cli import (
    PLAN_KINDS,
    Cli,
    alloc,
    allocated,
    idle,
    ok,
    refused,
    sim,
)
from tests.support.records import record_path
from tests.support.unchanged import Unchanged

UNKNOWN = "MIG-00000000-0000-0000-0000-000000000000"


@dataclass
class Node:
    """An Active instance (ns/a, GPU 0 at 0) and an Idle one (GPU 0 at 1)."""

    cli: Cli
    active: str
    idle: str


@pytest.fixture
def node(cli: Cli) -> Node:
    return Node(cli, allocated(cli, "ns/a", "1g.10gb", "0"), idle(cli, "ns/b", "1g.10gb", "1"))


def every_command(n: Node) -> list[tuple[str, ...]]:
    """One line of each mutating command that the node's state alone decides."""
    return [
        ("allocate", "--pod", "ns/q", "--gpu", "0", "--profile", "1g.10gb"),
        ("release", "--mig-uuid", n.active),
        ("reclaim", "--mig-uuid", n.idle),
        ("forget", n.idle[:13]),  # a prefix: an unreadable record may be the one it names
        ("recover", "--assume-no-pods"),
        ("adopt", "--exclusive-owner", "--assume-no-pods"),
        ("reconcile",),
    ]


def unsafe_state_dir(n: Node) -> None:
    os.chmod(n.cli.state_dir, 0o777)


def loose_record(n: Node) -> None:
    os.chmod(record_path(n.cli, n.active), 0o666)


def unreadable_record(n: Node) -> None:
    bad = n.cli.state_dir / f"hami-owned-mig-{'0' * 64}.json"
    bad.write_text("{broken")
    bad.chmod(0o600)


def same_verdict(cli: Cli, args: tuple[str, ...], exit_code: int, code: str) -> Any:
    """The real run refuses with `exit_code`; its dry run gives the same code and error on
    its plan object, in JSON and in the table (the same error line), and changes nothing.
    Returns the dry run's JSON object."""
    before = Unchanged(cli)
    dry = cli.json(*args, "--dry-run")
    before.check()
    table = cli(*args, "--dry-run")
    before.check()
    real = cli.json(*args)
    message = refused(real, exit_code, code)
    said = refused(dry, exit_code, code, PLAN_KINDS[args[0]])
    assert said.replace(" --dry-run", "") == message, args  # a suggested line replays it
    assert set(dry.json()["error"]) == set(real.json()["error"]), args  # blockers too
    assert table.exit_code == exit_code, (table.stdout, table.stderr)
    line = table.stderr.splitlines()[-1].replace(" --dry-run", "")
    assert line == cli(*args).stderr.splitlines()[-1]
    return dry.json()


@pytest.mark.parametrize("make", [unsafe_state_dir, loose_record, unreadable_record])
def test_every_command_dry_runs_to_the_real_refusal(
    node: Node, make: Callable[[Node], None]
) -> None:
    make(node)
    for args in every_command(node):
        same_verdict(node.cli, args, 5, "unverifiable")


@pytest.mark.parametrize(
    "args",
    [("forget", UNKNOWN), ("release", "--mig-uuid", UNKNOWN), ("reclaim", "--mig-uuid", UNKNOWN)],
    ids=["forget", "release", "reclaim"],
)
def test_an_unsafe_node_comes_before_what_planning_finds_later(
    node: Node, args: tuple[str, ...]
) -> None:
    """The real run refuses an unsafe node (5) before it looks the instance up; a dry run that
    planned on past that refusal and then found no such instance once said 6."""
    unsafe_state_dir(node)
    assert "0777" in same_verdict(node.cli, args, 5, "unverifiable")["error"]["message"]


def test_an_unsafe_node_still_shows_the_whole_plan(node: Node) -> None:
    unsafe_state_dir(node)
    data = same_verdict(node.cli, ("reclaim", "--mig-uuid", node.idle), 5, "unverifiable")
    assert [i["migUUID"] for i in data["reclaimed"]] == [node.idle]
    assert "0777" in data["warnings"][0]["reason"]
    table = node.cli("reclaim", "--mig-uuid", node.idle, "--dry-run")
    assert "would reclaim" in table.stdout and node.idle in table.stdout
    assert table.stderr.startswith("hamimig: error: unsafe node: ")


def test_recovery_refusals_come_with_the_plan_they_stop(node: Node) -> None:
    sim(node.cli, "busy", "--mig-uuid", node.idle)  # processes nobody accounts for
    args = ("recover", "--assume-no-pods")
    data = same_verdict(node.cli, args, 5, "unverifiable")
    assert node.idle in data["error"]["message"]
    assert [a["migUUID"] for a in data["actions"]] == [node.active]
    assert "summary" in data


@pytest.mark.parametrize(
    ("case", "exit_code", "code"),
    [
        ("allocate-blocked", 3, "conflict"),
        ("reclaim-active", 3, "conflict"),
        ("forget-active", 3, "conflict"),
        ("release-nobody", 6, "not-found"),
        ("reclaim-unknown", 6, "not-found"),
        ("forget-unknown", 6, "not-found"),
        ("allocate-bad-profile", 2, "usage"),
        ("release-both", 2, "usage"),
        ("reclaim-no-selector", 2, "usage"),
        ("forget-nothing", 2, "usage"),
        ("recover-no-pods", 2, "usage"),
        ("adopt-no-opt-in", 2, "usage"),
        ("reconcile-empty-pods", 2, "usage"),
        ("lock-timeout", 2, "usage"),
    ],
)
def test_refusals_before_any_plan_keep_their_code(
    node: Node, case: str, exit_code: int, code: str
) -> None:
    n = node
    args = {
        "allocate-blocked": ("allocate", "--pod", "ns/q", "--gpu", "0", "--profile",
                             "1g.10gb", "--placement", "0"),
        "reclaim-active": ("reclaim", "--mig-uuid", n.active),
        "forget-active": ("forget", n.active),
        "release-nobody": ("release", "--pod", "ns/nobody"),
        "reclaim-unknown": ("reclaim", "--mig-uuid", UNKNOWN),
        "forget-unknown": ("forget", UNKNOWN),
        "allocate-bad-profile": ("allocate", "--pod", "ns/q", "--gpu", "0", "--profile",
                                 "9g.99gb"),
        "release-both": ("release", "--pod", "ns/a", "--mig-uuid", n.active),
        "reclaim-no-selector": ("reclaim", "--gpu", "0"),
        "forget-nothing": ("forget",),
        "recover-no-pods": ("recover",),
        "adopt-no-opt-in": ("adopt", "--assume-no-pods"),
        "reconcile-empty-pods": ("reconcile", "--pods", ""),
        "lock-timeout": ("release", "--mig-uuid", n.active, "--lock-timeout", "-1"),
    }[case]  # fmt: skip
    data = same_verdict(n.cli, args, exit_code, code)
    assert set(data) == {"kind", "dryRun", "error"}  # no plan to show


def test_a_dry_run_warns_of_the_queued_removal_the_real_run_may_refuse_on(cli: Cli) -> None:
    """The real allocate first retries queued CDI removals, and refuses (exit 4) while one
    still names the target GPU's device node; a dry run retries nothing, so it cannot know
    whether the retry fails again: it warns, naming the spec."""
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    sim(cli, "fault", "add", "--op", "cdi.remove", "--error", "EIO", "--times", "1000")
    ok(cli.json("reclaim", "--mig-uuid", mig))  # destroyed, its spec still published
    before = Unchanged(cli)
    data = ok(alloc(cli, "ns/new", "1g.10gb", "0", "0", "--dry-run"))
    before.check()
    [warning] = data["warnings"]
    assert warning["file"] == str(spec_path(cli, mig))
    assert "/dev/nvidia0" in warning["reason"] and "exit 4" in warning["reason"]
    assert ok(alloc(cli, "ns/new", "1g.10gb", "0", "1", "--dry-run")).get("warnings") is None
    refused(alloc(cli, "ns/new", "1g.10gb", "0"), 4, "hardware")
