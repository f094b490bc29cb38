"""Stale specs never outlive their slot.

When a destroyed instance's spec cannot be removed, its removal is queued and the spec stays
published; the next instance at that slot gets the same GI and CI IDs from the driver, so the
stale spec's capability device nodes would be the new tenant's. Before any creation every
queued removal is retried, and while one still queued names the target GPU's device node the
allocation is refused before any NVML call (exit 4).
"""

from __future__ import annotations

from typing import Any

from tests.support.cdi import spec_path
from tests.support.cli import Cli, alloc, idle, ok, refused, sim
from tests.support.node import live
from tests.support.nvml import MUTATING_NVML, calls

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
