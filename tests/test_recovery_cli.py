"""Startup recovery, adoption and pod-driven reconciliation through the CLI on the simulated node:
what `recover`, `adopt` and `reconcile` do after a restart, and that hamimig only ever takes,
keeps or destroys instances it owns (docs/design.md, "Trust model").

Every check runs `hamimig` itself (in-process CliRunner; a real subprocess where a simulated crash
must end an allocation or reclaim half-way) and then looks at what HAMi or a script would see: the
JSON result and exit code, every file of the state and CDI directories with its bytes and mode,
and the simulated node's GI/CI layout and NVML call counts. Pods arrive as real-shaped
`kubectl get pods -o json|yaml` documents through `--pods FILE`, `--pods -` (stdin) or a YAML file.

"Nothing changed" always means all three: the state directory, the CDI directory and the
simulated layout are identical before and after, and no mutating NVML call was made.
"""

from __future__ import annotations

import json
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hamimig.cli.app import app
from tests.support.cdi import KIND, spec_path
from tests.support.cli import (
    ADOPT_CONFIG,
    LEGACY_CONFIG,
    Cli,
    Ran,
    allocate,
    allocate_args,
    allocated,
    configured,
    fail_destroys,
    fault,
    idle,
    ok,
    owners_running,
    refused,
    run_hamimig,
    sim,
    sim_create,
)
from tests.support.files import entries
from tests.support.node import ABSENT_GPU, ABSENT_MIG, gpus, live
from tests.support.nvml import CREATE_CI, DESTROY_CI
from tests.support.pods import NODE, PodsFile, entry, kube_pod, pod_list, pod_uid
from tests.support.records import (
    ext,
    hami_record,
    intent_files,
    record,
    record_path,
    sha,
    state_files,
)
from tests.support.unchanged import Unchanged

CRASHED = 137

# ---------------------------------------------------------------------------------------------
# Reading the node and the results


def gpu_uuid(cli: Cli, index: int) -> str:
    found: str = gpus(cli)[index]["uuid"]
    return found


def actions(data: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(a["action"], a["migUUID"]) for a in data["actions"]]


def action_names(data: dict[str, Any]) -> list[str]:
    return [a["action"] for a in data["actions"]]


