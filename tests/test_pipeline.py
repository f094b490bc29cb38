"""The mutation pipeline: planners return plain steps, and the executor is the one place that
writes or removes ownership records, each move checked against the transition table."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from hamimig.engine.states import TRANSITIONS
from hamimig.engine.steps import Step
from hamimig.store.records import Record, RecordStore
from tests.support.cli import Cli

ENGINE = Path(__file__).parent.parent / "hamimig" / "engine"


def _record_moves(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, Any]]:
    """Wrap the record store: every write and removal is logged as (caller module, state
    before, state after); states as on disk, None for no record."""
    moves: list[tuple[str, Any, Any]] = []
    write, remove = RecordStore.write, RecordStore.remove

    def before(store: RecordStore, mig_uuid: str) -> Any:
        old = store.load()[0].get(mig_uuid)
        return None if old is None else old.state

    def logged_write(self: RecordStore, record: Record) -> None:
        caller = sys._getframe(1).f_globals["__name__"]
        moves.append((caller, before(self, record.mig_uuid), record.state))
        write(self, record)

    def logged_remove(self: RecordStore, mig_uuid: str) -> None:
        caller = sys._getframe(1).f_globals["__name__"]
        moves.append((caller, before(self, mig_uuid), None))
        remove(self, mig_uuid)

    monkeypatch.setattr(RecordStore, "write", logged_write)
    monkeypatch.setattr(RecordStore, "remove", logged_remove)
    return moves


def _no_pods(tmp_path: Path) -> str:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    return str(path)


def test_every_record_change_is_the_executors_and_a_legal_transition(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moves = _record_moves(monkeypatch)

    def ok(*args: str) -> dict[str, Any]:
        ran = cli.json(*args)
        assert ran.exit_code == 0, (args, ran.stdout)
        parsed: dict[str, Any] = json.loads(ran.stdout)
        return parsed

    def alloc(pod: str, profile: str, placement: str) -> str:
        args = ("--pod", pod, "--gpu", "0", "--profile", profile, "--placement", placement)
        mig: str = ok("allocate", *args)["instance"]["migUUID"]
        return mig

    a = alloc("ns/a", "1g.10gb", "0")
    b = alloc("ns/b", "1g.10gb", "1")
    c = alloc("ns/c", "2g.20gb", "2")
    ok("release", "--mig-uuid", a)
    assert ok("allocate", "--pod", "ns/d", "--gpu", "0", "--profile", "1g.10gb")["reused"]
    ok("release", "--pod", "ns/d")
    ok("release", "--mig-uuid", b)
    ok("sim", "busy", "--mig-uuid", b, "--gi-only")
    assert cli.json("reclaim", "--mig-uuid", b).exit_code == 4  # left in Error
    ok("sim", "busy", "--mig-uuid", b, "--gi-only", "--clear")
    ok("reconcile")  # retries the destroy
    ok("reconcile", "--pods", _no_pods(tmp_path))  # c's pod is gone: released
    alloc("ns/e", "1g.10gb", "0")  # reuses a
    ok("sim", "create", "--gpu", "1", "--profile", "1g.10gb", "--placement", "0")
    ok("recover", "--pods", _no_pods(tmp_path), "--adopt")  # a restored Idle, one adopted
    ok("reclaim", "--gpu", "0", "--placement", "0")
    ok("forget", c)

    kinds = {(old, new) for _, old, new in moves}
    assert len(kinds) >= 6, kinds  # creations, releases, reuse, reclaims, Error, forget
    assert {caller for caller, _, _ in moves} == {"hamimig.engine.executor"}
    illegal = [(old, new) for _, old, new in moves if (old, new) not in TRANSITIONS]
    # A reclaim's first write moves Idle or Error to Reclaiming, its removal Reclaiming to none.
    assert not illegal


def test_only_the_executor_writes_or_removes_records() -> None:
    """No planner reaches the record store's mutating methods (`records().write/remove`)."""
    offenders = []
    for path in sorted(ENGINE.glob("*.py")):
        if path.name == "executor.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("write", "remove")
                and isinstance(node.func.value, ast.Call)
                and isinstance(node.func.value.func, ast.Attribute)
                and node.func.value.func.attr in ("records", "intents")
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders


