"""Dry runs on every mutating command, and refusals that name what is in the way.

A dry run plans with the same planner as the real run and reports the plan: `allocate
--dry-run` shows the reuse, reclaim and create decisions, `release --dry-run` the instances
that would go Idle. No dry run takes the node lock: it reads a snapshot, creates neither the
state directory nor the lock file, and leaves the state and CDI directories byte for byte as
they were, the GI/CI layout too, with no mutating NVML call.

A refused allocation (exit 3) lists, per candidate placement, the instances that block it, in
its one-line message and in the JSON error's `blockers`; so does a refused `reclaim --gpu G
--placement P`. Other errors keep their JSON as it was: `code` and `message` only.
"""

from __future__ import annotations

from typing import Any

import pytest

from hamimig.engine.node import Node
from hamimig.errors import HamimigError
from hamimig.store.lock import LOCK_NAME, NodeLock
from tests.support.cli import (
    Cli,
    allocate_args,
    allocated,
    idle,
    ok,
    refused,
    sim,
    sim_create,
    state_of,
)
from tests.support.files import tree
from tests.support.node import gpus
from tests.support.nvml import mutating_calls


def snapshot(cli: Cli) -> tuple[Any, ...]:
    """Everything a dry run must leave as it was: every file below the state and CDI
    directories (lock file included) byte for byte with its mode, whether the state directory
    exists at all, the GI/CI layout, and the count of mutating NVML calls."""
    return (
        tree(cli.state_dir, cli.cdi_dir),
        cli.state_dir.exists(),
        cli.cdi_dir.exists(),
        gpus(cli),
        mutating_calls(cli),
    )


def dry(cli: Cli, *args: str) -> dict[str, Any]:
    """A dry run that must succeed and change nothing; returns its JSON."""
    before = snapshot(cli)
    data = ok(cli.json(*args, "--dry-run"))
    assert data["dryRun"] is True
    assert snapshot(cli) == before, args
    return data


def without_lock_file(cli: Cli) -> None:
    """A node whose lock file is gone (hamimig never unlinks it; a fresh node has none)."""
    (cli.state_dir / LOCK_NAME).unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# allocate --dry-run


def test_allocate_dry_run_on_a_fresh_node_shows_the_create_and_writes_nothing(cli: Cli) -> None:
    data = dry(cli, *allocate_args("ns/p", "1g.10gb"))
    assert data["kind"] == "Allocation"
    assert (data["created"], data["reused"], data["reclaimed"]) == (True, False, [])
    inst = data["instance"]
    assert inst["migUUID"] is None
    assert (inst["gpuInstanceID"], inst["computeInstanceID"], inst["cdiDevice"]) == (None,) * 3
    assert inst["state"] == "Creating"
    assert inst["placement"] == {"start": 0, "size": 1}
    assert (inst["owner"]["namespace"], inst["owner"]["name"]) == ("ns", "p")
    assert not cli.state_dir.exists()  # no state directory, so no lock file either
    real = ok(cli.json(*allocate_args("ns/p", "1g.10gb")))
    assert real["dryRun"] is False and real["created"] is True
    assert real["instance"]["placement"] == inst["placement"]
    assert real["instance"]["migUUID"].startswith("MIG-")


def test_allocate_dry_run_shows_the_exact_reuse_the_real_run_makes(cli: Cli) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "3")
    without_lock_file(cli)
    data = dry(cli, *allocate_args("ns/new", "1g.10gb"))
    assert (data["created"], data["reused"], data["reclaimed"]) == (False, True, [])
    inst = data["instance"]
    assert inst["migUUID"] == mig
    assert inst["state"] == "Active"  # as the real run will report it
    assert inst["owner"]["name"] == "new"
    assert inst["cdiDevice"]
    assert not (cli.state_dir / LOCK_NAME).exists()
    assert state_of(cli, mig) == "Idle"
    real = ok(cli.json(*allocate_args("ns/new", "1g.10gb")))
    assert real["reused"] is True
    assert real["instance"]["migUUID"] == mig
    assert real["instance"]["cdiDevice"] == inst["cdiDevice"]