def only(data: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [a for a in data["actions"] if a["action"] == name]
    assert isinstance(found, dict)
    return found


def owner_of(cli: Cli, mig: str) -> dict[str, Any]:
    """The owner in an Active instance's record."""
    owner = ext(cli, mig)["owner"]
    assert isinstance(owner, dict), owner
    return owner


# ---------------------------------------------------------------------------------------------
# What HAMi and kubectl hand hamimig


def run_stdin(cli: Cli, text: str, *args: str) -> Ran:
    """`kubectl get pods -o json | hamimig -o json ARGS --pods -`."""
    argv = [*cli.globals(), "-o", "json", *args, "--pods", "-"]
    result = cli.runner.invoke(app, argv, input=text, catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


# ---------------------------------------------------------------------------------------------
# Pod source and opt-in requirements


def test_recover_and_adopt_without_a_pod_source_exit_2(cli: Cli) -> None:
    gone = allocated(cli, "ns/gone", "1g.10gb", "0")  # would become Idle
    sim_create(cli, "1g.10gb", "2")  # would be adopted
    sim_create(cli, "1g.10gb", "4", no_ci=True)  # would be destroyed with adoption
    frozen = Unchanged(cli)
    for args in (
        ["recover"],
        ["recover", "--adopt"],
        ["recover", "--dry-run"],
        ["adopt", "--exclusive-owner"],
        ["adopt", "--exclusive-owner", "--gpu", "0"],
    ):
        message = refused(cli.json(*args), 2, "usage")
        assert "--assume-no-pods" in message, args
        assert "--pods" in message, args
        frozen.check()
    assert ext(cli, gone)["state"] == "Active"


def test_two_pod_sources_or_an_invalid_pod_file_exit_2(
    cli: Cli, pods_file: PodsFile, tmp_path: Path
) -> None:
    allocated(cli, "ns/gone", "1g.10gb", "0")
    sim_create(cli, "1g.10gb", "4", no_ci=True)
    frozen = Unchanged(cli)
    both = cli.json("recover", "--pods", pods_file(), "--assume-no-pods")
    assert "only one pod source" in refused(both, 2, "usage")
    not_pods = tmp_path / "deployments.json"
    not_pods.write_text(json.dumps({"apiVersion": "apps/v1", "kind": "DeploymentList"}))
    message = refused(cli.json("recover", "--adopt", "--pods", str(not_pods)), 2, "usage")
    assert str(not_pods) in message
    assert "DeploymentList" in message
    missing = refused(cli.json("recover", "--pods", str(tmp_path / "nope.json")), 2, "usage")
    assert "nope.json" in missing
    frozen.check()


def test_adopt_without_the_opt_in_exits_2(cli: Cli, pods_file: PodsFile) -> None:
    sim_create(cli, "1g.10gb", "2")
    sim_create(cli, "1g.10gb", "4", no_ci=True)
    frozen = Unchanged(cli)
    for args in (["--assume-no-pods"], ["--pods", pods_file()], ["--assume-no-pods", "--gpu", "0"]):
        message = refused(cli.json("adopt", *args), 2, "usage")
        assert "--exclusive-owner" in message, args
        assert "adoptExistingMIGInstances" in message, args
        frozen.check()


# ---------------------------------------------------------------------------------------------
# Pods' runtime identities: adopt-active, restore-active


@pytest.mark.parametrize("how", ["json-file", "yaml-file", "stdin"])
def test_pair_referenced_by_an_active_pod_is_adopted_as_active(
    cli: Cli, pods_file: PodsFile, tmp_path: Path, how: str
) -> None:
    inst = sim_create(cli, "2g.20gb", "2")
    mig = inst["migUUID"]
    uid = "5a1d3c2b-1e0f-4d9c-8b7a-6f5e4d3c2b1a"
    pod = kube_pod("team-a/trainer", [entry(inst, container=1, device=2)], uid=uid)
    other = kube_pod("kube-system/coredns")  # no annotation at all
    if how == "json-file":
        ran = cli.json("recover", "--pods", pods_file(other, pod, kind="PodList"))
    elif how == "yaml-file":
        ran = cli.json("recover", "--pods", pods_file(other, pod, fmt="yaml"))
    else:
        ran = run_stdin(cli, json.dumps(pod_list(other, pod)), "recover")
    data = ok(ran)
    assert data["kind"] == "Recovery"
    assert data["dryRun"] is False
    [action] = data["actions"]
    assert action["action"] == "adopt-active"
    assert (action["migUUID"], action["gpuUUID"]) == (mig, inst["gpuUUID"])
    assert action["placement"] == {"start": 2, "size": 2}
    assert "team-a/trainer" in action["reason"]
    assert "skippedGPUs" not in data

    doc = record(cli, mig)
    assert (doc["version"], doc["migUUID"], doc["parentGPUUUID"]) == (1, mig, inst["gpuUUID"])
    assert (doc["profile"], doc["placement"]) == ("2g.20gb", {"start": 2, "size": 2})
    assert (doc["gpuInstanceID"], doc["computeInstanceID"]) == (inst["gpuInstanceID"], 0)
    assert doc["hamimig"]["state"] == "Active"
    assert doc["hamimig"]["owner"] == {
        "namespace": "team-a",
        "name": "trainer",
        "uid": uid,
        "containerIndex": 1,
        "deviceIndex": 2,
    }
    assert doc["hamimig"]["cdiDevice"] == f"{KIND}=mig-{sha(mig)}"
    assert stat.S_IMODE(record_path(cli, mig).stat().st_mode) == 0o600
    spec = json.loads(spec_path(cli, mig).read_text())
    assert spec["kind"] == KIND
    assert [d["name"] for d in spec["devices"]] == [f"mig-{sha(mig)}"]
    if how != "json-file":
        return
    shown = ok(cli.json("show", mig))
    assert (shown["state"], shown["owner"]["name"]) == ("Active", "trainer")
    # An Active instance is never handed to another pod.
    ran = cli.json(
        "allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "2g.20gb", "--placement", "2"
    )
    assert ran.exit_code == 3


def test_record_held_by_its_pod_is_restored_active_unchanged(cli: Cli, pods_file: PodsFile) -> None:
    data = allocate(cli, "ns/p", "1g.10gb", "3", "0", "--pod-uid", pod_uid("ns", "p"))
    inst = data["instance"]
    mig = inst["migUUID"]
    plain = allocated(cli, "ns/q", "1g.10gb", "5")  # held by its owner, no runtime identity
    annotated = kube_pod("ns/p", [entry(inst)])
    owner_only = kube_pod("ns/q")
    frozen = Unchanged(cli)
    result = ok(cli.json("recover", "--pods", pods_file(annotated, owner_only)))
    assert sorted(actions(result)) == sorted([("restore-active", mig), ("restore-active", plain)])
    assert all(a["reason"] for a in result["actions"])
    assert "ns/q" in only_for(result, plain)["reason"]
    frozen.check()  # already as it should be: records, specs and layout untouched
    assert ext(cli, mig)["owner"]["uid"] == pod_uid("ns", "p")


def only_for(data: dict[str, Any], mig: str) -> dict[str, Any]:
    [found] = [a for a in data["actions"] if a["migUUID"] == mig]
    assert isinstance(found, dict)
    return found


def test_restore_active_records_the_pod_named_owner_of_an_idle_record(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "1")
    inst = ok(cli.json("show", mig))
    spec = spec_path(cli, mig).read_bytes()
    pod = kube_pod("ns/new", [entry(inst, container=0, device=1)])
    result = ok(cli.json("recover", "--pods", pods_file(pod)))
    assert actions(result) == [("restore-active", mig)]
    assert ext(cli, mig)["state"] == "Active"
    assert owner_of(cli, mig) == {
        "namespace": "ns",
        "name": "new",
        "uid": pod_uid("ns", "new"),
        "containerIndex": 0,
        "deviceIndex": 1,
    }
    assert spec_path(cli, mig).read_bytes() == spec


MISMATCHES: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "not-live": lambda inst, other: entry(inst, migUUID=ABSENT_MIG, gpuInstanceID=13),
    "wrong-gi-id": lambda inst, other: entry(inst, gpuInstanceID=inst["gpuInstanceID"] + 1),
    "wrong-ci-id": lambda inst, other: entry(inst, computeInstanceID=1),
    "wrong-placement": lambda inst, other: entry(inst, placement={"start": 4, "size": 2}),
    "wrong-profile": lambda inst, other: entry(inst, profile="1g.20gb"),
    "wrong-mig-uuid": lambda inst, other: entry(inst, migUUID=other["migUUID"]),
    "other-gpus-instance": lambda inst, other: entry(
        inst, gpuUUID=other["gpuUUID"], gpuInstanceID=other["gpuInstanceID"]
    ),
    "gpu-not-on-node": lambda inst, other: entry(inst, gpuUUID=ABSENT_GPU),
}


def test_pod_naming_an_instance_that_is_not_live_or_differs_exits_5(
    cli: Cli, pods_file: PodsFile
) -> None:
    inst = sim_create(cli, "2g.20gb", "2")
    other = sim_create(cli, "2g.20gb", "2", gpu="1")
    gone = allocated(cli, "ns/gone", "1g.10gb", "0")  # would become Idle
    sim_create(cli, "1g.10gb", "6", no_ci=True)  # would be destroyed with --adopt
    frozen = Unchanged(cli)
    for i, (mismatch, make) in enumerate(MISMATCHES.items()):
        pods = pods_file(kube_pod("ns/ok"), kube_pod("ns/bad", [make(inst, other)]))
        commands = [["recover", "--adopt"]] + ([["adopt", "--exclusive-owner"]] if i < 2 else [])
        for args in commands:
            message = refused(cli.json(*args, "--pods", pods), 5, "unverifiable")
            assert "ns/bad" in message, mismatch
            assert "nothing was changed" in message, mismatch
            frozen.check()
    assert ext(cli, gone)["state"] == "Active"


def test_record_disagreeing_with_the_pod_that_names_its_instance_exits_5(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "1")
    inst = ok(cli.json("show", mig))
    doc = record(cli, mig)
    doc["gpuInstanceID"] += 1  # the record now claims another GI ID than the live one
    record_path(cli, mig).write_text(json.dumps(doc, indent=2) + "\n")
    frozen = Unchanged(cli)
    ran = cli.json("recover", "--pods", pods_file(kube_pod("ns/p", [entry(inst)])))
    message = refused(ran, 5, "unverifiable")
    assert mig in message
    frozen.check()


def test_pods_on_other_nodes_are_ignored_with_node(cli: Cli, pods_file: PodsFile) -> None:
    inst = sim_create(cli, "1g.10gb", "2")
    # A pod on another node names a GPU of that node (not one of ours): not our business.
    far = entry(inst, migUUID=ABSENT_MIG, gpuUUID=ABSENT_GPU)
    elsewhere = kube_pod("ns/far", [far], node="gpu-node-2")
    here = kube_pod("ns/near", [entry(inst)])
    path = pods_file(elsewhere, here)
    frozen = Unchanged(cli)
    refused(cli.json("recover", "--dry-run", "--pods", path), 5, "unverifiable")
    frozen.check()
    data = ok(cli("--node", NODE, "recover", "--pods", path, output="json"))
    assert actions(data) == [("adopt-active", inst["migUUID"])]
    assert owner_of(cli, inst["migUUID"])["name"] == "near"


# ---------------------------------------------------------------------------------------------
# Records: restore-idle, Idle reuse after recovery


def test_active_records_whose_owner_pods_no_longer_hold_them_are_restored_idle(
    cli: Cli, pods_file: PodsFile
) -> None:
    owners = ("absent", "succeeded", "failed", "deleting", "new-uid", "runs")
    insts: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(owners):
        uid = pod_uid("ns", name)
        insts[name] = allocate(cli, f"ns/{name}", "1g.10gb", str(i), "0", "--pod-uid", uid)[
            "instance"
        ]
    migs = {name: inst["migUUID"] for name, inst in insts.items()}
    specs = {m: spec_path(cli, m).read_bytes() for m in migs.values()}
    hw = gpus(cli)
    pods = pods_file(
        kube_pod("ns/bystander"),
        kube_pod("ns/succeeded", [entry(insts["succeeded"])], phase="Succeeded"),
        kube_pod("ns/failed", [entry(insts["failed"])], phase="Failed"),
        kube_pod("ns/deleting", [entry(insts["deleting"])], deleting=True),
        # A new pod of the same name is not the owner.
        kube_pod("ns/new-uid", uid="0f0e0d0c-0b0a-4909-8807-060504030201"),
        kube_pod("ns/runs"),
    )
    result = ok(cli.json("recover", "--pods", pods))
    assert sorted(actions(result)) == sorted(
        [("restore-idle", migs[n]) for n in owners[:-1]] + [("restore-active", migs["runs"])]
    )
    for i, name in enumerate(owners[:-1]):
        action = only_for(result, migs[name])
        assert action["gpuUUID"] == insts[name]["gpuUUID"]
        assert action["placement"] == {"start": i, "size": 1}
        assert "was Active" in action["reason"]
        assert (ext(cli, migs[name])["state"], ext(cli, migs[name])["owner"]) == ("Idle", None)
    assert ext(cli, migs["runs"])["state"] == "Active"
    assert gpus(cli) == hw
    assert {m: spec_path(cli, m).read_bytes() for m in specs} == specs
    # Idle reuse after recovery: the same instance, nothing created.
    again = allocate(cli, "ns/next", "1g.10gb", "3")
    assert again["instance"]["migUUID"] == migs["deleting"]
    assert (again["reused"], again["created"]) == (True, False)


def test_hami_written_record_is_restored_idle_and_reused(cli: Cli) -> None:
    inst = sim_create(cli, "1g.10gb", "4")
    mig = inst["migUUID"]
    path = hami_record(cli, inst)
    hami_fields = json.loads(path.read_text())
    result = ok(cli.json("recover", "--assume-no-pods"))
    # HAMi wrote no CDI spec for hamimig's kind here: recovery writes the instance's spec.
    assert sorted(actions(result)) == [("repair-cdi", mig), ("restore-idle", mig)]
    assert all(a["reason"] for a in result["actions"])
    assert json.loads(spec_path(cli, mig).read_text())["kind"] == KIND
    after = json.loads(path.read_text())
    assert {k: after[k] for k in hami_fields} == hami_fields
    assert ok(cli.json("show", mig))["state"] == "Idle"
    again = allocate(cli, "ns/p", "1g.10gb", "4")
    assert again["instance"]["migUUID"] == mig
    assert (again["reused"], again["created"]) == (True, False)
    assert ext(cli, mig)["state"] == "Active"
    assert live(cli) == [(4, 1, mig)]


@pytest.mark.parametrize(
    "mode",
    [
        "legacy",
        "cdi",
    ],
)
def test_hami_written_record_is_left_byte_identical(cli: Cli, tmp_path: Path, mode: str) -> None:
    inst = sim_create(cli, "1g.10gb", "4")
    mig = inst["migUUID"]
    node = configured(cli, LEGACY_CONFIG) if mode == "legacy" else cli
    path = hami_record(cli, inst)
    written = path.read_bytes()
    first = ok(node.json("recover", "--assume-no-pods"))
    assert ("restore-idle", mig) in actions(first)
    assert path.read_bytes() == written
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = ok(node.json("recover", "--assume-no-pods"))
    assert actions(second) == [("restore-idle", mig)]
    assert path.read_bytes() == written


def test_idle_and_error_records_are_restored_or_retried(cli: Cli) -> None:
    keep = idle(cli, "ns/keep", "1g.10gb", "0")
    err = idle(cli, "ns/err", "1g.10gb", "2")
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", err).exit_code == 4
    assert ext(cli, err)["state"] == "Error"
    sim(cli, "fault", "clear")
    keep_record = record_path(cli, keep).read_bytes()
    result = ok(cli.json("recover", "--assume-no-pods"))
    assert sorted(actions(result)) == sorted([("restore-idle", keep), ("retry-destroy", err)])
    assert all(a["reason"] for a in result["actions"])
    assert record_path(cli, keep).read_bytes() == keep_record
    assert not record_path(cli, err).exists()
    assert not spec_path(cli, err).exists()
    assert live(cli) == [(0, 1, keep)]


# ---------------------------------------------------------------------------------------------
# Crashed allocations and reclaims (real subprocesses)


def crashed(cli: Cli, *args: str) -> None:
    ran = run_hamimig(*cli.globals(), *args)
    assert ran.returncode == CRASHED, (ran.stdout, ran.stderr)


def crash_allocate(cli: Cli, pod: str, gpu: str, profile: str, placement: str) -> None:
    crashed(cli, *allocate_args(pod, profile, placement, gpu))


@pytest.mark.slow
def test_crashed_allocations_are_rolled_back(cli: Cli) -> None:
    """crash-before the CI creation leaves a GI, crash-after a GI and CI: both are undone."""
    keep = idle(cli, "ns/keep", "1g.10gb", "6")
    sim(cli, "fault", "add", "--op", CREATE_CI, "--action", "crash-before", "--gpu", "0")
    crash_allocate(cli, "ns/before", "0", "2g.20gb", "2")
    sim(cli, "fault", "add", "--op", CREATE_CI, "--action", "crash-after", "--gpu", "1")
    crash_allocate(cli, "ns/after", "1", "3g.40gb", "4")
    assert len(intent_files(cli)) == 2
    assert live(cli, 0) == [(2, 2, None), (6, 1, keep)]
    [(start, size, half)] = live(cli, 1)
    assert (start, size) == (4, 4)
    assert half is not None
    assert state_files(cli)[0] == record_path(cli, keep).name

    frozen = Unchanged(cli)
    dry = ok(cli.json("recover", "--assume-no-pods", "--dry-run"))
    frozen.check()
    result = ok(cli.json("recover", "--assume-no-pods"))
    assert action_names(dry) == action_names(result)
    assert sorted(action_names(result)) == ["restore-idle", "rollback-intent", "rollback-intent"]
    rollbacks = sorted(
        (a["gpuUUID"], a["placement"]["start"], a["placement"]["size"], a["reason"])
        for a in result["actions"]
        if a["action"] == "rollback-intent"
    )
    assert [r[:3] for r in rollbacks] == sorted(
        [(gpu_uuid(cli, 0), 2, 2), (gpu_uuid(cli, 1), 4, 4)]
    )
    assert any("ns/before" in r[3] for r in rollbacks)
    assert any("ns/after" in r[3] for r in rollbacks)
    assert live(cli, 0) == [(6, 1, keep)]
    assert live(cli, 1) == []
    assert state_files(cli) == [record_path(cli, keep).name]
    assert sorted(entries(cli.cdi_dir)) == [spec_path(cli, keep).name]
    assert not spec_path(cli, half).exists()
    assert ext(cli, keep)["state"] == "Idle"
    # The slots are free again for fresh allocations.
    assert allocate(cli, "ns/again", "2g.20gb", "2")["created"] is True


@pytest.mark.slow
def test_allocations_crashed_before_clearing_their_intents_are_finished(
    cli: Cli, pods_file: PodsFile
) -> None:
    fault(cli, "intent.remove", action="crash-before")
    crash_allocate(cli, "ns/held", "0", "1g.10gb", "1")
    fault(cli, "intent.remove", action="crash-before")
    crash_allocate(cli, "ns/gone", "1", "1g.10gb", "1")
    assert len(intent_files(cli)) == 2
    [(_, _, held)] = live(cli, 0)
    [(_, _, gone)] = live(cli, 1)
    assert held is not None
    assert gone is not None
    assert (ext(cli, held)["state"], ext(cli, gone)["state"]) == ("Active", "Active")
    specs = {m: spec_path(cli, m).read_bytes() for m in (held, gone)}
    result = ok(cli.json("recover", "--pods", pods_file(kube_pod("ns/held"))))
    assert sorted(actions(result)) == sorted(
        [
            ("restore-active", held),
            ("restore-idle", gone),
            ("finish-intent", held),
            ("finish-intent", gone),
        ]
    )
    assert all(a["reason"] for a in result["actions"])
    assert intent_files(cli) == []
    assert ext(cli, held)["state"] == "Active"
    assert owner_of(cli, held)["name"] == "held"
    assert (ext(cli, gone)["state"], ext(cli, gone)["owner"]) == ("Idle", None)
    assert (live(cli, 0), live(cli, 1)) == ([(1, 1, held)], [(1, 1, gone)])
    assert {m: spec_path(cli, m).read_bytes() for m in specs} == specs


@pytest.mark.slow
def test_crashed_reclaims_are_finished(cli: Cli) -> None:
    """crash-before the CI destroy leaves the pair, crash-after a GI alone: both finished."""
    keep = idle(cli, "ns/keep", "1g.10gb", "0")
    before = idle(cli, "ns/a", "1g.10gb", "2")
    after = idle(cli, "ns/b", "2g.20gb", "2", gpu="1")
    fault(cli, DESTROY_CI, action="crash-before")
    crashed(cli, "reclaim", "--mig-uuid", before)
    fault(cli, DESTROY_CI, action="crash-after")
    crashed(cli, "reclaim", "--mig-uuid", after)
    assert (ext(cli, before)["state"], ext(cli, after)["state"]) == ("Reclaiming", "Reclaiming")
    assert live(cli, 0) == [(0, 1, keep), (2, 1, before)]
    assert live(cli, 1) == [(2, 2, None)]
    result = ok(cli.json("recover", "--assume-no-pods"))
    assert sorted(actions(result)) == sorted(
        [("restore-idle", keep), ("finish-reclaim", before), ("finish-reclaim", after)]
    )
    assert all(a["reason"] for a in result["actions"])
    assert live(cli, 0) == [(0, 1, keep)]
    assert live(cli, 1) == []
    assert state_files(cli) == [record_path(cli, keep).name]
    assert sorted(entries(cli.cdi_dir)) == [spec_path(cli, keep).name]


# ---------------------------------------------------------------------------------------------
# Records whose instance is gone


def test_records_of_a_reset_gpu_are_dropped(cli: Cli, pods_file: PodsFile) -> None:
    active = allocated(cli, "ns/gone", "1g.10gb", "0")
    was_idle = idle(cli, "ns/old", "2g.20gb", "2")
    other = idle(cli, "ns/other", "1g.10gb", "0", gpu="1")
    sim(cli, "reset", "--gpu", "0")
    result = ok(cli.json("recover", "--pods", pods_file(kube_pod("ns/bystander"))))
    assert sorted(actions(result)) == sorted(
        [("drop-missing", active), ("drop-missing", was_idle), ("restore-idle", other)]
    )
    for action in result["actions"]:
        assert action["reason"]
    assert only_for(result, was_idle)["placement"] == {"start": 2, "size": 2}
    assert state_files(cli) == [record_path(cli, other).name]
    assert sorted(entries(cli.cdi_dir)) == [spec_path(cli, other).name]
    assert ok(cli.json("list", "--state", "Missing"))["instances"] == []


def test_missing_instance_still_held_by_its_pod_exits_5(cli: Cli, pods_file: PodsFile) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    sim(cli, "reset", "--gpu", "0")
    frozen = Unchanged(cli)
    message = refused(cli.json("recover", "--pods", pods_file(kube_pod("ns/p"))), 5, "unverifiable")
    assert "ns/p" in message
    assert mig in message
    frozen.check()


def test_live_gi_in_a_missing_records_slot_with_another_identity_exits_5(cli: Cli) -> None:
    mig = idle(cli, "ns/old", "2g.20gb", "2")
    keep = allocated(cli, "ns/gone", "1g.10gb", "0", gpu="1")  # would become Idle
    for other in ("pair", "orphan-gi", "same-place-new-uuid"):
        sim(cli, "reset", "--gpu", "0")
        if other == "pair":
            sim_create(cli, "1g.10gb", "3")
        elif other == "orphan-gi":
            sim_create(cli, "1g.20gb", "2", no_ci=True)
        else:
            sim_create(cli, "2g.20gb", "2")
        frozen = Unchanged(cli)
        message = refused(cli.json("recover", "--assume-no-pods", "--adopt"), 5, "unverifiable")
        assert mig in message, other
        frozen.check()
    assert ext(cli, keep)["state"] == "Active"
    assert ext(cli, mig)["state"] == "Idle"


def test_record_of_a_gpu_not_on_the_node_exits_5(cli: Cli) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    doc = record(cli, mig)
    doc["parentGPUUUID"] = ABSENT_GPU
    record_path(cli, mig).write_text(json.dumps(doc, indent=2) + "\n")
    frozen = Unchanged(cli)
    message = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    assert ABSENT_GPU in message
    frozen.check()


# ---------------------------------------------------------------------------------------------
# Instances nobody knows: preserve, adopt, destroy orphan GIs


def test_unknown_instances_are_preserved_without_adoption(cli: Cli) -> None:
    pair = sim_create(cli, "1g.10gb", "2")
    orphan = sim_create(cli, "2g.20gb", "4", no_ci=True)
    frozen = Unchanged(cli)
    result = ok(cli.json("recover", "--assume-no-pods"))
    assert actions(result) == [
        ("preserve-unmanaged", pair["migUUID"]),
        ("preserve-orphan-gi", None),
    ]
    kept = only(result, "preserve-orphan-gi")
    assert (kept["gpuUUID"], kept["placement"]) == (orphan["gpuUUID"], {"start": 4, "size": 2})
    assert "adoption is not enabled" in kept["reason"]
    assert only(result, "preserve-unmanaged")["reason"]
    frozen.check()
    assert not cli.state_dir.exists() or state_files(cli) == []


@pytest.mark.parametrize("opt_in", ["--adopt", "config"])
def test_adoption_claims_pairs_and_destroys_orphan_gis_on_idle_gpus(
    cli: Cli, tmp_path: Path, opt_in: str
) -> None:
    pair = sim_create(cli, "1g.10gb", "2")
    pair1 = sim_create(cli, "3g.40gb", "4", gpu="1")
    sim_create(cli, "2g.20gb", "4", no_ci=True)
    if opt_in == "--adopt":
        result = ok(cli.json("recover", "--assume-no-pods", "--adopt"))
    else:
        result = ok(configured(cli, ADOPT_CONFIG).json("recover", "--assume-no-pods"))
    assert sorted(actions(result), key=str) == sorted(
        [
            ("adopt-idle", pair["migUUID"]),
            ("adopt-idle", pair1["migUUID"]),
            ("destroy-orphan-gi", None),
        ],
        key=str,
    )
    destroyed = only(result, "destroy-orphan-gi")
    assert destroyed["placement"] == {"start": 4, "size": 2}
    assert destroyed["reason"]
    assert live(cli) == [(2, 1, pair["migUUID"])]
    for inst in (pair, pair1):
        mig = inst["migUUID"]
        doc = record(cli, mig)
        assert (doc["parentGPUUUID"], doc["profile"]) == (inst["gpuUUID"], inst["profile"])
        assert doc["placement"] == inst["placement"]
        assert (doc["gpuInstanceID"], doc["computeInstanceID"]) == (inst["gpuInstanceID"], 0)
        assert (doc["hamimig"]["state"], doc["hamimig"]["owner"]) == ("Idle", None)
        assert doc["hamimig"]["cdiDevice"] == f"{KIND}=mig-{sha(mig)}"
        assert json.loads(spec_path(cli, mig).read_text())["kind"] == KIND
    again = allocate(cli, "ns/p", "3g.40gb", "4", "1")
    assert (again["instance"]["migUUID"], again["reused"]) == (pair1["migUUID"], True)


def test_orphan_gi_kept_while_a_process_runs_on_its_gpu(cli: Cli) -> None:
    busy = sim_create(cli, "1g.10gb", "0")
    sim(cli, "busy", "--mig-uuid", busy["migUUID"])
    sim_create(cli, "2g.20gb", "2", no_ci=True)
    sim_create(cli, "2g.20gb", "2", gpu="1", no_ci=True)
    result = ok(cli.json("recover", "--assume-no-pods", "--adopt"))
    assert sorted(actions(result), key=str) == sorted(
        [
            ("preserve-unmanaged", busy["migUUID"]),  # processes run on it: never adopted
            ("preserve-orphan-gi", None),
            ("destroy-orphan-gi", None),
        ],
        key=str,
    )
    kept = only(result, "preserve-orphan-gi")
    assert kept["gpuUUID"] == gpu_uuid(cli, 0)
    assert "process" in kept["reason"]
    destroyed = only(result, "destroy-orphan-gi")
    assert destroyed["gpuUUID"] == gpu_uuid(cli, 1)
    assert live(cli, 0) == [(0, 1, busy["migUUID"]), (2, 2, None)]
    assert live(cli, 1) == []


@pytest.mark.parametrize("pod", ["planned", "runtime-identity", "record-owner"])
def test_orphan_gi_kept_on_a_gpu_with_a_live_pod_allocation(
    cli: Cli, pods_file: PodsFile, pod: str
) -> None:
    sim_create(cli, "2g.20gb", "2", no_ci=True)
    sim_create(cli, "2g.20gb", "2", gpu="1", no_ci=True)
    expected = ["destroy-orphan-gi", "preserve-orphan-gi"]
    if pod == "planned":  # the scheduler's plan, before the device plugin completed it
        planned = {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": gpu_uuid(cli, 0),
            "profile": "1g.10gb",
            "placement": {"start": 6, "size": 1},
        }
        pods = [kube_pod("ns/p", [planned])]
    elif pod == "runtime-identity":
        held = sim_create(cli, "1g.10gb", "6")
        pods = [kube_pod("ns/p", [entry(held)])]
        expected.insert(0, "adopt-active")
    else:
        allocated(cli, "ns/p", "1g.10gb", "6")
        pods = [kube_pod("ns/p")]
        expected.append("restore-active")
    result = ok(cli.json("recover", "--adopt", "--pods", pods_file(*pods)))
    assert sorted(action_names(result)) == expected
    kept = only(result, "preserve-orphan-gi")
    assert kept["gpuUUID"] == gpu_uuid(cli, 0)
    assert "live pod allocation" in kept["reason"]
    assert only(result, "destroy-orphan-gi")["gpuUUID"] == gpu_uuid(cli, 1)
    assert (2, 2, None) in live(cli, 0)
    assert live(cli, 1) == []


def test_gpu_with_mig_disabled_is_skipped_and_reported(cli: Cli) -> None:
    pair = sim_create(cli, "1g.10gb", "0")
    sim(cli, "mig-mode", "--gpu", "1", "--disable")
    result = ok(cli.json("recover", "--assume-no-pods", "--adopt"))
    assert actions(result) == [("adopt-idle", pair["migUUID"])]
    [skipped] = result["skippedGPUs"]
    assert (skipped["index"], skipped["uuid"], skipped["migMode"]) == (
        1,
        gpu_uuid(cli, 1),
        "disabled",
    )
    assert "disabled" in skipped["reason"]
    table = cli("recover", "--assume-no-pods")
    assert table.exit_code == 0
    assert f"skipped GPU 1 ({gpu_uuid(cli, 1)})" in table.stdout


# ---------------------------------------------------------------------------------------------
# Reasons, table, dry run, second run


def busy_node(cli: Cli) -> dict[str, str]:
    """A node with something for (almost) every recovery action; returns the MIG UUIDs."""
    migs = {
        "active-gone": allocated(cli, "ns/gone", "1g.10gb", "0"),
        "idle": idle(cli, "ns/old", "1g.10gb", "1"),
        "held": allocated(cli, "ns/held", "1g.10gb", "2"),
        "missing": idle(cli, "ns/x", "1g.10gb", "6", gpu="1"),
    }
    queued = idle(cli, "ns/q", "1g.10gb", "5", gpu="1")
    fault(cli, "cdi.remove", error="EIO")
    ok(cli.json("reclaim", "--mig-uuid", queued))
    migs["queued"] = queued
    sim(cli, "reset", "--gpu", "1")
    hami = sim_create(cli, "1g.10gb", "3")
    hami_record(cli, hami)
    migs["hami"] = hami["migUUID"]
    migs["pod-pair"] = sim_create(cli, "2g.20gb", "0", gpu="1")["migUUID"]
    migs["unmanaged"] = sim_create(cli, "1g.10gb", "4")["migUUID"]
    sim_create(cli, "1g.20gb", "6", no_ci=True)
    return migs


def busy_pods(cli: Cli, pods_file: PodsFile, migs: dict[str, str]) -> str:
    pair = ok(cli.json("show", migs["pod-pair"]))
    return pods_file(
        kube_pod("ns/held"),
        kube_pod("ns/trainer", [entry(pair)]),
        kube_pod("ns/gone", phase="Succeeded"),
    )


def test_reasons_dry_run_and_a_second_run_that_finds_nothing_to_change(
    cli: Cli, pods_file: PodsFile
) -> None:
    migs = busy_node(cli)
    pods = busy_pods(cli, pods_file, migs)
    frozen = Unchanged(cli)
    plain = ok(cli.json("recover", "--dry-run", "--pods", pods))
    expected = {
        (migs["active-gone"], "restore-idle"),
        (migs["idle"], "restore-idle"),
        (migs["hami"], "restore-idle"),
        (migs["hami"], "repair-cdi"),
        (migs["held"], "restore-active"),
        (migs["missing"], "drop-missing"),
        (migs["queued"], "retry-cdi-removal"),
        (migs["pod-pair"], "adopt-active"),
        (migs["unmanaged"], "preserve-unmanaged"),
        (None, "preserve-orphan-gi"),
    }
    assert {(a["migUUID"], a["action"]) for a in plain["actions"]} == expected
    assert len(plain["actions"]) == len(expected)
    assert plain["dryRun"] is True
    frozen.check()

    table = cli("recover", "--dry-run", "--adopt", "--pods", pods)
    assert table.exit_code == 0, table.stdout
    assert "recovery (dry run: nothing changed)" in table.stdout
    dry = ok(cli.json("recover", "--dry-run", "--adopt", "--pods", pods))
    assert dry["dryRun"] is True
    # With adoption the unmarked pair is claimed; the orphan GI stays (GPU 0 has pods on it).
    assert {(a["migUUID"], a["action"]) for a in dry["actions"]} == (
        expected - {(migs["unmanaged"], "preserve-unmanaged")}
    ) | {(migs["unmanaged"], "adopt-idle")}
    for action in plain["actions"] + dry["actions"]:
        assert isinstance(action["reason"], str)
        assert action["reason"].strip()
    for action in dry["actions"]:
        assert action["action"] in table.stdout
        assert action["reason"] in table.stdout
        if action["migUUID"]:
            assert action["migUUID"] in table.stdout
    frozen.check()

    real = ok(cli.json("recover", "--adopt", "--pods", pods))
    assert real["dryRun"] is False
    assert real["actions"] == dry["actions"]
    assert not record_path(cli, migs["missing"]).exists()
    assert not spec_path(cli, migs["missing"]).exists()
    assert not spec_path(cli, migs["queued"]).exists()
    assert ext(cli, migs["active-gone"])["state"] == "Idle"
    assert ext(cli, migs["held"])["state"] == "Active"
    assert ext(cli, migs["pod-pair"])["state"] == "Active"
    assert ext(cli, migs["unmanaged"])["state"] == "Idle"
    assert spec_path(cli, migs["hami"]).exists()

    settled = Unchanged(cli)
    second = ok(cli.json("recover", "--adopt", "--pods", pods))
    settled.check()
    assert sorted(actions(second), key=str) == sorted(
        [
            ("restore-idle", migs["active-gone"]),
            ("restore-idle", migs["idle"]),
            ("restore-idle", migs["hami"]),
            ("restore-idle", migs["unmanaged"]),
            ("restore-active", migs["held"]),
            ("restore-active", migs["pod-pair"]),
            ("preserve-orphan-gi", None),
        ],
        key=str,
    )
    third = ok(cli.json("recover", "--adopt", "--pods", pods, "--dry-run"))
    assert third["actions"] == second["actions"]
    settled.check()


# ---------------------------------------------------------------------------------------------
# Fail closed on unreadable records


def corrupt(cli: Cli, kind: str, victim: str, tmp_path: Path) -> str:
    """Damage the state directory; returns the file name the refusal must name."""
    path = record_path(cli, victim)
    if kind == "corrupt-json":
        path.write_bytes(path.read_bytes()[:40])
        return path.name
    if kind == "symlink":
        outside = tmp_path / "elsewhere.json"
        outside.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(outside)
        return path.name
    if kind == "directory":
        name = f"hami-owned-mig-{sha('MIG-dir')}.json"
        (cli.state_dir / name).mkdir()
        return name
    if kind == "name-mismatch":
        wrong = cli.state_dir / f"hami-owned-mig-{sha(ABSENT_MIG)}.json"
        path.rename(wrong)
        return wrong.name
    if kind == "duplicate":
        copy = cli.state_dir / "hami-owned-copy.json"
        copy.write_bytes(path.read_bytes())
        copy.chmod(0o600)
        return copy.name
    if kind == "newer-schema":
        doc = json.loads(path.read_text())
        doc["hamimig"]["schemaVersion"] = 2
        path.write_text(json.dumps(doc, indent=2) + "\n")
        return path.name
    if kind == "hami-version-2":
        doc = json.loads(path.read_text())
        doc["version"] = 2
        path.write_text(json.dumps(doc, indent=2) + "\n")
        return path.name
    raise AssertionError(kind)


CORRUPTIONS = (
    "corrupt-json",
    "symlink",
    "directory",
    "name-mismatch",
    "duplicate",
    "newer-schema",
    "hami-version-2",
)


def test_unreadable_record_stops_recovery_before_any_change(cli: Cli, tmp_path: Path) -> None:
    victim = idle(cli, "ns/victim", "1g.10gb", "1")
    gone = allocated(cli, "ns/gone", "1g.10gb", "0")  # would become Idle
    pair = sim_create(cli, "1g.10gb", "2")["migUUID"]  # would be adopted
    sim_create(cli, "2g.20gb", "4", no_ci=True)  # would be destroyed
    pristine = tmp_path / "pristine-state"
    shutil.copytree(cli.state_dir, pristine)
    for kind in CORRUPTIONS:
        name = corrupt(cli, kind, victim, tmp_path)
        frozen = Unchanged(cli)
        for args in (
            ["recover", "--assume-no-pods", "--adopt"],
            ["adopt", "--exclusive-owner", "--assume-no-pods"],
        ):
            message = refused(cli.json(*args), 5, "unverifiable")
            assert name in message, (kind, args)
            assert "nothing was changed" in message, (kind, args)
            frozen.check()
        shutil.rmtree(cli.state_dir)
        shutil.copytree(pristine, cli.state_dir)
    assert ext(cli, gone)["state"] == "Active"
    # The damage undone, recovery runs: proof that each refusal was caused by the damage alone.
    assert sorted(actions(ok(cli.json("recover", "--assume-no-pods")))) == sorted(
        [
            ("restore-idle", gone),
            ("restore-idle", victim),
            ("preserve-unmanaged", pair),
            ("preserve-orphan-gi", None),
        ]
    )


def test_record_with_a_hostile_mig_uuid_stops_recovery(cli: Cli) -> None:
    hostile = "MIG-../../x"
    doc = {
        "version": 1,
        "migUUID": hostile,
        "parentGPUUUID": gpu_uuid(cli, 0),
        "profile": "1g.10gb",
        "placement": {"start": 5, "size": 1},
        "gpuInstanceID": 13,
        "computeInstanceID": 0,
    }
    cli.state_dir.mkdir(mode=0o750)
    path = record_path(cli, hostile)
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    sim_create(cli, "1g.10gb", "2")
    frozen = Unchanged(cli)
    ran = cli.json("recover", "--assume-no-pods", "--adopt")
    message = refused(ran, 5, "unverifiable")
    assert path.name in message or hostile in message
    frozen.check()


# ---------------------------------------------------------------------------------------------
# Fail closed on pods that cannot be trusted

BAD_ANNOTATIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "partial-no-ci": lambda inst: json.dumps([entry(inst, computeInstanceID=None)]),
    "partial-only-uuid": lambda inst: json.dumps(
        [entry(inst, gpuInstanceID=None, computeInstanceID=None)]
    ),
    "hostile-mig-uuid": lambda inst: json.dumps([entry(inst, migUUID="MIG-../../x")]),
    "hostile-gpu-uuid": lambda inst: json.dumps([entry(inst, gpuUUID="GPU-../../x")]),
    "duplicate-slot": lambda inst: json.dumps([entry(inst), entry(inst, migUUID=ABSENT_MIG)]),
    "not-json": lambda inst: '[{"containerIndex":0,',
    "not-a-list": lambda inst: json.dumps(entry(inst)),
}