def test_a_plan_is_plain_data() -> None:
    """Steps hold values, never behaviour: a dry run can print them and tests compare them."""
    import dataclasses
    import typing

    from hamimig.engine import steps

    hints = typing.get_type_hints(Step)
    assert set(hints) == {"kind", "target", "reason"}
    for cls in typing.get_args(steps.Target):
        for field in dataclasses.fields(cls):
            assert "Callable" not in str(field.type), (cls.__name__, field.name)
        assert dataclasses.fields(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_an_active_instance_whose_ci_vanished_is_released_then_reclaimed(cli: Cli) -> None:
    """An Active record no pod holds, whose compute instance is gone (a crash inside a
    destroy by hand, a driver hiccup): recover moves it Active -> Idle -> Reclaiming and
    finishes the reclaim, instead of an illegal Active -> Reclaiming (an internal error on
    every run, which kept the device plugin from ever starting)."""
    from tests.support.node import open_hw

    ran = cli.json("allocate", "--pod", "ns/a", "--gpu", "0", "--profile", "1g.10gb")
    instance = json.loads(ran.stdout)["instance"]
    hw = open_hw(cli.sim)
    try:
        hw.destroy_compute_instance(0, instance["gpuInstanceID"], instance["computeInstanceID"])
    finally:
        hw.close()

    ran = cli.json("recover", "--assume-no-pods")

    assert ran.exit_code == 0, ran.stdout
    actions = json.loads(ran.stdout)["actions"]
    assert [(a["action"], a["migUUID"]) for a in actions] == [
        ("finish-reclaim", instance["migUUID"])
    ]
    assert not list(cli.state_dir.glob("hami-owned-*"))
    assert not list(cli.cdi_dir.glob("*.json"))
    listed = json.loads(cli.json("list").stdout)["instances"]
    assert listed == []
    again = cli.json("recover", "--assume-no-pods")
    assert again.exit_code == 0 and json.loads(again.stdout)["actions"] == []


def _reads_before_the_first_gi(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count, over one command: reads of /proc/devices, looks at the NVIDIA base spec
    (`BaseLookup.require`) before the first GI is created, and reuse-candidate searches."""
    from hamimig.engine import allocate as allocation
    from hamimig.hw.nvml import NvmlHardware
    from hamimig.store.cdi_base import BaseLookup

    counts = {"proc_devices": 0, "base": 0, "base_before_gi": -1, "candidates": 0}
    read_text, require = Path.read_text, BaseLookup.require
    create_gi, candidates = NvmlHardware.create_gpu_instance, allocation.reuse_candidates

    def counted_read(self: Path, *args: Any, **kwargs: Any) -> str:
        counts["proc_devices"] += self.name == "proc-devices"
        return read_text(self, *args, **kwargs)

    def counted_require(self: BaseLookup) -> Any:
        counts["base"] += 1
        return require(self)

    def counted_create(self: NvmlHardware, *args: Any) -> Any:
        if counts["base_before_gi"] < 0:
            counts["base_before_gi"] = counts["base"]
        return create_gi(self, *args)

    def counted_candidates(*args: Any) -> Any:
        counts["candidates"] += 1
        return candidates(*args)

    monkeypatch.setattr(Path, "read_text", counted_read)
    monkeypatch.setattr(BaseLookup, "require", counted_require)
    monkeypatch.setattr(NvmlHardware, "create_gpu_instance", counted_create)
    monkeypatch.setattr(allocation, "reuse_candidates", counted_candidates)
    return counts


@pytest.mark.parametrize("busy_idle", [False, True])
def test_a_creating_allocate_reads_each_thing_it_checks_once(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, busy_idle: bool
) -> None:
    """One look at the NVIDIA base spec before the hardware changes, one search for reuse
    candidates, one read of /proc/devices (the capability nodes' major, which the new spec
    needs), whether or not an Idle instance of the profile was there to pass over."""
    if busy_idle:
        args = ("--pod", "ns/a", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0")
        mig = json.loads(cli.json("allocate", *args).stdout)["instance"]["migUUID"]
        assert cli.json("release", "--mig-uuid", mig).exit_code == 0
        assert cli.json("sim", "busy", "--mig-uuid", mig).exit_code == 0
    counts = _reads_before_the_first_gi(monkeypatch)

    ran = cli.json("allocate", "--pod", "ns/b", "--gpu", "0", "--profile", "1g.10gb")

    assert ran.exit_code == 0, ran.stdout
    assert json.loads(ran.stdout)["created"] is True
    assert counts["base_before_gi"] == 1, counts
    assert counts["candidates"] == 1, counts
    assert counts["proc_devices"] == 1, counts


def test_a_reuse_compares_the_instance_spec_with_the_nvidia_base_once(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner compares the Idle instance's spec with what the NVIDIA base spec makes of
    it; the executor acts on that verdict instead of comparing again."""
    args = ("--gpu", "0", "--profile", "1g.10gb", "--placement", "0")
    mig = json.loads(cli.json("allocate", "--pod", "ns/a", *args).stdout)["instance"]["migUUID"]
    assert cli.json("release", "--mig-uuid", mig).exit_code == 0
    counts = _reads_before_the_first_gi(monkeypatch)

    ran = cli.json("allocate", "--pod", "ns/b", *args)

    assert ran.exit_code == 0, ran.stdout
    assert json.loads(ran.stdout)["reused"] is True
    assert counts["base"] == 1, counts
    assert counts["candidates"] == 1, counts
    assert counts["proc_devices"] == 1, counts


def test_the_failure_policy_is_the_plans(cli: Cli) -> None:
    """One executor, two policies: an allocation aborts at the Error instance in its way that
    still cannot be destroyed (exit 3, the placement's blocker named, nothing created), while a
    reclaim of several goes on past the instance it cannot destroy (exit 4, each reported)."""
    args = ("--gpu", "0", "--profile", "1g.10gb")
    a, b = (
        json.loads(cli.json("allocate", "--pod", f"ns/{p}", *args, "--placement", s).stdout)[
            "instance"
        ]["migUUID"]
        for p, s in (("a", "0"), ("b", "1"))
    )
    for mig in (a, b):
        assert cli.json("release", "--mig-uuid", mig).exit_code == 0
    assert cli.json("sim", "busy", "--mig-uuid", a, "--gi-only").exit_code == 0

    several = cli.json("reclaim", "--gpu", "0", "--all-idle")

    assert several.exit_code == 4, several.stdout
    shown = {i["migUUID"]: i["outcome"] for i in json.loads(several.stdout)["reclaimed"]}
    assert shown == {a: "failed", b: "reclaimed"}
    assert cli.json("show", a).json()["state"] == "Error"

    blocked = cli.json("allocate", "--pod", "ns/c", *args, "--placement", "0")

    assert blocked.exit_code == 3, blocked.stdout
    error = json.loads(blocked.stdout)["error"]
    assert "blocked by Error instance" in error["message"]
    assert [i["migUUID"] for b in error["blockers"] for i in b["instances"]] == [a]
    assert [i["migUUID"] for i in json.loads(cli.json("list").stdout)["instances"]] == [a]
