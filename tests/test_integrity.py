"""Ownership integrity: one instance is never handed to two pods, and hamimig never destroys or
hands out what it cannot show to be idle and its own.

Each test is a regression test for a way this used to go wrong on the simulated node: pod lists
older than the records they judge, two pods holding one instance, processes on an instance that
was reused, reclaimed or restored Idle, an interrupted allocation taking a GI that was not its
own, a node whose records others could forge, doctor and recover disagreeing, and CDI specs left
without a record.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from hamimig.store.cdi import device_name
from tests.support.cdi import KIND, spec_path
from tests.support.cli import (
    Cli,
    allocate_args,
    allocated,
    fault,
    idle,
    ok,
    refused,
    run_hamimig,
    sim,
    sim_create,
)
from tests.support.kube import NODE as KUBE_NODE
from tests.support.kube import FakeApi, node_doc, serving
from tests.support.node import live
from tests.support.pods import PodsFile, entry, kube_pod
from tests.support.records import ext, intent_files, record_path
from tests.support.unchanged import Unchanged


def instance(cli: Cli, mig: str) -> dict[str, Any]:
    data: dict[str, Any] = ok(cli.json("show", mig))
    return data


def busy(cli: Cli, mig: str) -> None:
    sim(cli, "busy", "--mig-uuid", mig)


# ---------------------------------------------------------------------------------------------
# Pod snapshots are never older than the records they judge


LOCK_HOLDER = textwrap.dedent(
    """
    import contextlib, json, sys, time
    from pathlib import Path
    from hamimig.engine import allocate as allocation
    from hamimig.engine.node import Node
    from hamimig.engine.requests import AllocateRequest, Owner, PlacementSpec
    from hamimig.engine.podsource import PodSource
    from hamimig.store.lock import NodeLock

    sim, state, cdi, go, then_pods = sys.argv[1:6]
    class Held(Node):  # this process holds the node lock already: allocate under it
        def lock(self):
            return contextlib.nullcontext()

    node = Held(state_dir=Path(state), cdi_dir=Path(cdi), sim=Path(sim),
                config_path=Path(state).parent / "absent.yaml")
    with NodeLock(Path(state), 30):
        print("locked", flush=True)
        while not Path(go).exists():
            time.sleep(0.02)
        request = AllocateRequest(Owner("ns", "new"), 0, "1g.10gb", PlacementSpec(3))
        made = allocation.allocate(node, request, PodSource.no_pods())
        node.close()
        if then_pods != "-":
            Path(then_pods).write_text(sys.stdin.read())
        print(json.dumps({"mig": made.instance.mig_uuid}), flush=True)
    """
)


def _allocate_during_the_wait(
    cli: Cli, tmp_path: Path, pods: str, rewrite_pods: str | None
) -> tuple[str, dict[str, Any]]:
    """`reconcile --pods` waits for the lock while another process allocates ns/new; returns
    the new instance and reconcile's result."""
    go = tmp_path / "go"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            LOCK_HOLDER,
            str(cli.sim),
            str(cli.state_dir),
            str(cli.cdi_dir),
            str(go),
            pods if rewrite_pods is not None else "-",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "locked"
    command = ("-o", "json", "reconcile", "--pods", pods, "--lock-timeout", "30")
    waiting = subprocess.Popen(
        [sys.executable, "-m", "hamimig", *cli.globals(), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)  # reconcile has started and waits for the lock
    go.touch()
    holder.stdin.write(rewrite_pods or "")
    holder.stdin.close()
    made = json.loads(holder.stdout.readline())
    holder.stdout.close()
    assert holder.wait(30) == 0
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, (out, err)
    return made["mig"], json.loads(out)


@pytest.mark.slow
def test_reconcile_never_releases_what_was_allocated_while_it_waited(
    cli: Cli, tmp_path: Path, pods_file: PodsFile
) -> None:
    allocated(cli, "ns/old", "1g.10gb", "0")  # the state directory exists
    pods = pods_file(kube_pod("ns/old"))  # listed before ns/new exists
    os.utime(pods, (time.time() - 5, time.time() - 5))
    mig, data = _allocate_during_the_wait(cli, tmp_path, pods, None)
    [action] = [a for a in data["actions"] if a["migUUID"] == mig]
    assert action["action"] == "skip"
    assert "changed after the pod snapshot" in action["reason"]
    assert ext(cli, mig)["state"] == "Active"


@pytest.mark.slow
def test_reconcile_reads_the_pod_list_after_taking_the_lock(
    cli: Cli, tmp_path: Path, pods_file: PodsFile
) -> None:
    allocated(cli, "ns/old", "1g.10gb", "0")
    pods = pods_file(kube_pod("ns/old"))
    os.utime(pods, (time.time() - 5, time.time() - 5))
    # The allocating process also updates the pod list (as the API would) before unlocking.
    newer = json.dumps({"kind": "List", "items": [kube_pod("ns/old"), kube_pod("ns/new")]})
    mig, data = _allocate_during_the_wait(cli, tmp_path, pods, newer)
    assert [a for a in data["actions"] if a["migUUID"] == mig] == []
    assert ext(cli, mig)["state"] == "Active"


def test_record_newer_than_the_pod_file_is_left_by_recover(cli: Cli, pods_file: PodsFile) -> None:
    pods = pods_file()
    os.utime(pods, (time.time() - 60, time.time() - 60))
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    data = ok(cli.json("recover", "--pods", pods))
    [action] = data["actions"]
    assert (action["action"], action["migUUID"]) == ("skip", mig)
    assert "changed after the pod snapshot" in action["reason"]
    assert ext(cli, mig)["state"] == "Active"
    # A pod list taken afterwards judges it: released to Idle.
    data = ok(cli.json("recover", "--pods", pods_file()))
    assert [(a["action"], a["migUUID"]) for a in data["actions"]] == [("restore-idle", mig)]


# ---------------------------------------------------------------------------------------------
# Two holders are a conflict


def _two_holders(cli: Cli, pods_file: PodsFile) -> tuple[str, str]:
    """ns/a owns the instance by its record and runs; ns/b's annotation names it too."""
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    inst = instance(cli, mig)
    return mig, pods_file(kube_pod("ns/a"), kube_pod("ns/b", [entry(inst)]))


@pytest.mark.parametrize("command", ["recover", "reconcile"])
def test_annotation_naming_another_pods_instance_stops_recover_and_reconcile(
    cli: Cli, pods_file: PodsFile, command: str
) -> None:
    mig, pods = _two_holders(cli, pods_file)
    before = Unchanged(cli)
    message = refused(cli.json(command, "--pods", pods), 5, "unverifiable")
    assert mig in message and "ns/a" in message and "ns/b" in message
    before.check()


def test_two_annotations_naming_one_instance_stop_reconcile(cli: Cli, pods_file: PodsFile) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    inst = instance(cli, mig)
    pods = pods_file(kube_pod("ns/b", [entry(inst)]), kube_pod("ns/c", [entry(inst)]))
    before = Unchanged(cli)
    message = refused(cli.json("reconcile", "--pods", pods), 5, "unverifiable")
    assert "ns/b" in message and "ns/c" in message
    before.check()


def test_annotation_of_the_owner_itself_is_no_conflict(cli: Cli, pods_file: PodsFile) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    pods = pods_file(kube_pod("ns/a", [entry(instance(cli, mig))]))
    assert ok(cli.json("reconcile", "--pods", pods))["actions"] == []
    assert [a["action"] for a in ok(cli.json("recover", "--pods", pods))["actions"]] == [
        "restore-active"
    ]


# ---------------------------------------------------------------------------------------------
# Busy instances are never handed out


def test_recover_refuses_a_recorded_instance_with_unaccounted_processes(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    busy(cli, mig)
    before = Unchanged(cli)
    message = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    assert mig in message and "processes" in message
    before.check()


def test_recover_keeps_a_busy_instance_its_pod_holds(cli: Cli, pods_file: PodsFile) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    busy(cli, mig)
    data = ok(cli.json("recover", "--pods", pods_file(kube_pod("ns/p"))))
    assert [(a["action"], a["migUUID"]) for a in data["actions"]] == [("restore-active", mig)]


def test_busy_idle_instance_is_not_reused_and_blocks_its_slices(cli: Cli) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "2")
    busy(cli, mig)
    before = Unchanged(cli)
    request = ("allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb")
    message = refused(cli.json(*request, "--placement", "2"), 3, "conflict")
    assert mig in message and "busy" in message
    before.check()
    # Without a placement: a new instance elsewhere, never the busy one.
    data = ok(cli.json(*request))
    assert data["instance"]["migUUID"] != mig
    assert (data["created"], data["reused"]) == (True, False)
    assert ext(cli, mig)["state"] == "Idle"


def test_a_failed_process_query_counts_as_busy(cli: Cli) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "2")
    sim(cli, "fault", "add", "--op", "nvmlDeviceGetComputeRunningProcesses", "--error", "UNKNOWN")
    data = ok(cli.json("allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb"))
    assert data["instance"]["migUUID"] != mig
    assert data["reused"] is False