def test_malformed_annotation_stops_recovery_adoption_and_reconcile(
    cli: Cli, pods_file: PodsFile
) -> None:
    inst = sim_create(cli, "1g.10gb", "2")
    gone = allocated(cli, "ns/gone", "1g.10gb", "0")  # would become Idle / released
    sim_create(cli, "2g.20gb", "4", no_ci=True)  # would be destroyed
    frozen = Unchanged(cli)
    for i, (bad, make) in enumerate(BAD_ANNOTATIONS.items()):
        pods = pods_file(kube_pod("ns/ok"), kube_pod("ns/bad", raw=make(inst)))
        commands = [["recover", "--adopt"]]
        if i < 2:
            commands += [["adopt", "--exclusive-owner"], ["reconcile"]]
        for args in commands:
            message = refused(cli.json(*args, "--pods", pods), 5, "unverifiable")
            assert "ns/bad" in message, (bad, args)
            frozen.check()
    assert ext(cli, gone)["state"] == "Active"


def test_one_page_of_a_paginated_list_stops_recovery(cli: Cli, pods_file: PodsFile) -> None:
    allocated(cli, "ns/gone", "1g.10gb", "0")
    frozen = Unchanged(cli)
    pods = pods_file(kube_pod("ns/a"), kind="PodList", more=True)
    for command in ("recover", "reconcile"):
        message = refused(cli.json(command, "--pods", pods), 5, "unverifiable")
        assert "incomplete" in message
        frozen.check()


