"""Stale specs never outlive their slot.

When a destroyed instance's spec cannot be removed, its removal is queued and the spec stays
published; the next instance at that slot gets the same GI and CI IDs from the driver, so the
stale spec's capability device nodes would be the new tenant's. Before any creation every
queued removal is retried, and while one still queued names the target GPU's device node the
allocation is refused before any NVML call (exit 4).
"""

from __future__ import annotations

from typing import Any

from hamimig.sim.state import CRASH_EXIT_STATUS
from tests.support.cdi import spec_path
from tests.support.cli import (
    ADOPT_CONFIG,
    Cli,
    alloc,
    allocated,
    configured,
    idle,
    ok,
    refused,
    run_hamimig,
    sim,
)
from tests.support.node import live
from tests.support.nvml import MUTATING_NVML, calls
from tests.support.records import record_path

EIO = ("--op", "cdi.remove", "--error", "EIO", "--times", "1000")


def queued_spec(cli: Cli) -> str:
    """An Idle instance on GPU 0 reclaimed while its spec cannot be removed: destroyed, its
    spec still published and its removal queued."""
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    sim(cli, "fault", "add", *EIO)
    ok(cli.json("reclaim", "--mig-uuid", mig))
    assert spec_path(cli, mig).exists()
    assert live(cli) == []
    return mig


def nvml_mutations(cli: Cli) -> int:
    return sum(calls(cli).get(op, 0) for op in MUTATING_NVML)


def test_a_queued_spec_naming_the_gpu_refuses_a_new_instance_there(cli: Cli) -> None:
    mig = queued_spec(cli)
    before = nvml_mutations(cli)
    message = refused(alloc(cli, "ns/new", "1g.10gb", "0"), 4, "hardware")
    assert str(spec_path(cli, mig)) in message and "/dev/nvidia0" in message
    assert nvml_mutations(cli) == before and live(cli) == []
    # Another GPU's device node is not named: that allocation goes ahead.
    ok(alloc(cli, "ns/other", "1g.10gb", "0", "1"))


def test_the_queued_removal_is_retried_before_the_creation(cli: Cli) -> None:
    mig = queued_spec(cli)
    sim(cli, "fault", "clear")
    made = ok(alloc(cli, "ns/new", "1g.10gb", "0"))
    assert made["created"]
    assert not spec_path(cli, mig).exists()
    assert ok(cli.json("list"))["queuedRemovals"] == []


def test_list_and_doctor_show_the_queued_removal(cli: Cli) -> None:
    mig = queued_spec(cli)
    listed: dict[str, Any] = ok(cli.json("list"))
    [queued] = listed["queuedRemovals"]
    assert queued["migUUID"] == mig and "Input/output error" in queued["lastError"]
    table = cli("list")
    assert "note: the CDI specs of 1 destroyed instance(s) are still published" in " ".join(
        table.stdout.split()
    )
    bare = cli("list", "--no-headers")
    assert mig in bare.stderr and "still published" in bare.stderr
    ran = cli.json("doctor")
    [check] = [c for c in ran.json()["checks"] if c["name"] == "cdi-removal-queue"]
    assert check["status"] == "fail" and "refused" in check["hint"]
    assert ran.exit_code != 0


def test_recover_removes_our_spec_of_an_instance_it_preserves_as_unmanaged(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    record_path(cli, mig).unlink()  # the record goes behind hamimig's back: Unmanaged now
    assert spec_path(cli, mig).exists()
    data = ok(cli.json("recover", "--assume-no-pods"))
    actions = {(a["action"], a["migUUID"]) for a in data["actions"]}
    assert ("preserve-unmanaged", mig) in actions
    assert not spec_path(cli, mig).exists()  # runtimes no longer offer a device not ours
    assert (0, 1, mig) in live(cli)


def test_an_adoption_after_an_interrupted_forget_keeps_the_spec_it_writes(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    sim(cli, "fault", "add", "--op", "cdi.remove", "--action", "crash-before")
    assert run_hamimig(*cli.globals(), "forget", mig).returncode == CRASH_EXIT_STATUS
    assert not record_path(cli, mig).exists()
    assert ok(cli.json("list"))["queuedRemovals"][0]["migUUID"] == mig
    adopting = configured(cli, ADOPT_CONFIG)
    data = ok(adopting.json("recover", "--adopt", "--assume-no-pods"))
    assert ("adopt-idle", mig) in {(a["action"], a["migUUID"]) for a in data["actions"]}
    assert spec_path(cli, mig).exists() and record_path(cli, mig).exists()
    assert ok(cli.json("list"))["queuedRemovals"] == []