def test_allocate_dry_run_shows_the_reclaims_and_the_create(cli: Cli) -> None:
    first = idle(cli, "ns/a", "1g.10gb", "2")
    second = idle(cli, "ns/b", "1g.10gb", "3")
    without_lock_file(cli)
    data = dry(cli, *allocate_args("ns/big", "2g.20gb", "2"))
    assert data["created"] is True and data["reused"] is False
    assert sorted(data["reclaimed"]) == sorted([first, second])
    assert data["instance"]["placement"] == {"start": 2, "size": 2}
    assert data["instance"]["migUUID"] is None
    assert {state_of(cli, first), state_of(cli, second)} == {"Idle"}
    real = ok(cli.json(*allocate_args("ns/big", "2g.20gb", "2")))
    assert real["reclaimed"] == data["reclaimed"]  # the same steps, in the same order


def test_allocate_dry_run_chooses_the_placement_the_real_run_chooses(cli: Cli) -> None:
    """Without --placement the planner picks the placement reclaiming the fewest Idle ones."""
    allocated(cli, "ns/keep", "1g.10gb", "0")
    reclaimable = idle(cli, "ns/gone", "1g.10gb", "4")
    allocated(cli, "ns/keep2", "1g.10gb", "2")
    data = dry(cli, *allocate_args("ns/q", "3g.40gb"))
    assert data["instance"]["placement"] == {"start": 4, "size": 4}
    assert data["reclaimed"] == [reclaimable]
    real = ok(cli.json(*allocate_args("ns/q", "3g.40gb")))
    assert real["instance"]["placement"] == data["instance"]["placement"]
    assert real["reclaimed"] == data["reclaimed"]