# ---------------------------------------------------------------------------------------------
# reconcile with pods


def test_reconcile_releases_instances_whose_pods_are_gone(cli: Cli, pods_file: PodsFile) -> None:
    runs = allocated(cli, "ns/runs", "1g.10gb", "0")
    done = allocated(cli, "ns/done", "1g.10gb", "1")
    gone = allocated(cli, "ns/gone", "1g.10gb", "2")
    dying = allocated(cli, "ns/dying", "1g.10gb", "3")
    named = allocated(cli, "ns/named", "1g.10gb", "4")
    named_inst = ok(cli.json("show", named))
    specs = {m: spec_path(cli, m).read_bytes() for m in (runs, done, gone, dying)}
    hw = gpus(cli)
    pods = pods_file(
        kube_pod("ns/runs"),
        kube_pod("ns/done", phase="Succeeded"),
        kube_pod("ns/dying", deleting=True),
        # Another pod whose annotation names the instance keeps it held.
        kube_pod("ns/heir", [entry(named_inst)]),
    )
    dry = ok(cli.json("reconcile", "--dry-run", "--pods", pods))
    assert ext(cli, gone)["state"] == "Active"
    data = ok(cli.json("reconcile", "--pods", pods))
    assert data["kind"] == "Reconcile"
    assert data["actions"] == dry["actions"]
    assert sorted(actions(data)) == sorted(
        [("release-idle", done), ("release-idle", gone), ("release-idle", dying)]
    )
    assert "no longer exists" in only_for(data, gone)["reason"]
    assert "Succeeded" in only_for(data, done)["reason"]
    assert "deleted" in only_for(data, dying)["reason"]
    for mig in (done, gone, dying):
        assert (ext(cli, mig)["state"], ext(cli, mig)["owner"]) == ("Idle", None)
    assert ext(cli, runs)["state"] == "Active"
    assert ext(cli, named)["state"] == "Active"
    assert gpus(cli) == hw  # release never touches the hardware
    assert {m: spec_path(cli, m).read_bytes() for m in specs} == specs
    settled = Unchanged(cli)
    assert ok(cli.json("reconcile", "--pods", pods))["actions"] == []
    settled.check()