def test_reclaim_skips_busy_instances_and_refuses_one_named(cli: Cli) -> None:
    quiet = idle(cli, "ns/a", "1g.10gb", "0")
    loud = idle(cli, "ns/b", "1g.10gb", "1")
    busy(cli, loud)
    message = refused(cli.json("reclaim", "--mig-uuid", loud), 3, "conflict")
    assert "busy" in message
    data = ok(cli.json("reclaim", "--gpu", "0", "--all-idle"))
    assert [i["migUUID"] for i in data["reclaimed"]] == [quiet]
    assert data["skipped"] == [{"migUUID": loud, "reason": "busy: processes run on it"}]
    assert [m for _, _, m in live(cli)] == [loud]
    table = cli("reclaim", "--gpu", "0", "--all-idle")
    assert table.exit_code == 0 and f"skipped {loud}: busy" in table.stdout


def test_reconcile_skips_busy_instances(cli: Cli, pods_file: PodsFile) -> None:
    gone = allocated(cli, "ns/gone", "1g.10gb", "0")
    busy(cli, gone)
    data = ok(cli.json("reconcile", "--pods", pods_file()))
    [action] = data["actions"]
    assert (action["action"], action["migUUID"]) == ("skip", gone)
    assert "busy" in action["reason"]
    assert ext(cli, gone)["state"] == "Active"


