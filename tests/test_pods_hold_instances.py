"""Who holds an instance is written on the pods, not in our records.

HAMi's device plugin hands an Idle instance to a pod by writing the pod's allocation annotation
and nothing else, so a record that says Idle (or Error) may be a running pod's. `allocate` and
`reclaim` therefore always take a pod source, and an Idle or Error instance that a holding pod's
annotation names, or whose slices a pod's entry reserves, is never handed out, reclaimed or
retried for destruction. These run the reproductions through the CLI.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hamimig.cli.app import app
from tests.support.cli import (
    Cli,
    allocated,
    configured,
    fail_destroys,
    idle,
    instances,
    ok,
    refused,
    sim,
    state_of,
)
from tests.support.kube import NODE as KUBE_NODE
from tests.support.kube import FakeApi, node_doc, serving
from tests.support.node import gpus, live
from tests.support.pods import PodsFile, entry, kube_pod
from tests.support.unchanged import Unchanged


@pytest.fixture
def bare(cli: Cli) -> Cli:
    """The node of `cli`, run exactly as written: no pod source added."""
    return Cli(cli.sim, cli.state_dir, cli.cdi_dir, pod_source=False)


def instance(cli: Cli, mig: str) -> dict[str, Any]:
    [found] = [i for i in instances(cli) if i["migUUID"] == mig]
    return found


def holder(cli: Cli, mig: str, **change: Any) -> dict[str, Any]:
    """A running pod whose annotation names `mig` (HAMi's plugin handed it out)."""
    return kube_pod("ns/holder", [entry(instance(cli, mig), **change)])


def reserver(cli: Cli, mig: str, key: str = "ns/reserver") -> dict[str, Any]:
    """A running pod whose entry reserves `mig`'s slot: no runtime identity yet."""
    none = {"migUUID": None, "gpuInstanceID": None, "computeInstanceID": None}
    return kube_pod(key, [entry(instance(cli, mig), **none)])


# ---------------------------------------------------------------------------------------------
# A pod source is required, statically


ALLOCATE = ["allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb"]
RECLAIMS = [
    ["reclaim", "--mig-uuid", "MIG-00000000-0000-0000-0000-000000000000"],
    ["reclaim", "--gpu", "0", "--placement", "0"],
    ["reclaim", "--gpu", "0", "--all-idle"],
    ["reclaim", "--gpu", "0", "--idle-older-than", "1h"],
]


@pytest.mark.parametrize("command", [ALLOCATE, *RECLAIMS], ids=lambda c: " ".join(c[:3]))
@pytest.mark.parametrize("dry_run", [False, True])
def test_allocate_and_reclaim_need_a_pod_source(
    bare: Cli, command: list[str], dry_run: bool
) -> None:
    before = Unchanged(bare)
    args = [*command, *(["--dry-run"] if dry_run else [])]
    message = refused(bare.json("--node", "gpu-7", *args), 2, "usage")
    assert "a pod source is required" in message
    # A line that works on the node: this very command fed this node's pods.
    feed = "kubectl get pods -A -o json --field-selector spec.nodeName=gpu-7 | hamimig"
    assert feed in message and " --node gpu-7 " in message
    assert f" {' '.join(args)} --pods -" in message
    assert f"--sim {bare.sim}" in message
    before.check()


def test_the_requirement_does_not_depend_on_the_plan(bare: Cli) -> None:
    """Nothing Idle anywhere, nothing to reclaim: still refused, before any lookup."""
    ran = bare("reclaim", "--gpu", "0", "--all-idle")
    assert ran.exit_code == 2
    assert "a pod source is required" in ran.stderr
    assert "--field-selector spec.nodeName=NODE" in ran.stderr  # no node name given


def test_release_and_forget_need_no_pod_source(cli: Cli, bare: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    ok(bare.json("release", "--pod", "ns/p"))
    ok(bare.json("forget", mig))


def test_one_pod_source_only(bare: Cli, pods_file: PodsFile) -> None:
    message = refused(bare.json(*ALLOCATE, "--pods", pods_file(), "--assume-no-pods"), 2, "usage")
    assert "give only one pod source" in message


# ---------------------------------------------------------------------------------------------
# allocate


def test_an_idle_instance_a_pod_names_is_not_handed_to_another(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    pods = pods_file(holder(cli, mig))
    before = Unchanged(cli)
    ran = cli.json(*ALLOCATE, "--placement", "0", "--pods", pods)
    message = refused(ran, 3, "conflict")
    assert "held by pod ns/holder" in message
    [blocked] = ran.json()["error"]["blockers"]
    [blocker] = blocked["instances"]
    held = {"pod": "ns/holder", "how": "names it"}
    assert (blocker["migUUID"], blocker["heldBy"], blocker["state"]) == (mig, held, "Idle")
    dry = refused(
        cli.json(*ALLOCATE, "--placement", "0", "--pods", pods, "--dry-run"), 3, "conflict"
    )
    assert dry == message
    before.check()
    # Without a placement it is created elsewhere, never reused.
    data = ok(cli.json(*ALLOCATE, "--pods", pods))
    assert data["created"] and data["instance"]["migUUID"] != mig
    assert data["reclaimed"] == []
    assert state_of(cli, mig) == "Idle"


def test_a_reserved_slot_blocks_reuse_and_reclaim_for_another_pod(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/old", "2g.20gb", "0")
    pods = pods_file(reserver(cli, mig))
    # A 1g.10gb at slice 0 overlaps the 2g.20gb at 0:2 that ns/reserver's entry reserves.
    one = ["allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0"]
    message = refused(cli.json(*one, "--pods", pods), 3, "conflict")
    assert "reserved by pod ns/reserver" in message
    # The exact match is not reused for another pod either.
    two = ["allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "2g.20gb", "--placement", "0"]
    assert "reserved by pod ns/reserver" in refused(cli.json(*two, "--pods", pods), 3, "conflict")
    assert state_of(cli, mig) == "Idle"
    assert [i["migUUID"] for i in instances(cli)] == [mig]


def test_the_requesters_own_reserved_entry_never_blocks_it(cli: Cli, pods_file: PodsFile) -> None:
    """HAMi's own flow: the scheduler reserved the slot on the requester, which reuses the
    Idle instance there."""
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    pods = pods_file(reserver(cli, mig, key="ns/new"))
    data = ok(cli.json(*ALLOCATE, "--placement", "0", "--pods", pods))
    assert data["reused"] and data["instance"]["migUUID"] == mig


def test_another_slot_of_the_same_pod_still_blocks(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    pods = pods_file(kube_pod("ns/new", [entry(instance(cli, mig), device=1)]))
    message = refused(cli.json(*ALLOCATE, "--placement", "0", "--pods", pods), 3, "conflict")
    assert "held by pod ns/new" in message


def test_the_requesters_entry_naming_an_idle_record_is_unverifiable(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    pods = pods_file(kube_pod("ns/new", [entry(instance(cli, mig))]))
    before = Unchanged(cli)
    for dry in ([], ["--dry-run"]):
        message = refused(cli.json(*ALLOCATE, "--pods", pods, *dry), 5, "unverifiable")
        assert mig in message and "Idle" in message and "hamimig recover" in message
    before.check()


def test_an_error_instance_a_pod_names_is_not_destroyed_to_make_room(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", mig).exit_code == 4
    assert state_of(cli, mig) == "Error"
    sim(cli, "fault", "clear")
    pods = pods_file(holder(cli, mig))
    message = refused(cli.json(*ALLOCATE, "--placement", "0", "--pods", pods), 3, "conflict")
    assert "held by pod ns/holder" in message
    assert state_of(cli, mig) == "Error"
    assert (0, 1, mig) in live(cli)


def test_a_pod_list_older_than_five_minutes_is_refused(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    pods = pods_file()
    past = time.time() - 301
    os.utime(pods, (past, past))
    before = Unchanged(cli)
    for command in (
        ALLOCATE,
        ["reclaim", "--mig-uuid", mig],
        ["reclaim", "--gpu", "0", "--all-idle"],
    ):
        message = refused(cli.json(*command, "--pods", pods), 5, "unverifiable")
        assert "was taken 5m" in message and "at most 5m old" in message
    before.check()


# ---------------------------------------------------------------------------------------------
# reclaim


def test_reclaim_by_mig_uuid_names_the_pod(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    before = Unchanged(cli)
    for pod in (holder(cli, mig), reserver(cli, mig)):
        pods = pods_file(pod)
        for dry in ([], ["--dry-run"]):
            message = refused(
                cli.json("reclaim", "--mig-uuid", mig, "--pods", pods, *dry), 3, "conflict"
            )
            assert mig in message and "by pod ns/" in message
    before.check()


def test_reclaim_by_placement_lists_the_pod_as_a_blocker(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    free = idle(cli, "ns/other", "1g.10gb", "1")
    pods = pods_file(reserver(cli, mig))
    ran = cli.json("reclaim", "--gpu", "0", "--placement", "0:2", "--pods", pods)
    refused(ran, 3, "conflict")
    [blocked] = ran.json()["error"]["blockers"]
    held = {"pod": "ns/reserver", "how": "reserves its slot"}
    assert [(b["migUUID"], b["heldBy"]) for b in blocked["instances"]] == [(mig, held)]
    assert state_of(cli, mig) == state_of(cli, free) == "Idle"


@pytest.mark.parametrize("selector", [["--all-idle"], ["--idle-older-than", "0s"]])
def test_reclaim_of_many_skips_what_a_pod_holds(
    cli: Cli, pods_file: PodsFile, selector: list[str]
) -> None:
    named = idle(cli, "ns/a", "1g.10gb", "0")
    reserved = idle(cli, "ns/b", "1g.10gb", "1")
    free = idle(cli, "ns/c", "1g.10gb", "2")
    if selector[0] == "--idle-older-than":
        config = configured(cli, "devices:\n  nvidia:\n    idleTTL: 1h\n")
        ok(config.json("reconcile", "--pods", pods_file()))  # start the idle clocks
        sim(cli, "clock", "--advance", "1s")
    pods = pods_file(holder(cli, named), reserver(cli, reserved))
    data = ok(cli.json("reclaim", "--gpu", "0", *selector, "--pods", pods))
    assert [v["migUUID"] for v in data["reclaimed"]] == [free]
    skipped = {s["migUUID"]: s["reason"] for s in data["skipped"]}
    assert skipped == {
        named: "pod ns/holder's allocation annotation names it",
        reserved: "pod ns/reserver's allocation annotation reserves its slot",
    }
    assert state_of(cli, named) == state_of(cli, reserved) == "Idle"


def test_an_annotation_naming_the_instance_on_another_slot_still_holds_it(
    cli: Cli, pods_file: PodsFile
) -> None:
    """Named by MIG UUID only: the entry's placement is wrong, the UUID decides."""
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    pods = pods_file(holder(cli, mig, placement={"start": 5, "size": 1}))
    message = refused(cli.json("reclaim", "--mig-uuid", mig, "--pods", pods), 3, "conflict")
    assert "held by pod ns/holder" in message


def test_a_finished_pods_annotation_holds_nothing(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    done = kube_pod("ns/holder", [entry(instance(cli, mig))], phase="Succeeded")
    data = ok(cli.json("reclaim", "--mig-uuid", mig, "--pods", pods_file(done)))
    assert [v["migUUID"] for v in data["reclaimed"]] == [mig]


# ---------------------------------------------------------------------------------------------
# reconcile's retries


def error_instance(cli: Cli) -> str:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", mig).exit_code == 4
    sim(cli, "fault", "clear")
    return mig


def test_reconcile_does_not_retry_an_error_instance_a_pod_holds(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = error_instance(cli)
    [kept] = ok(cli.json("reconcile", "--pods", pods_file(holder(cli, mig))))["actions"]
    assert (kept["action"], kept["migUUID"]) == ("skip", mig)
    assert "pod ns/holder's allocation annotation names it" in kept["reason"]
    [kept] = ok(cli.json("reconcile"))["actions"]  # no pod list: a pod may hold it
    assert kept["action"] == "skip" and "no pod list" in kept["reason"]
    stale = pods_file()
    past = time.time() - 400
    os.utime(stale, (past, past))
    [kept] = ok(cli.json("reconcile", "--pods", stale))["actions"]
    assert kept["action"] == "skip" and "was taken 6m" in kept["reason"]
    assert state_of(cli, mig) == "Error"
    [done] = ok(cli.json("reconcile", "--pods", pods_file()))["actions"]
    assert (done["action"], done["migUUID"]) == ("retry-destroy", mig)
    assert mig not in [i["migUUID"] for i in instances(cli)]


def test_reconcile_without_pods_still_finishes_what_no_pod_can_use(cli: Cli) -> None:
    """A GI whose compute instance is gone has no MIG device: no pod can hold it."""
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    sim(cli, "fault", "add", "--op", "nvmlGpuInstanceDestroy", "--error", "IN_USE")
    assert cli.json("reclaim", "--mig-uuid", mig).exit_code == 4
    [done] = ok(cli.json("reconcile"))["actions"]
    assert (done["action"], done["migUUID"]) == ("retry-destroy", mig)


# ---------------------------------------------------------------------------------------------
# The default pod source


def test_only_kube_may_be_a_default(cli: Cli) -> None:
    for value in ("assume-no-pods", "none", "file"):
        config = configured(cli, f"pods:\n  source: {value}\n")
        message = refused(config.json("config", "show"), 2, "usage")
        assert "pods.source" in message and "expected 'kube'" in message
    env = {"HAMIMIG_POD_SOURCE": "assume-no-pods"}
    ran = cli.runner.invoke(app, [*cli.globals(), "-o", "json", "config", "show"], env=env)
    assert ran.exit_code == 2 and "HAMIMIG_POD_SOURCE" in ran.stdout


def test_config_show_names_the_default(cli: Cli) -> None:
    shown = {s["key"]: s for s in ok(cli.json("config", "show"))["settings"]}
    assert shown["pods.source"]["value"] is None
    config = configured(cli, "pods:\n  source: kube\n")
    shown = {s["key"]: s for s in ok(config.json("config", "show"))["settings"]}
    assert shown["pods.source"]["value"] == "kube"
    assert shown["pods.source"]["source"] == str(config.config)


def test_the_default_needs_the_node_name(cli: Cli) -> None:
    bare = Cli(cli.sim, cli.state_dir, cli.cdi_dir, pod_source=False)
    config = configured(bare, "pods:\n  source: kube\n")
    message = refused(config.json(*ALLOCATE), 2, "usage")
    assert "default pod source (kube" in message and "node" in message


def test_the_default_lists_the_pods_through_the_api(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("kubernetes")
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    bare = Cli(cli.sim, cli.state_dir, cli.cdi_dir, pod_source=False)
    config = configured(bare, "pods:\n  source: kube\n")
    ours = [g["uuid"] for g in json.loads(cli.sim.read_text())["gpus"]]
    with serving(FakeApi(), tmp_path, monkeypatch) as api:
        api.node = node_doc(register=json.dumps([{"id": ours[0], "count": 10}]))
        pod = holder(cli, mig)
        pod["spec"]["nodeName"] = KUBE_NODE
        api.body = json.dumps({"kind": "PodList", "items": [pod]}).encode()
        message = refused(
            config.json("--node", KUBE_NODE, "reclaim", "--mig-uuid", mig), 3, "conflict"
        )
        assert "held by pod ns/holder" in message
        assert api.pod_requests()
        # An explicit source still wins over the default.
        data = ok(
            config.json("--node", KUBE_NODE, "reclaim", "--mig-uuid", mig, "--assume-no-pods")
        )
        assert [v["migUUID"] for v in data["reclaimed"]] == [mig]


# ---------------------------------------------------------------------------------------------
# Found by the red-team pass over this rule


def test_recover_does_not_destroy_an_error_instance_a_pod_reserves(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = error_instance(cli)
    pods = pods_file(reserver(cli, mig))
    data = ok(cli.json("recover", "--pods", pods))
    [kept] = [a for a in data["actions"] if a["migUUID"] == mig]
    assert kept["action"] == "skip" and "reserves its slot" in kept["reason"]
    assert state_of(cli, mig) == "Error"


def test_recover_with_an_old_pod_list_does_not_destroy_a_complete_error_instance(
    cli: Cli, pods_file: PodsFile
) -> None:
    def at(seconds: float) -> str:
        moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
        return moment.isoformat(timespec="seconds").replace("+00:00", "Z")

    now = time.time()
    sim(cli, "clock", "--set", at(now - 1200))  # the instance failed 20 minutes ago
    mig = error_instance(cli)
    sim(cli, "clock", "--set", at(now))
    old = pods_file()  # listed after that, 10 minutes ago: too old to say none holds it now
    os.utime(old, (now - 600, now - 600))
    data = ok(cli.json("recover", "--pods", old))
    [kept] = [a for a in data["actions"] if a["migUUID"] == mig]
    assert kept["action"] == "skip" and "a pod may hold it" in kept["reason"]
    assert state_of(cli, mig) == "Error"
    # The assertion that no pod holds anything is the operator's to make.
    ok(cli.json("recover", "--assume-no-pods"))
    assert mig not in [i["migUUID"] for i in instances(cli)]


def test_an_uppercase_mig_uuid_in_an_annotation_holds_the_instance(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    pod = holder(cli, mig, migUUID=mig.upper(), placement={"start": 5, "size": 1})
    pods = pods_file(pod)
    message = refused(cli.json("reclaim", "--mig-uuid", mig, "--pods", pods), 3, "conflict")
    assert "held by pod ns/holder" in message
    message = refused(cli.json(*ALLOCATE, "--placement", "0", "--pods", pods), 3, "conflict")
    assert "held by pod ns/holder" in message
    own = pods_file(kube_pod("ns/new", [entry(instance(cli, mig), migUUID=mig.upper())]))
    refused(cli.json(*ALLOCATE, "--pods", own), 5, "unverifiable")
    assert state_of(cli, mig) == "Idle"


def test_two_pods_naming_one_instance_is_unverifiable(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    one = kube_pod("ns/one", [entry(instance(cli, mig))])
    two = kube_pod("ns/two", [entry(instance(cli, mig))])
    pods = pods_file(one, two)
    before = Unchanged(cli)
    for command in (
        ALLOCATE,
        ["reclaim", "--mig-uuid", mig],
        ["reclaim", "--gpu", "0", "--all-idle"],
    ):
        message = refused(cli.json(*command, "--pods", pods), 5, "unverifiable")
        assert "ns/one" in message and "ns/two" in message
    before.check()


def test_a_list_without_items_is_not_an_empty_list(cli: Cli, tmp_path: Path) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    for doc in ({"kind": "List"}, {"kind": "PodList", "apiVersion": "v1"}):
        path = tmp_path / "cut.json"
        path.write_text(json.dumps(doc))
        message = refused(cli.json(*ALLOCATE, "--pods", str(path)), 2, "usage")
        assert "no items key" in message
    assert state_of(cli, mig) == "Idle"


# ---------------------------------------------------------------------------------------------
# Claims beyond the instances the records know


def free_slot(cli: Cli, start: int, profile: str = "1g.10gb", size: int = 1) -> dict[str, Any]:
    """An instance-shaped dict for free slices of GPU 0, for `entry` (no runtime identity)."""
    return {
        "gpuUUID": gpus(cli)[0]["uuid"],
        "profile": profile,
        "placement": {"start": start, "size": size},
        "migUUID": None,
        "gpuInstanceID": None,
        "computeInstanceID": None,
    }


def test_free_slices_another_pods_entry_reserves_are_not_created_on(
    cli: Cli, pods_file: PodsFile
) -> None:
    """The scheduler reserved slice 0 for ns/reserver; the plugin would hand ns/reserver
    whatever is created there, so another pod never gets an instance on it."""
    pods = pods_file(kube_pod("ns/reserver", [entry(free_slot(cli, 0))]))
    before = Unchanged(cli)
    for dry in ([], ["--dry-run"]):
        ran = cli.json(*ALLOCATE, "--placement", "0", "--pods", pods, *dry)
        message = refused(ran, 3, "conflict")
        assert "slices 0:1 (1g.10gb) are free but reserved by pod ns/reserver" in message
        [blocked] = ran.json()["error"]["blockers"]
        assert blocked["instances"] == [
            {
                "migUUID": None,
                "gpuInstanceID": None,
                "profile": "1g.10gb",
                "placement": {"start": 0, "size": 1},
                "state": "Reserved",
                "owner": None,
                "busy": False,
                "heldBy": {"pod": "ns/reserver", "how": "reserves its slot"},
            }
        ]
    before.check()
    # Left to choose, it takes other slices; the requester's own reservation is its own.
    data = ok(cli.json(*ALLOCATE, "--pods", pods))
    assert data["instance"]["placement"]["start"] != 0
    mine = pods_file(kube_pod("ns/mine", [entry(free_slot(cli, 0))]))
    own = ["allocate", "--pod", "ns/mine", "--gpu", "0", "--profile", "1g.10gb"]
    data = ok(cli.json(*own, "--placement", "0", "--pods", mine))
    assert data["instance"]["placement"] == {"start": 0, "size": 1}


def test_a_whole_gpu_reservation_leaves_no_placement(cli: Cli, pods_file: PodsFile) -> None:
    pods = pods_file(kube_pod("ns/big", [entry(free_slot(cli, 0, "7g.80gb", 8))]))
    message = refused(cli.json(*ALLOCATE, "--pods", pods), 3, "conflict")
    assert "pod-claimed" in message and "slices 0:8 (reserved by pod ns/big)" in message
    assert instances(cli) == []


def pending(key: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A pod the scheduler annotated but has not bound to a node yet."""
    pod = kube_pod(key, entries, phase="Pending")
    del pod["spec"]["nodeName"]
    return pod


def test_a_pending_pods_claim_holds_the_instance(cli: Cli, pods_file: PodsFile) -> None:
    """HAMi's scheduler writes the allocation annotation before it binds the pod: a pod with
    no spec.nodeName yet whose entry names this node's instance holds it."""
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    pods = pods_file(pending("ns/next", [entry(instance(cli, mig))]))
    before = Unchanged(cli)
    node = ["--node", "gpu-7"]  # the pods bound to other nodes are not this one's
    reclaim = ["reclaim", "--mig-uuid", mig, "--pods", pods]
    message = refused(cli.json(*node, *reclaim), 3, "conflict")
    assert "pod ns/next" in message
    ran = cli.json(*node, *ALLOCATE, "--placement", "0", "--pods", pods)
    assert "held by pod ns/next" in refused(ran, 3, "conflict")
    before.check()
    # One that names another node's GPU holds nothing here, and is no sign of a wrong --node.
    elsewhere = pending("ns/far", [entry(instance(cli, mig), gpuUUID=f"GPU-{'f' * 8}-0000")])
    far = pods_file(elsewhere)
    data = ok(cli.json("--node", "gpu-7", "reclaim", "--mig-uuid", mig, "--pods", far))
    assert [v["migUUID"] for v in data["reclaimed"]] == [mig]


def test_an_instance_released_after_the_list_was_taken_is_held(
    cli: Cli, pods_file: PodsFile
) -> None:
    """The plugin may have handed it out since, to a pod the older list cannot show."""
    listed = pods_file()
    taken = time.time() - 60  # a minute old: fresh, but from before the release
    os.utime(listed, (taken, taken))
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    before = Unchanged(cli)
    message = refused(cli.json("reclaim", "--mig-uuid", mig, "--pods", listed), 3, "conflict")
    assert "released after the pod list was taken" in message
    ran = cli.json(*ALLOCATE, "--placement", "0", "--pods", listed)
    refused(ran, 3, "conflict")
    [blocker] = ran.json()["error"]["blockers"][0]["instances"]
    assert blocker["heldBy"]["pod"] is None
    assert blocker["heldBy"]["how"].startswith("released after the pod list was taken (")
    data = ok(cli.json("reclaim", "--gpu", "0", "--all-idle", "--pods", listed))
    assert data["reclaimed"] == [] and [s["migUUID"] for s in data["skipped"]] == [mig]
    before.check()
    # Not reused for another pod either: it makes a new instance beside it.
    data = ok(cli.json(*ALLOCATE, "--pods", listed))
    assert data["instance"]["migUUID"] != mig and state_of(cli, mig) == "Idle"
    # A list taken after the release judges it as usual.
    data = ok(cli.json("reclaim", "--mig-uuid", mig, "--pods", pods_file()))
    assert [v["migUUID"] for v in data["reclaimed"]] == [mig]