def test_reconcile_retries_queue_and_error_but_not_with_a_malformed_annotation(
    cli: Cli, pods_file: PodsFile
) -> None:
    gone = allocated(cli, "ns/gone", "1g.10gb", "0")
    err = idle(cli, "ns/err", "1g.10gb", "2")
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", err).exit_code == 4
    sim(cli, "fault", "clear")  # a retry would now succeed
    queued = idle(cli, "ns/q", "1g.10gb", "5")
    fault(cli, "cdi.remove", error="EIO")
    ok(cli.json("reclaim", "--mig-uuid", queued))
    assert ext(cli, err)["state"] == "Error"
    assert spec_path(cli, queued).exists()

    # A malformed annotation: every state change is skipped, the retries included.
    pods = pods_file(kube_pod("ns/bad", raw='[{"containerIndex":0}]'))
    frozen = Unchanged(cli)
    message = refused(cli.json("reconcile", "--pods", pods), 5, "unverifiable")
    assert "ns/bad" in message
    frozen.check()

    # Every owner running: the retries happen, nothing is released.
    data = ok(cli.json("reconcile", "--pods", owners_running(cli)))
    assert sorted(actions(data)) == sorted([("retry-cdi-removal", queued), ("retry-destroy", err)])
    assert all(a["reason"] for a in data["actions"])
    assert not spec_path(cli, queued).exists()
    assert not record_path(cli, err).exists()
    assert not spec_path(cli, err).exists()
    assert ext(cli, gone)["state"] == "Active"
    assert live(cli) == [(0, 1, gone)]


