"""Golden outputs of recovery: the situations the recovery, crash, integrity and forget suites
set up, replayed through the CLI with `-o json`, each on a fresh simulated node, with every
command's exit code, output and the state/CDI trees after it compared with
tests/data/golden/recovery.json (tests/golden.py says how values are normalised).

The other suites assert what matters about each situation; this file pins everything else, so
that reshaping the mutating half of the engine (allocate, release, reclaim, reconcile, recover,
adopt, forget) cannot change an action, a reason, an exit code or a file unnoticed. Crashes run
in real subprocesses (a simulated crash ends the process); everything else runs in-process.
Regenerate after an intended change with
`HAMIMIG_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_recovery.py` and review the diff.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.golden import GoldenCli, Normaliser, Recorder, check_scenarios, new_node, scratch
from tests.support.cli import ADOPT_CONFIG
from tests.support.node import ABSENT_GPU, ABSENT_MIG
from tests.support.nvml import CREATE_CI, CREATE_GI, DESTROY_CI, DESTROY_GI
from tests.support.pods import entry, kube_pod, pod_list, pod_uid
from tests.support.records import hami_record, sha

Instance = dict[str, Any]
__all__ = ["scratch"]  # the fixture


class Node:
    """A fresh simulated node (2 x H100) and the recorder of what was run on it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cli = new_node(root)
        self.norm = Normaliser(root)
        self.rec = Recorder(self.cli, self.norm, hardware=True)
        self.written = 0

    def run(self, *args: str, cli: GoldenCli | None = None) -> Any:
        return self.rec.run(*args, cli=cli)

    def crash(self, op: str, action: str, *args: str, gpu: str | None = None) -> None:
        """Arm a crash fault and run ARGS in a subprocess that it ends."""
        self.fault(op, *(["--gpu", gpu] if gpu else []), action=action)
        self.rec.crash(*args)

    def fault(self, op: str, *extra: str, action: str = "raise", error: str | None = None) -> None:
        args = ["--op", op, "--action", action, *(["--error", error] if error else []), *extra]
        self.run("sim", "fault", "add", *args)

    def allocate(self, pod: str, profile: str, placement: str, gpu: str = "0", *extra: str) -> Any:
        args = ["--pod", pod, "--gpu", gpu, "--profile", profile, "--placement", placement]
        return self.run("allocate", *args, *extra)

    def active(self, pod: str, profile: str, placement: str, gpu: str = "0") -> Instance:
        made: Instance = self.allocate(pod, profile, placement, gpu)["instance"]
        return made

    def idle(self, pod: str, profile: str, placement: str, gpu: str = "0") -> Instance:
        made = self.active(pod, profile, placement, gpu)
        self.run("release", "--mig-uuid", made["migUUID"])
        return made

    def sim_create(
        self, profile: str, placement: str, gpu: str = "0", no_ci: bool = False
    ) -> Instance:
        args = ["create", "--gpu", gpu, "--profile", profile, "--placement", placement]
        made: Instance = self.run("sim", *args, *(["--no-ci"] if no_ci else []))["instance"]
        return made

    def pods(self, *pods: dict[str, Any], age: float = 0, **kw: Any) -> str:
        """A `kubectl get pods -o json` file, taken `age` seconds ago."""
        self.written += 1
        path = self.root / f"pods-{self.written}.json"
        path.write_text(json.dumps(pod_list(*pods, **kw), indent=2))
        if age:
            os.utime(path, (time.time() - age, time.time() - age))
        return str(path)

    def configured(self, text: str) -> GoldenCli:
        path = self.root / "config.yaml"
        path.write_text(text)
        return GoldenCli(self.cli.sim, self.cli.state_dir, self.cli.cdi_dir, path)

    def record_path(self, mig: str) -> Path:
        [path] = [p for p in self.cli.state_dir.glob("hami-owned-*.json") if mig in p.read_text()]
        return path

    def edit_record(self, what: str, mig: str, change: Callable[[dict[str, Any]], None]) -> None:
        def edit() -> None:
            path = self.record_path(mig)
            doc = json.loads(path.read_text())
            change(doc)
            path.write_text(json.dumps(doc, indent=2) + "\n")

        self.rec.note(what, edit)

    def intent_id(self) -> str:
        [path] = self.cli.state_dir.glob("intent-*.json")
        return path.name.removeprefix("intent-").removesuffix(".json")


SCENARIOS: dict[str, Callable[[Node], None]] = {}