def test_list_and_show_report_processes(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    quiet = allocated(cli, "ns/q", "1g.10gb", "1")
    busy(cli, mig)
    listed = {i["migUUID"]: i["processes"] for i in ok(cli.json("list"))["instances"]}
    assert listed == {mig: True, quiet: False}
    assert instance(cli, mig)["processes"] is True
    shown = cli("show", mig)
    assert re.search(r"processes\s+1\b", shown.stdout), shown.stdout  # one process: counted
    assert "Active (busy)" in cli("list").stdout


# ---------------------------------------------------------------------------------------------
# An intent without a GI ID owns no complete pair


def _intent_without_gi(cli: Cli) -> str:
    """An allocation killed after journaling its intent, before creating its GI."""
    fault(cli, "nvmlDeviceCreateGpuInstanceWithPlacement", action="crash-before")
    ran = run_hamimig(
        *cli.globals(), "allocate", "--pod", "ns/crash", "--gpu", "0", "--profile", "1g.10gb",
        "--placement", "4",
    )  # fmt: skip
    assert ran.returncode == 137
    [name] = intent_files(cli)
    return name.removeprefix("intent-").removesuffix(".json")


@pytest.mark.slow
def test_recover_never_takes_a_complete_pair_for_an_intent_without_gi_id(cli: Cli) -> None:
    intent = _intent_without_gi(cli)
    other = sim_create(cli, "1g.10gb", "4")  # a pair that appeared there since
    before = Unchanged(cli)
    message = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    line = shlex.join(["hamimig", *cli.globals(), "forget", "--intent", intent])
    assert f"drop the intent with: {line};" in message
    before.check()
    assert [m for _, _, m in live(cli)] == [other["migUUID"]]


@pytest.mark.slow
def test_recover_rolls_back_the_bare_gi_of_an_intent_without_gi_id(cli: Cli) -> None:
    intent = _intent_without_gi(cli)
    sim_create(cli, "1g.10gb", "4", no_ci=True)  # the GI the killed request created
    data = ok(cli.json("recover", "--assume-no-pods"))
    assert [a["action"] for a in data["actions"]] == ["rollback-intent"]
    assert intent in data["actions"][0]["reason"]
    assert live(cli) == []
    assert intent_files(cli) == []


# ---------------------------------------------------------------------------------------------
# Refuse to act on a node that doctor fails


def test_world_writable_state_dir_refuses_changes_and_dry_runs_alike(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    os.chmod(cli.state_dir, 0o777)
    before = Unchanged(cli)
    for args in (
        ("allocate", "--pod", "ns/q", "--gpu", "0", "--profile", "1g.10gb"),
        ("reclaim", "--mig-uuid", mig),
        ("release", "--mig-uuid", mig),
        ("reconcile",),
        ("recover", "--assume-no-pods"),
    ):
        message = refused(cli.json(*args), 5, "unverifiable")
        assert "0777" in message and "unsafe node" in message, args
        # The dry run gives the same verdict on the plan it could make, findings included.
        ran = cli.json(*args, "--dry-run")
        assert refused(ran, 5, "unverifiable") == message  # on its plan object, not an Error
        assert "0777" in ran.json()["warnings"][0]["reason"]
    before.check()
    table = cli("reclaim", "--mig-uuid", mig, "--dry-run")
    assert table.exit_code == 5
    assert "would reclaim" in table.stdout and "warning:" in table.stdout
    assert table.stderr.startswith("hamimig: error: unsafe node:")
    before.check()


def test_foreign_spec_defining_our_device_refuses_changes(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    foreign = cli.cdi_dir / "zz-foreign.json"
    ours = json.loads(spec_path(cli, mig).read_text())
    foreign.write_text(json.dumps({**ours, "cdiVersion": "0.3.0"}))
    before = Unchanged(cli)
    message = refused(
        cli.json("allocate", "--pod", "ns/q", "--gpu", "0", "--profile", "1g.10gb"),
        5,
        "unverifiable",
    )
    assert str(foreign) in message
    before.check()
    dry = cli.json("recover", "--assume-no-pods", "--dry-run")
    assert str(foreign) in refused(dry, 5, "unverifiable")
    assert dry.json()["warnings"][0]["file"] == str(foreign)
    before.check()
    assert any(w["file"] == str(foreign) for w in ok(cli.json("list"))["warnings"])


# ---------------------------------------------------------------------------------------------
# Doctor agrees with recover


def _failing(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in data["checks"] if c["status"] == "fail"}


def test_doctor_fails_every_record_recover_refuses(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "0")
    b = idle(cli, "ns/b", "1g.10gb", "1")
    for mig, gi in ((a, 1), (b, 2)):  # records whose GI ID no longer matches
        path = record_path(cli, mig)
        doc = json.loads(path.read_text())
        doc["gpuInstanceID"] = gi
        path.write_text(json.dumps(doc))
    recover = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    ran = cli.json("doctor")
    assert ran.exit_code == 5
    failing = _failing(ran.json())
    refusals = {n: c for n, c in failing.items() if n.startswith("recovery/")}
    assert len(refusals) == 2
    for check in refusals.values():
        assert check["message"].removeprefix("recover would refuse: ") in recover
        assert "hamimig forget" in check["hint"]
    assert all("recover (" not in (c["hint"] or "") for c in ran.json()["checks"])


def test_doctor_with_pods_fails_a_gpu_reset_under_a_running_pod(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    sim(cli, "reset", "--gpu", "0")
    pods = pods_file(kube_pod("ns/p"))
    assert cli.json("recover", "--pods", pods, "--dry-run").exit_code == 5
    ran = cli.json("doctor", "--pods", pods)
    assert ran.exit_code == 5
    [check] = [c for n, c in _failing(ran.json()).items() if n.startswith("recovery/")]
    assert mig in check["message"]
    # Without pods, the pod checks are skipped and said to be.
    plain = cli.json("doctor").json()
    by_name = {c["name"]: c for c in plain["checks"]}
    assert by_name["recovery/pods"]["status"] == "skipped"
    assert "no pod source given" in by_name["recovery/pods"]["message"]


# ---------------------------------------------------------------------------------------------
# CDI specs: nothing left behind, and a repair reports what really happened


@pytest.mark.slow
def test_adopt_crash_between_record_and_spec_is_finished_by_recover(cli: Cli) -> None:
    unmarked = sim_create(cli, "1g.10gb", "0")["migUUID"]
    fault(cli, "cdi.write", action="crash-before")
    ran = run_hamimig(*cli.globals(), "recover", "--assume-no-pods", "--adopt")
    assert ran.returncode == 137
    assert ext(cli, unmarked)["state"] == "Idle"  # the record came first
    assert not spec_path(cli, unmarked).exists()
    data = ok(cli.json("recover", "--assume-no-pods"))
    assert ("repair-cdi", unmarked) in [(a["action"], a["migUUID"]) for a in data["actions"]]
    assert json.loads(spec_path(cli, unmarked).read_text())["kind"] == KIND


def test_recover_removes_specs_nothing_accounts_for(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    stray = "MIG-0badc0de-0000-4000-8000-000000000001"
    orphan = cli.cdi_dir / spec_path(cli, stray).name
    # A spec of ours for its own (gone) instance; a copy naming another device is not ours.
    text = spec_path(cli, mig).read_text()
    orphan.write_text(text.replace(device_name(mig), device_name(stray)))
    data = ok(cli.json("recover", "--assume-no-pods"))
    assert ("remove-orphan-cdi", None) in [(a["action"], a["migUUID"]) for a in data["actions"]]
    assert not orphan.exists()
    assert spec_path(cli, mig).exists()


def test_failed_cdi_repair_is_reported_as_failed(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    spec_path(cli, mig).unlink()
    fault(cli, "cdi.write", error="EIO")
    ran = cli.json("recover", "--assume-no-pods")
    assert ran.exit_code == 4
    [repair] = [a for a in ran.json()["actions"] if a["action"] == "repair-cdi"]
    assert "failed" in repair["reason"]
    assert not spec_path(cli, mig).exists()


# ---------------------------------------------------------------------------------------------
# The node name is verified, not trusted


@pytest.mark.parametrize("command", ["recover", "reconcile", "adopt"])
def test_pod_bound_elsewhere_naming_our_gpu_means_the_node_name_is_wrong(
    cli: Cli, pods_file: PodsFile, command: str
) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    # This node's pod, seen as bound to another node: --node names the wrong node.
    pods = pods_file(kube_pod("ns/p", [entry(instance(cli, mig))], node="gpu-node-1"))
    extra = ("--exclusive-owner",) if command == "adopt" else ()
    before = Unchanged(cli)
    message = refused(
        cli("--node", "gpu-node-2", command, "--pods", pods, *extra, output="json"),
        5,
        "unverifiable",
    )
    assert "ns/p" in message and "gpu-node-1" in message and "--node" in message
    before.check()
    # Named right, the same list is fine.
    assert cli("--node", "gpu-node-1", command, "--pods", pods, *extra).exit_code == 0


def test_empty_node_name_is_a_usage_error(cli: Cli, pods_file: PodsFile) -> None:
    ran = cli("--node", "", "recover", "--pods", pods_file(), output="json")
    assert ran.exit_code == 2


def test_kube_node_must_register_one_of_our_gpus(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("kubernetes")
    with serving(FakeApi(), tmp_path, monkeypatch) as api:
        api.body = json.dumps({"kind": "PodList", "items": []}).encode()
        before = Unchanged(cli)
        message = refused(
            cli("--node", KUBE_NODE, "recover", "--kube", output="json"), 5, "unverifiable"
        )
        assert "hami.io/node-nvidia-register" in message or "register" in message
        before.check()
        ours = [g["uuid"] for g in json.loads(cli.sim.read_text())["gpus"]]
        api.node = node_doc(register=json.dumps([{"id": ours[1], "count": 10}]))
        ok(cli("--node", KUBE_NODE, "recover", "--kube", output="json"))
        api.body, api.status = None, 403  # the pod list forbidden: unverifiable
        assert cli("--node", KUBE_NODE, "reconcile", "--kube").exit_code == 5


# ---------------------------------------------------------------------------------------------
# Review findings


def test_reconcile_with_another_nodes_pod_list_changes_nothing(
    cli: Cli, pods_file: PodsFile
) -> None:
    allocated(cli, "ns/p1", "1g.10gb", "0")
    far = kube_pod("ns/x", [_foreign_entry()], node="node2")
    pods = pods_file(far)
    before = Unchanged(cli)
    for command in ("reconcile", "recover"):
        message = refused(
            cli("--node", "node2", command, "--pods", pods, output="json"), 5, "unverifiable"
        )
        assert "not on this node" in message and "--node" in message
    before.check()


def _foreign_entry() -> dict[str, Any]:
    return {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": "GPU-11111111-2222-3333-4444-555555555555",
        "profile": "1g.10gb",
        "placement": {"start": 0, "size": 1},
    }


@pytest.mark.slow
def test_recover_keeps_the_spec_of_an_instance_with_a_stale_queued_removal(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    fault(cli, "queue.write", action="crash-after")
    assert run_hamimig(*cli.globals(), "forget", mig).returncode == 137
    assert record_path(cli, mig).exists() and spec_path(cli, mig).exists()
    data = ok(cli.json("recover", "--assume-no-pods"))
    [retry] = [a for a in data["actions"] if a["action"] == "retry-cdi-removal"]
    assert "kept" in retry["reason"]
    assert spec_path(cli, mig).exists()
    assert (
        not (cli.state_dir / "cdi-removal-queue.json").exists()
        or mig not in (cli.state_dir / "cdi-removal-queue.json").read_text()
    )


@pytest.mark.slow
def test_reuse_drops_a_stale_queued_removal(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    fault(cli, "queue.write", action="crash-after")
    assert run_hamimig(*cli.globals(), "forget", mig).returncode == 137
    data = ok(cli.json("allocate", "--pod", "ns/q", "--gpu", "0", "--profile", "1g.10gb"))
    assert (data["reused"], data["instance"]["migUUID"]) == (True, mig)
    queue = cli.state_dir / "cdi-removal-queue.json"
    assert not queue.exists() or mig not in queue.read_text()
    ok(cli.json("reconcile"))
    assert spec_path(cli, mig).exists()


def test_pod_uid_is_compared_as_the_api_server_writes_it(cli: Cli, pods_file: PodsFile) -> None:
    upper = "12345678-1234-1234-1234-1234567890AB"
    data = ok(
        cli.json(
            "allocate", "--pod", "ns/q", "--gpu", "0", "--profile", "1g.10gb", "--pod-uid", upper
        )
    )
    mig = data["instance"]["migUUID"]
    assert ext(cli, mig)["owner"]["uid"] == upper.lower()
    pods = pods_file(kube_pod("ns/q", uid=upper.lower(), phase="Pending"))
    assert ok(cli.json("reconcile", "--pods", pods))["actions"] == []
    actions = ok(cli.json("recover", "--pods", pods, "--dry-run"))["actions"]
    assert [a["action"] for a in actions] == ["restore-active"]


@pytest.mark.slow
def test_intent_rollback_never_destroys_a_gi_that_processes_run_on(cli: Cli) -> None:
    fault(cli, "nvmlGpuInstanceCreateComputeInstance", action="crash-after")
    ran = run_hamimig(
        *cli.globals(), "allocate", "--pod", "ns/crash", "--gpu", "0", "--profile", "1g.10gb",
        "--placement", "0",
    )  # fmt: skip
    assert ran.returncode == 137
    [(_, _, mig)] = live(cli)
    assert mig is not None
    busy(cli, mig)
    before = Unchanged(cli)
    message = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    assert "processes" in message and "forget --intent" in message
    before.check()
    doctor = cli.json("doctor")
    assert doctor.exit_code == 5
    assert any(n.startswith("recovery/") for n in _failing(doctor.json()))


def test_closed_stdout_keeps_the_exit_status_of_a_change(cli: Cli, tmp_path: Path) -> None:
    request = allocate_args("ns/p", "1g.10gb")
    command = " ".join([sys.executable, "-m", "hamimig", *cli.globals(), *request])
    for redirect in (">&-", "2>&- >&-"):
        ran = subprocess.run(
            ["bash", "-c", f"{command} {redirect}"], capture_output=True, text=True, check=False
        )
        assert ran.returncode == 0, ran.stderr
        assert "Traceback" not in ran.stderr
    assert len(ok(cli.json("list"))["instances"]) == 1


def test_forget_refuses_an_unsafe_node(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    os.chmod(cli.state_dir, 0o777)
    before = Unchanged(cli)
    message = refused(cli.json("forget", mig), 5, "unverifiable")
    assert "unsafe node" in message
    dry = cli.json("forget", mig, "--dry-run")
    assert refused(dry, 5, "unverifiable") == message
    assert dry.json()["forgotten"][0]["migUUID"] == mig  # the plan it could make
    assert "0777" in dry.json()["warnings"][0]["reason"]
    before.check()


def test_recover_leaves_a_busy_record_written_after_the_pod_list(
    cli: Cli, pods_file: PodsFile
) -> None:
    pods = pods_file()
    os.utime(pods, (time.time() - 60, time.time() - 60))
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    busy(cli, mig)
    data = ok(cli.json("recover", "--pods", pods, "--dry-run"))
    assert [(a["action"], a["migUUID"]) for a in data["actions"]] == [("skip", mig)]


def test_doctor_never_points_to_recover_when_the_pod_list_stops_it(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    spec_path(cli, mig).unlink()  # doctor's spec check would say "hamimig recover"
    pods = pods_file(kube_pod("ns/p", [_foreign_entry()]))
    assert cli.json("recover", "--pods", pods, "--dry-run").exit_code == 5
    ran = cli.json("doctor", "--pods", pods)
    assert ran.exit_code == 5
    assert "recovery/pods" in _failing(ran.json())
    assert all("hamimig recover" not in (c["hint"] or "") for c in ran.json()["checks"])


def test_a_failed_gpu_process_query_keeps_an_orphan_gi(cli: Cli) -> None:
    sim_create(cli, "2g.20gb", "2", no_ci=True)
    fail = ("--op", "nvmlDeviceGetComputeRunningProcesses", "--error", "UNKNOWN")
    sim(cli, "fault", "add", *fail, "--times", "100")
    data = ok(cli.json("recover", "--assume-no-pods", "--adopt"))
    [kept] = data["actions"]
    assert kept["action"] == "preserve-orphan-gi" and "cannot be queried" in kept["reason"]
    assert live(cli) == [(2, 2, None)]


def test_a_replaceable_state_directory_is_unsafe(cli: Cli) -> None:
    mig = idle(cli, "ns/p", "1g.10gb", "0")
    parent = cli.state_dir.parent
    os.chmod(parent, 0o777)
    try:
        message = refused(cli.json("reclaim", "--mig-uuid", mig), 5, "unverifiable")
        assert "others can replace the state directory" in message
        assert "state-dir/parent" in _failing(cli.json("doctor").json())
        os.chmod(parent, 0o1777)  # sticky: nobody else may rename it
        ok(cli.json("reclaim", "--mig-uuid", mig))
    finally:
        os.chmod(parent, 0o700)


def test_list_says_when_processes_cannot_be_queried(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    fail = ("--op", "nvmlDeviceGetComputeRunningProcesses", "--error", "UNKNOWN")
    sim(cli, "fault", "add", *fail, "--times", "10")
    [inst] = ok(cli.json("list"))["instances"]
    assert (inst["migUUID"], inst["processes"]) == (mig, None)


def test_empty_output_variable_is_a_usage_error(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMIMIG_OUTPUT", "")
    ran = cli("list")
    assert ran.exit_code == 2
    assert "HAMIMIG_OUTPUT" in ran.stderr