# ---------------------------------------------------------------------------------------------
# adopt


def test_adopt_claims_unmarked_pairs_and_leaves_orphan_gis(cli: Cli) -> None:
    pair0 = sim_create(cli, "1g.10gb", "2")
    pair1 = sim_create(cli, "2g.20gb", "0", gpu="1")
    sim_create(cli, "2g.20gb", "4", no_ci=True)

    dry = ok(cli.json("adopt", "--exclusive-owner", "--assume-no-pods", "--gpu", "0", "--dry-run"))
    assert dry["kind"] == "Adoption"
    assert dry["dryRun"] is True
    assert state_files(cli) == []
    data = ok(cli.json("adopt", "--exclusive-owner", "--assume-no-pods", "--gpu", "0"))
    assert data["dryRun"] is False
    assert data["actions"] == dry["actions"]
    assert actions(data) == [("adopt-idle", pair0["migUUID"]), ("preserve-orphan-gi", None)]
    assert all(a["reason"] for a in data["actions"])
    assert ext(cli, pair0["migUUID"])["state"] == "Idle"
    assert ext(cli, pair0["migUUID"])["owner"] is None
    assert spec_path(cli, pair0["migUUID"]).exists()
    assert not record_path(cli, pair1["migUUID"]).exists()  # another GPU
    assert live(cli, 0) == [(2, 1, pair0["migUUID"]), (4, 2, None)]  # the orphan GI stays

    gpu1 = gpu_uuid(cli, 1)
    data = ok(cli.json("adopt", "--exclusive-owner", "--assume-no-pods", "--gpu", gpu1))
    assert actions(data) == [("adopt-idle", pair1["migUUID"])]
    assert ext(cli, pair1["migUUID"])["state"] == "Idle"
    again = allocate(cli, "ns/p", "2g.20gb", "0", "1")
    assert (again["instance"]["migUUID"], again["reused"]) == (pair1["migUUID"], True)