def scenario(fn: Callable[[Node], None]) -> Callable[[Node], None]:
    SCENARIOS[fn.__name__.replace("_", "-")] = fn
    return fn


# ---------------------------------------------------------------------------------------------
# Crashed allocations


@scenario
def allocation_crashed_before_its_gi(n: Node) -> None:
    n.crash(CREATE_GI, "crash-before", "allocate", "--pod", "ns/c", "--gpu", "0",
            "--profile", "1g.10gb", "--placement", "4")  # fmt: skip
    n.run("list")
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods")
    n.run("list")


@scenario
def allocation_crashed_around_its_ci(n: Node) -> None:
    n.idle("ns/keep", "1g.10gb", "6")
    n.crash(CREATE_CI, "crash-before", "allocate", "--pod", "ns/before", "--gpu", "0",
            "--profile", "2g.20gb", "--placement", "2", gpu="0")  # fmt: skip
    n.crash(CREATE_CI, "crash-after", "allocate", "--pod", "ns/after", "--gpu", "1",
            "--profile", "3g.40gb", "--placement", "4", gpu="1")  # fmt: skip
    n.run("list")
    n.run("adopt", "--exclusive-owner", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods")
    n.allocate("ns/again", "2g.20gb", "2")


@scenario
def allocation_crashed_after_its_cdi_spec(n: Node) -> None:
    n.crash("cdi.write", "crash-after", "allocate", "--pod", "ns/c", "--gpu", "1",
            "--profile", "1g.10gb", "--placement", "3")  # fmt: skip
    n.run("show", _only_live(n))
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods")
    n.run("list")


@scenario
def allocation_crashed_after_its_record(n: Node) -> None:
    n.crash("record.write", "crash-after", "allocate", "--pod", "ns/held", "--gpu", "0",
            "--profile", "1g.10gb", "--placement", "1")  # fmt: skip
    n.run("list")
    pods = n.pods(kube_pod("ns/held"))
    n.run("recover", "--pods", pods, "--dry-run")
    n.run("recover", "--pods", pods)
    n.run("list")


@scenario
def allocations_crashed_before_clearing_their_intents(n: Node) -> None:
    n.crash("intent.remove", "crash-before", "allocate", "--pod", "ns/held", "--gpu", "0",
            "--profile", "1g.10gb", "--placement", "1")  # fmt: skip
    n.crash("intent.remove", "crash-before", "allocate", "--pod", "ns/gone", "--gpu", "1",
            "--profile", "1g.10gb", "--placement", "1")  # fmt: skip
    pods = n.pods(kube_pod("ns/held"))
    n.run("reconcile", "--pods", pods, "--dry-run")
    n.run("recover", "--pods", pods)
    n.run("list")


@scenario
def intent_without_gi_and_a_pair_in_its_slot(n: Node) -> None:
    n.crash(CREATE_GI, "crash-before", "allocate", "--pod", "ns/crash", "--gpu", "0",
            "--profile", "1g.10gb", "--placement", "4")  # fmt: skip
    n.sim_create("1g.10gb", "4")  # a pair that appeared there since
    n.run("recover", "--assume-no-pods")
    n.run("doctor")
    intent = n.intent_id()
    n.run("forget", "--intent", intent, "--dry-run")
    n.run("forget", "--intent", intent)
    n.run("forget", "--intent", intent)
    n.run("recover", "--assume-no-pods")


@scenario
def intent_without_gi_and_its_bare_gi(n: Node) -> None:
    n.crash(CREATE_GI, "crash-before", "allocate", "--pod", "ns/crash", "--gpu", "0",
            "--profile", "1g.10gb", "--placement", "4")  # fmt: skip
    n.sim_create("1g.10gb", "4", no_ci=True)  # the GI the killed request created
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods")


# ---------------------------------------------------------------------------------------------
# Crashed reclaims, a crashed recover


@scenario
def reclaims_crashed_around_the_ci_destroy(n: Node) -> None:
    n.idle("ns/keep", "1g.10gb", "0")
    before = n.idle("ns/a", "1g.10gb", "2")["migUUID"]
    after = n.idle("ns/b", "2g.20gb", "2", gpu="1")["migUUID"]
    n.crash(DESTROY_CI, "crash-before", "reclaim", "--mig-uuid", before)
    n.crash(DESTROY_CI, "crash-after", "reclaim", "--mig-uuid", after)
    n.run("list")
    n.run("show", before)
    n.run("allocate", "--pod", "ns/c", "--gpu", "1", "--profile", "2g.20gb", "--placement", "2")
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods")
    n.run("list")


@scenario
def reclaims_crashed_at_the_gi_and_the_spec(n: Node) -> None:
    gi = n.idle("ns/a", "1g.10gb", "0")["migUUID"]
    spec = n.idle("ns/b", "1g.10gb", "1")["migUUID"]
    n.crash(DESTROY_GI, "crash-after", "reclaim", "--mig-uuid", gi)
    n.crash("cdi.remove", "crash-before", "reclaim", "--mig-uuid", spec)
    n.run("reconcile", "--dry-run")
    n.run("reconcile")
    n.run("recover", "--assume-no-pods")


@scenario
def recover_crashed_while_finishing_a_reclaim(n: Node) -> None:
    n.idle("ns/keep", "1g.10gb", "0")
    half = n.idle("ns/a", "2g.20gb", "2")["migUUID"]
    n.crash(DESTROY_CI, "crash-after", "reclaim", "--mig-uuid", half)
    n.crash(DESTROY_GI, "crash-before", "recover", "--assume-no-pods")
    n.crash("record.remove", "crash-before", "recover", "--assume-no-pods")
    n.run("recover", "--assume-no-pods")
    n.run("recover", "--assume-no-pods")


@scenario
def adoption_crashed_between_record_and_spec(n: Node) -> None:
    n.sim_create("1g.10gb", "0")
    n.crash("cdi.write", "crash-before", "recover", "--assume-no-pods", "--adopt")
    n.run("list")
    n.run("recover", "--assume-no-pods")


# ---------------------------------------------------------------------------------------------
# Error instances, busy instances, queued CDI removals, orphan specs


@scenario
def error_instance_retried_by_reconcile(n: Node) -> None:
    n.active("ns/gone", "1g.10gb", "0")
    err = n.idle("ns/err", "1g.10gb", "2")["migUUID"]
    n.run("sim", "busy", "--mig-uuid", err)
    n.run("reclaim", "--mig-uuid", err)
    n.run("reclaim", "--gpu", "0", "--all-idle")
    n.run("sim", "busy", "--mig-uuid", err, "--clear")
    n.fault(DESTROY_CI, "--times", "1000", error="IN_USE")
    n.run("reclaim", "--mig-uuid", err)
    n.run("list")
    n.run("allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb", "--placement", "2")
    n.run("reconcile")  # without pods a complete Error instance may be a pod's: kept
    n.run("reconcile", "--pods", n.pods(kube_pod("ns/gone")))
    n.run("sim", "fault", "clear")
    n.run("reconcile", "--dry-run", "--pods", n.pods(kube_pod("ns/gone")))
    n.run("reconcile", "--pods", n.pods(kube_pod("ns/gone")))
    n.run("list")


@scenario
def busy_instances_are_never_handed_out(n: Node) -> None:
    idle = n.idle("ns/old", "1g.10gb", "2")["migUUID"]
    held = n.active("ns/p", "1g.10gb", "0", gpu="1")["migUUID"]
    n.run("sim", "busy", "--mig-uuid", idle)
    n.run("sim", "busy", "--mig-uuid", held)
    n.run("allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb", "--placement", "2")
    n.run("allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb")
    n.run("recover", "--assume-no-pods")
    n.run("reconcile", "--pods", n.pods())
    n.run("recover", "--pods", n.pods(kube_pod("ns/p"), kube_pod("ns/new")), "--dry-run")
    n.run("sim", "busy", "--mig-uuid", idle, "--clear")
    n.run("recover", "--pods", n.pods(kube_pod("ns/p"), kube_pod("ns/new")))


@scenario
def queued_cdi_removals_retried(n: Node) -> None:
    n.active("ns/stays", "1g.10gb", "0")
    queued = n.idle("ns/q", "1g.10gb", "5")["migUUID"]
    forgotten = n.idle("ns/f", "1g.10gb", "1", gpu="1")["migUUID"]
    n.fault("cdi.remove", error="EIO")
    n.run("reclaim", "--mig-uuid", queued)
    n.fault("cdi.remove", error="EIO")
    n.run("forget", forgotten)
    n.run("list")
    n.run("reconcile", "--dry-run")
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("reconcile")
    n.run("recover", "--assume-no-pods")


@scenario
def stale_queued_removal_of_a_kept_spec(n: Node) -> None:
    mig = n.idle("ns/p", "1g.10gb", "0")["migUUID"]
    n.crash("queue.write", "crash-after", "forget", mig)
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods")
    n.run("allocate", "--pod", "ns/q", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0")


@scenario
def orphan_cdi_spec_removed(n: Node) -> None:
    mig = n.active("ns/p", "1g.10gb", "0")["migUUID"]
    n.norm.text(ABSENT_MIG)  # numbered, so that its spec's name is too

    def write_orphan() -> None:
        [spec] = list(n.cli.cdi_dir.glob("*.json"))
        stray = spec.name.replace(sha(mig), sha(ABSENT_MIG))
        # Its own device, as a spec of ours left by a crash has (a copy naming another
        # instance's device is not ours: recover refuses it).
        (n.cli.cdi_dir / stray).write_text(spec.read_text().replace(sha(mig), sha(ABSENT_MIG)))

    n.rec.note("a spec nothing accounts for", write_orphan)
    n.run("doctor")
    n.run("reconcile", "--dry-run")
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods")


# ---------------------------------------------------------------------------------------------
# Records that do not match the hardware; forget


@scenario
def records_that_do_not_match_the_hardware(n: Node) -> None:
    old = n.idle("ns/old", "1g.10gb", "1")["migUUID"]
    n.active("ns/gone", "1g.10gb", "0", gpu="1")

    def other_gi(doc: dict[str, Any]) -> None:
        doc["gpuInstanceID"] += 1

    def absent_gpu(doc: dict[str, Any]) -> None:
        doc["parentGPUUUID"] = ABSENT_GPU

    n.norm.text(ABSENT_GPU)
    n.edit_record("the record claims another GI ID", old, other_gi)
    n.run("recover", "--assume-no-pods")
    n.run("list")
    n.edit_record("the record names a GPU not on the node", old, absent_gpu)
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("reconcile")
    n.run("forget", old, "--dry-run")
    n.run("forget", old)
    n.run("recover", "--assume-no-pods")


@scenario
def gpu_reset_under_records(n: Node) -> None:
    n.active("ns/gone", "1g.10gb", "0")
    n.idle("ns/old", "2g.20gb", "2")
    n.idle("ns/other", "1g.10gb", "0", gpu="1")
    n.run("sim", "reset", "--gpu", "0")
    n.run("list")
    n.run("recover", "--pods", n.pods(kube_pod("ns/gone")))
    n.sim_create("1g.10gb", "3")  # another identity in a missing record's slot
    n.run("recover", "--assume-no-pods", "--adopt")
    n.run("sim", "reset", "--gpu", "0")
    n.run("recover", "--pods", n.pods(kube_pod("ns/bystander")), "--dry-run")
    n.run("recover", "--pods", n.pods(kube_pod("ns/bystander")))


@scenario
def unreadable_record_then_forget(n: Node) -> None:
    victim = n.idle("ns/victim", "1g.10gb", "1")["migUUID"]
    n.active("ns/gone", "1g.10gb", "0")
    n.sim_create("1g.10gb", "2")

    def truncate() -> None:
        n.record_path(victim).write_text('{"version": 1, "migUUID": ')

    n.rec.note("the record is cut short", truncate)
    n.run("recover", "--assume-no-pods", "--adopt")
    n.run("adopt", "--exclusive-owner", "--assume-no-pods")
    n.run("forget", victim, "--dry-run")
    n.run("forget", victim)
    n.run("recover", "--assume-no-pods", "--adopt")


@scenario
def forget_refusals_and_success(n: Node) -> None:
    idle = n.idle("ns/done", "1g.10gb", "0")["migUUID"]
    active = n.active("team-a/train-1", "1g.10gb", "1")["migUUID"]
    n.run("forget", active)
    n.run("forget", "MIG-00000000-0000-0000-0000-000000000000")
    n.run("forget", "not-a-uuid")
    n.run("forget", "--intent", "nosuch")
    n.run("forget")
    n.run("forget", idle, "--dry-run")
    n.run("forget", idle)
    n.run("forget", idle)
    n.run("list")
    n.run("recover", "--assume-no-pods")


# ---------------------------------------------------------------------------------------------
# Instances nobody knows: preserve, adopt, destroy orphan GIs


@scenario
def unknown_instances_without_adoption(n: Node) -> None:
    n.sim_create("1g.10gb", "2")
    n.sim_create("2g.20gb", "4", no_ci=True)
    busy = n.sim_create("1g.10gb", "0", gpu="1")
    n.run("sim", "busy", "--mig-uuid", busy["migUUID"])
    n.run("recover", "--assume-no-pods")
    n.run("recover")
    n.run("adopt", "--assume-no-pods")
    n.run("adopt", "--exclusive-owner")
    n.run("list")


@scenario
def recover_adopts_pairs_and_destroys_orphan_gis(n: Node) -> None:
    n.sim_create("1g.10gb", "2")
    n.sim_create("3g.40gb", "4", gpu="1")
    n.sim_create("2g.20gb", "4", no_ci=True)
    busy = n.sim_create("1g.10gb", "0", gpu="1")
    n.sim_create("1g.10gb", "2", gpu="1", no_ci=True)
    n.run("sim", "busy", "--mig-uuid", busy["migUUID"])
    n.run("recover", "--assume-no-pods", "--adopt", "--dry-run")
    n.run("recover", "--assume-no-pods", "--adopt")
    n.run("allocate", "--pod", "ns/p", "--gpu", "1", "--profile", "3g.40gb", "--placement", "4")
    n.run("list")


@scenario
def adopt_command_claims_unmarked_pairs(n: Node) -> None:
    n.active("ns/p", "1g.10gb", "0")
    err = n.idle("ns/err", "1g.10gb", "3")["migUUID"]
    n.fault(DESTROY_CI, "--times", "1000", error="IN_USE")
    n.run("reclaim", "--mig-uuid", err)
    n.run("sim", "fault", "clear")
    n.sim_create("1g.10gb", "2")
    pair1 = n.sim_create("2g.20gb", "0", gpu="1")
    n.sim_create("2g.20gb", "4", no_ci=True)
    n.run("adopt", "--exclusive-owner", "--assume-no-pods", "--gpu", "0", "--dry-run")
    n.run("adopt", "--exclusive-owner", "--assume-no-pods", "--gpu", "0")
    n.run("adopt", "--exclusive-owner", "--pods", n.pods(kube_pod("ns/p")), "--gpu", "0")
    n.run("adopt", "--exclusive-owner", "--assume-no-pods", "--gpu", pair1["gpuUUID"])
    n.allocate("ns/q", "2g.20gb", "0", "1")


@scenario
def adopt_by_config_with_pods(n: Node) -> None:
    held = n.sim_create("1g.10gb", "2")
    n.sim_create("1g.10gb", "3")
    node = n.configured(ADOPT_CONFIG)
    pods = n.pods(kube_pod("ns/p", [entry(held)]))
    n.run("adopt", "--pods", pods, "--dry-run", cli=node)
    n.run("adopt", "--pods", pods, cli=node)
    n.run("show", held["migUUID"])


# ---------------------------------------------------------------------------------------------
# Pods: restore-active, adopt-active, restore-idle, reconcile releasing


@scenario
def pods_naming_instances(n: Node) -> None:
    p = n.allocate("ns/p", "1g.10gb", "3", "0", "--pod-uid", pod_uid("ns", "p"))["instance"]
    n.active("ns/q", "1g.10gb", "5")
    old = n.idle("ns/old", "1g.10gb", "1")
    unmarked = n.sim_create("2g.20gb", "2", gpu="1")
    pods = n.pods(
        kube_pod("ns/p", [entry(p)]),
        kube_pod("ns/q"),
        kube_pod("ns/new", [entry(old, container=0, device=1)]),
        kube_pod("team-a/trainer", [entry(unmarked, container=1, device=2)]),
        kube_pod("kube-system/coredns"),
    )
    n.run("recover", "--pods", pods, "--dry-run")
    n.run("recover", "--pods", pods)
    n.run("recover", "--pods", pods)
    n.run("list")
    n.run("allocate", "--pod", "ns/x", "--gpu", "1", "--profile", "2g.20gb", "--placement", "2")


@scenario
def pods_that_no_longer_hold_their_instances(n: Node) -> None:
    owners = ("absent", "succeeded", "failed", "deleting", "new-uid", "runs")
    insts = {}
    for i, name in enumerate(owners):
        uid = pod_uid("ns", name)
        made = n.allocate(f"ns/{name}", "1g.10gb", str(i), "0", "--pod-uid", uid)
        insts[name] = made["instance"]
    pods = n.pods(
        kube_pod("ns/bystander"),
        kube_pod("ns/succeeded", [entry(insts["succeeded"])], phase="Succeeded"),
        kube_pod("ns/failed", [entry(insts["failed"])], phase="Failed"),
        kube_pod("ns/deleting", [entry(insts["deleting"])], deleting=True),
        kube_pod("ns/new-uid", uid="0f0e0d0c-0b0a-4909-8807-060504030201"),
        kube_pod("ns/runs"),
    )
    n.run("recover", "--pods", pods, "--dry-run")
    n.run("recover", "--pods", pods)
    n.allocate("ns/next", "1g.10gb", "3")


@scenario
def reconcile_releases_what_pods_gave_up(n: Node) -> None:
    n.active("ns/runs", "1g.10gb", "0")
    n.active("ns/done", "1g.10gb", "1")
    n.active("ns/gone", "1g.10gb", "2")
    n.active("ns/dying", "1g.10gb", "3")
    named = n.active("ns/named", "1g.10gb", "4")
    busy = n.active("ns/busy", "1g.10gb", "5")["migUUID"]
    n.run("sim", "busy", "--mig-uuid", busy)
    pods = n.pods(
        kube_pod("ns/runs"),
        kube_pod("ns/done", phase="Succeeded"),
        kube_pod("ns/dying", deleting=True),
        kube_pod("ns/heir", [entry(named)]),
    )
    n.run("reconcile", "--dry-run", "--pods", pods)
    n.run("reconcile", "--pods", pods)
    n.run("reconcile", "--pods", pods)
    n.run("reclaim", "--gpu", "0", "--all-idle", "--dry-run")
    n.run("reclaim", "--gpu", "0", "--all-idle")


@scenario
def pod_snapshot_older_than_a_record(n: Node) -> None:
    old = n.pods(age=60)
    n.active("ns/p", "1g.10gb", "0")
    n.run("recover", "--pods", old)
    n.run("reconcile", "--pods", old)
    n.run("recover", "--pods", n.pods())


@scenario
def untrusted_pod_lists_stop_everything(n: Node) -> None:
    inst = n.sim_create("2g.20gb", "2")
    other = n.sim_create("2g.20gb", "2", gpu="1")
    mine = n.active("ns/a", "1g.10gb", "0")
    n.sim_create("1g.10gb", "6", no_ci=True)
    not_live = entry(inst, migUUID=ABSENT_MIG, gpuInstanceID=13)
    n.norm.text(ABSENT_MIG)
    for bad in (  # two holders first: the reconciles below release ns/a's instance
        [kube_pod("ns/a"), kube_pod("ns/b", [entry(mine)])],
        [kube_pod("ns/ok"), kube_pod("ns/bad", [not_live])],
        [kube_pod("ns/bad", [entry(inst, placement={"start": 4, "size": 2})])],
        [kube_pod("ns/bad", [entry(inst, gpuUUID=other["gpuUUID"])])],
        [kube_pod("ns/bad", raw='[{"containerIndex":0,')],
    ):
        pods = n.pods(*bad)
        n.run("recover", "--adopt", "--pods", pods)
        n.run("reconcile", "--pods", pods)
    n.run("recover", "--pods", n.pods(kube_pod("ns/a"), kind="PodList", more=True))
    n.run("recover", "--pods", n.pods(), "--assume-no-pods")
    n.run("--node", "gpu-node-2", "reconcile", "--pods", n.pods(kube_pod("ns/a", [entry(mine)])))
    n.run("--node", "gpu-node-1", "recover", "--pods", n.pods(kube_pod("ns/a", [entry(mine)])))


@scenario
def hami_written_record_restored_and_reused(n: Node) -> None:
    inst = n.sim_create("1g.10gb", "4")

    def write_hami_record() -> None:
        hami_record(n.cli, inst)

    n.rec.note("HAMi writes its own record", write_hami_record)
    n.run("list")
    n.run("recover", "--assume-no-pods", "--dry-run")
    n.run("recover", "--assume-no-pods")
    n.allocate("ns/p", "1g.10gb", "4")


def _only_live(n: Node) -> str:
    [mig] = [
        ci["migUUID"]
        for gpu in json.loads(n.cli.sim.read_text())["gpus"]
        for gi in gpu["gpuInstances"]
        for ci in gi["computeInstances"]
    ]
    return str(mig)


@pytest.mark.slow
def test_recovery_scenarios_print_and_leave_what_they_did_before(scratch: Path) -> None:
    recorded: dict[str, list[dict[str, Any]]] = {}
    for name, play in SCENARIOS.items():
        node = Node(scratch / name)
        play(node)
        recorded[name] = node.rec.steps
    check_scenarios("recovery.json", recorded)