def test_allocate_dry_run_for_a_slot_that_holds_its_instance_is_unchanged(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    data = dry(cli, *allocate_args("ns/p", "1g.10gb"))
    assert (data["created"], data["reused"]) == (False, False)
    assert data["instance"]["migUUID"] == mig


def test_allocate_dry_run_refuses_what_the_real_run_refuses(cli: Cli) -> None:
    allocated(cli, "ns/a", "2g.20gb", "0")
    before = snapshot(cli)
    ran = cli.json(*allocate_args("ns/b", "2g.20gb", "0"), "--dry-run")
    refused(ran, 3, "conflict")
    assert ran.json()["error"]["blockers"][0]["placement"] == {"start": 0, "size": 2}
    assert snapshot(cli) == before


def test_allocate_dry_run_table_says_nothing_changed(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "2")
    ran = cli(*allocate_args("ns/big", "2g.20gb", "2"), "--dry-run")
    assert ran.exit_code == 0, ran.stderr
    assert "would create: a new instance (2g.20gb at 2:2 on GPU 0) for ns/big" in ran.stdout
    assert "dry run: nothing changed" in ran.stdout
    assert f"would reclaim first: {mig}" in ran.stdout


# --------------------------------------------------------------------------------------------
# release --dry-run


def test_release_dry_run_lists_what_would_go_idle_and_changes_nothing(cli: Cli) -> None:
    one = allocated(cli, "ns/p", "1g.10gb", "0")
    args = allocate_args("ns/p", "1g.10gb", "1", gpu="1")
    two = ok(cli.json(*args, "--device-index", "1"))["instance"]["migUUID"]
    allocated(cli, "ns/other", "1g.10gb", "2")
    without_lock_file(cli)
    data = dry(cli, "release", "--pod", "ns/p")
    assert data["kind"] == "Release"
    released = data["released"]
    assert [i["migUUID"] for i in released] == sorted([one, two])
    assert {i["state"] for i in released} == {"Idle"}
    assert all(i["owner"] is None for i in released)
    assert state_of(cli, one) == state_of(cli, two) == "Active"
    assert not (cli.state_dir / LOCK_NAME).exists()
    real = ok(cli.json("release", "--pod", "ns/p"))
    assert real["dryRun"] is False
    assert [i["migUUID"] for i in real["released"]] == [i["migUUID"] for i in released]


def test_release_dry_run_by_mig_uuid(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    data = dry(cli, "release", "--mig-uuid", mig)
    assert [(i["migUUID"], i["state"]) for i in data["released"]] == [(mig, "Idle")]
    ran = cli("release", "--mig-uuid", mig, "--dry-run")
    assert ran.exit_code == 0 and "would release (dry run)" in ran.stdout
    assert state_of(cli, mig) == "Active"


def test_release_dry_run_refuses_as_the_real_run_does(cli: Cli) -> None:
    allocated(cli, "ns/p", "1g.10gb", "0")
    before = snapshot(cli)
    refused(cli.json("release", "--pod", "ns/nobody", "--dry-run"), 6, "not-found")
    assert snapshot(cli) == before


# --------------------------------------------------------------------------------------------
# No dry run takes the node lock or creates its file


def _dry_runs(cli: Cli, mig: str) -> list[list[str]]:
    return [
        allocate_args("ns/new", "1g.10gb"),
        ["release", "--pod", "ns/p"],
        ["reclaim", "--gpu", "0", "--all-idle"],
        ["reconcile"],
        ["recover", "--assume-no-pods"],
        ["adopt", "--assume-no-pods", "--exclusive-owner"],
        ["forget", mig],
    ]


def test_dry_runs_run_while_another_process_holds_the_lock(cli: Cli) -> None:
    allocated(cli, "ns/p", "1g.10gb", "0")
    mig = idle(cli, "ns/done", "1g.10gb", "3")
    with NodeLock(cli.state_dir, timeout=1.0):
        for argv in _dry_runs(cli, mig):
            before = snapshot(cli)
            ran = cli.json(*argv, "--dry-run", "--lock-timeout", "0")
            assert ran.exit_code == 0, (argv, ran.stdout)
            assert ran.json()["dryRun"] is True, argv
            assert snapshot(cli) == before, argv
        # The real runs still wait for it.
        for argv in _dry_runs(cli, mig):
            ran = cli.json(*argv, "--lock-timeout", "0")
            assert ran.exit_code == 7, (argv, ran.stdout)


def test_dry_runs_never_create_the_lock_file(cli: Cli) -> None:
    allocated(cli, "ns/p", "1g.10gb", "0")
    mig = idle(cli, "ns/done", "1g.10gb", "3")
    sim_create(cli, "1g.10gb", "5")
    without_lock_file(cli)
    for argv in _dry_runs(cli, mig):
        dry(cli, *argv)
        assert not (cli.state_dir / LOCK_NAME).exists(), argv


def test_dry_runs_on_a_fresh_node_create_no_directory(cli: Cli) -> None:
    for argv in (
        allocate_args("ns/new", "1g.10gb"),
        ["reclaim", "--gpu", "0", "--all-idle"],
        ["reconcile"],
        ["recover", "--assume-no-pods"],
    ):
        dry(cli, *argv)
    assert not cli.state_dir.exists() and not cli.cdi_dir.exists()


def test_a_read_only_node_refuses_the_lock() -> None:
    """The belt under the braces: a dry run's node never hands out the lock (exit 1)."""
    with pytest.raises(HamimigError, match="dry run"):
        Node(read_only=True).lock()


# --------------------------------------------------------------------------------------------
# Refusals name what is in the way


def _blockers(ran: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ran.json()["error"]["blockers"]
    return found


def test_a_refused_allocation_lists_the_blockers_of_every_candidate_placement(cli: Cli) -> None:
    active = allocated(cli, "ns/train", "2g.20gb", "0")
    orphan = sim_create(cli, "1g.10gb", "4", no_ci=True)
    unmanaged = sim_create(cli, "1g.10gb", "6")
    before = snapshot(cli)
    ran = cli.json(*allocate_args("ns/big", "3g.40gb"))
    message = refused(ran, 3, "conflict")
    assert snapshot(cli) == before
    blockers = _blockers(ran)
    assert [b["placement"] for b in blockers] == [
        {"start": 0, "size": 4},
        {"start": 4, "size": 4},
    ]
    (first,) = blockers[0]["instances"]
    assert (first["migUUID"], first["state"]) == (active, "Active")
    assert (first["owner"]["namespace"], first["owner"]["name"]) == ("ns", "train")
    second = {i["state"]: i for i in blockers[1]["instances"]}
    assert set(second) == {"OrphanGI", "Unmanaged"}
    assert second["OrphanGI"]["migUUID"] is None
    assert second["OrphanGI"]["gpuInstanceID"] == orphan["gpuInstanceID"]
    assert second["OrphanGI"]["owner"] is None
    assert second["Unmanaged"]["migUUID"] == unmanaged["migUUID"]
    assert second["Unmanaged"]["owner"] is None
    assert f"placement 0:4 is blocked by {active} (Active, ns/train)" in message
    assert f"GI {orphan['gpuInstanceID']} (OrphanGI)" in message
    assert f"{unmanaged['migUUID']} (Unmanaged)" in message


def test_a_refused_allocation_is_one_line_on_stderr_naming_its_blockers(cli: Cli) -> None:
    active = allocated(cli, "ns/train", "2g.20gb", "0")
    before = snapshot(cli)
    ran = cli(*allocate_args("ns/big", "7g.80gb"))
    assert ran.exit_code == 3
    assert ran.stdout == ""
    lines = ran.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("hamimig: error: no placement for this profile is free")
    assert f"placement 0:8 is blocked by {active} (Active, ns/train)" in lines[0]
    assert snapshot(cli) == before


def test_a_refused_requested_placement_names_its_blockers(cli: Cli) -> None:
    active = allocated(cli, "ns/a", "1g.10gb", "2")
    orphan = sim_create(cli, "1g.10gb", "3", no_ci=True)
    before = snapshot(cli)
    ran = cli.json(*allocate_args("ns/b", "2g.20gb", "2"))
    message = refused(ran, 3, "conflict")
    assert snapshot(cli) == before
    (entry,) = _blockers(ran)
    assert entry["placement"] == {"start": 2, "size": 2}
    found = {i["state"]: i for i in entry["instances"]}
    assert found["Active"]["migUUID"] == active
    assert found["Active"]["owner"]["name"] == "a"
    assert found["OrphanGI"]["migUUID"] is None
    assert found["OrphanGI"]["gpuInstanceID"] == orphan["gpuInstanceID"]
    assert f"is Active ({active}) held by ns/a" in message


def test_a_busy_idle_instance_is_a_blocker_marked_busy(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "2g.20gb", "0")
    sim(cli, "busy", "--mig-uuid", mig)
    ran = cli.json(*allocate_args("ns/b", "2g.20gb", "0"))
    refused(ran, 3, "conflict")
    (entry,) = _blockers(ran)
    (inst,) = entry["instances"]
    assert (inst["migUUID"], inst["state"], inst["busy"], inst["owner"]) == (
        mig,
        "Idle",
        True,
        None,
    )


def test_a_refused_reclaim_window_names_its_blockers(cli: Cli) -> None:
    active = allocated(cli, "ns/a", "1g.10gb", "0")
    spare = idle(cli, "ns/b", "1g.10gb", "1")
    unmanaged = sim_create(cli, "1g.10gb", "2")
    before = snapshot(cli)
    for extra in ((), ("--dry-run",)):
        ran = cli.json("reclaim", "--gpu", "0", "--placement", "0:4", *extra)
        message = refused(ran, 3, "conflict")
        assert snapshot(cli) == before
        (entry,) = _blockers(ran)
        assert entry["placement"] == {"start": 0, "size": 4}
        found = {i["migUUID"]: i for i in entry["instances"]}
        assert set(found) == {active, unmanaged["migUUID"]}  # not the Idle one it may take
        assert found[active]["state"] == "Active"
        assert found[active]["owner"]["name"] == "a"
        assert found[unmanaged["migUUID"]]["state"] == "Unmanaged"
        assert spare not in message
        assert f"is Active ({active}) held by ns/a" in message
    ran = cli("reclaim", "--gpu", "0", "--placement", "0:4")
    assert ran.exit_code == 3 and len(ran.stderr.splitlines()) == 1


def test_other_errors_keep_only_code_and_message(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    clash = cli.json(*allocate_args("ns/p", "2g.20gb"))  # a conflict no placement makes
    refused(clash, 3, "conflict")
    assert set(clash.json()["error"]) == {"code", "message"}
    active = cli.json("reclaim", "--mig-uuid", mig)
    refused(active, 3, "conflict")
    assert set(active.json()["error"]) == {"code", "message"}
    missing = cli.json("release", "--pod", "ns/nobody")
    refused(missing, 6, "not-found")
    assert set(missing.json()["error"]) == {"code", "message"}