def test_adopt_leaves_instances_with_records_alone(cli: Cli, pods_file: PodsFile) -> None:
    active = allocated(cli, "ns/p", "1g.10gb", "0")
    held = allocated(cli, "ns/gone", "1g.10gb", "1")
    err = idle(cli, "ns/err", "1g.10gb", "3")
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", err).exit_code == 4
    unmarked = sim_create(cli, "1g.10gb", "5")["migUUID"]
    records = {m: record_path(cli, m).read_bytes() for m in (active, held, err)}
    data = ok(cli.json("adopt", "--exclusive-owner", "--pods", pods_file(kube_pod("ns/p"))))
    assert actions(data) == [("adopt-idle", unmarked)]
    assert {m: record_path(cli, m).read_bytes() for m in records} == records
    settled = Unchanged(cli)
    ok(cli.json("adopt", "--exclusive-owner", "--assume-no-pods"))
    settled.check()
    # The Active instance is never handed to another pod.
    ran = cli.json(
        "allocate", "--pod", "ns/thief", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0"
    )
    assert ran.exit_code == 3


@pytest.mark.slow
def test_adopt_leaves_a_crashed_allocations_instance_to_recover(cli: Cli) -> None:
    fault(cli, CREATE_CI, action="crash-after")
    crash_allocate(cli, "ns/crash", "0", "1g.10gb", "2")
    [(_, _, half)] = live(cli)
    assert half is not None
    ran = cli.json("adopt", "--exclusive-owner", "--assume-no-pods")
    # Skipping the in-flight instance or refusing until `recover` ran are both fail-safe.
    if ran.exit_code == 0:
        assert actions(ran.json()) == []
    else:
        refused(ran, 5, "unverifiable")
    assert not record_path(cli, half).exists()
    # recover then undoes the failed allocation instead of caching its partial work.
    result = ok(cli.json("recover", "--assume-no-pods"))
    assert action_names(result) == ["rollback-intent"]
    assert live(cli) == []


def test_adopt_makes_a_pod_referenced_pair_active(
    cli: Cli, pods_file: PodsFile, tmp_path: Path
) -> None:
    held = sim_create(cli, "1g.10gb", "2")
    free = sim_create(cli, "1g.10gb", "3")
    node = configured(cli, ADOPT_CONFIG)
    data = ok(node.json("adopt", "--pods", pods_file(kube_pod("ns/p", [entry(held)]))))
    assert sorted(actions(data)) == sorted(
        [("adopt-active", held["migUUID"]), ("adopt-idle", free["migUUID"])]
    )
    assert ext(cli, held["migUUID"])["state"] == "Active"
    assert owner_of(cli, held["migUUID"])["name"] == "p"
    assert ext(cli, free["migUUID"])["state"] == "Idle"
