"""The lifecycle through the CLI on the simulated node (README, "The lifecycle"), and what each
command does when something fails: allocate, idempotency, release, exact reuse, placement
pressure, placement choice, Error instances, rollback of failed allocations, the CDI removal
queue, reclaim, fail-closed NVML errors, unreadable records, the node lock, the config,
`list`/`show`, and the reference CDI library loading every spec `allocate` writes.

Every check goes through `hamimig` itself (in-process CliRunner, or a real subprocess where a
simulated crash must end the process) and then looks at what a script or HAMi would see: the
JSON result and exit code, the files in the state and CDI directories, and the simulated node's
GI/CI layout and NVML call counts.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hamimig.rehearsal.simulator import sim_init
from hamimig.sim.models import MODELS
from hamimig.store.lock import NodeLock
from tests.support.cdi import KIND, cap_minors, load_base, qualified, spec_path
from tests.support.cli import (
    LEGACY_CONFIG,
    Cli,
    Ran,
    alloc,
    allocate_args,
    allocated,
    configured,
    fail_destroys,
    fault,
    idle,
    instances,
    ok,
    owners_running,
    refused,
    run_hamimig,
    sim,
    sim_create,
    state_of,
)
from tests.support.files import lifecycle_files
from tests.support.node import gpus, live, node_dir
from tests.support.nvml import call_diff, calls, mutating
from tests.support.records import intent_files, record, record_path, sha
from tests.support.unchanged import Unchanged

QUEUE_NAME = "cdi-removal-queue.json"

# ---------------------------------------------------------------------------------------------
# Helpers


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def snapshot(cli: Cli) -> tuple[Any, ...]:
    """What a refused command must leave unchanged: state dir, CDI dir and hardware layout."""
    return lifecycle_files(cli.state_dir), lifecycle_files(cli.cdi_dir), gpus(cli)


def rec_state(cli: Cli, mig: str) -> str:
    """The lifecycle state in the record file (cheaper than `list`, which scans the node)."""
    found: str = record(cli, mig)["hamimig"]["state"]
    return found


def idles(cli: Cli, *wanted: tuple[str, str, str]) -> list[str]:
    """Idle instances (profile, placement, GPU) with one release: all allocated to one pod."""
    migs = []
    for i, (profile, placement, gpu) in enumerate(wanted):
        ran = alloc(cli, "ns/cache", profile, placement, gpu, "--device-index", str(i))
        migs.append(ok(ran)["instance"]["migUUID"])
    released = ok(cli.json("release", "--pod", "ns/cache"))["released"]
    assert sorted(r["migUUID"] for r in released) == sorted(migs)
    return migs


def error_code(ran: Ran) -> str:
    code: str = ran.json()["error"]["code"]
    return code


def base_device(base: dict[str, Any], name: str) -> dict[str, Any]:
    [device] = [d for d in base["devices"] if d["name"] == name]
    edits: dict[str, Any] = device["containerEdits"]
    return edits


def cap_node(cli: Cli, minor: int, capability: str) -> dict[str, Any]:
    """A capability node as the driver's files describe it: nvidia-caps major, mode of its
    `access` file."""
    [major] = [
        int(line.split()[0])
        for line in (node_dir(cli.sim) / "proc-devices").read_text().splitlines()
        if line.endswith(" nvidia-caps")
    ]
    access = node_dir(cli.sim) / "nvidia-capabilities" / capability / "access"
    [mode] = [int(line.split(":")[1]) for line in access.read_text().splitlines() if "Mode" in line]
    return {
        "path": f"/dev/nvidia-caps/nvidia-cap{minor}",
        "type": "c",
        "major": major,
        "minor": minor,
        "fileMode": mode,
    }


# ---------------------------------------------------------------------------------------------
# allocate: create


def test_allocate_creates_gi_ci_cdi_spec_and_record(cli: Cli) -> None:
    data = ok(alloc(cli, "ns/p", "1g.10gb", "2"))
    assert data["kind"] == "Allocation"
    assert (data["created"], data["reused"], data["reclaimed"]) == (True, False, [])
    inst = data["instance"]
    mig = inst["migUUID"]
    gpu0 = gpus(cli)[0]
    assert mig.startswith("MIG-")
    assert inst["createdAt"] and inst["updatedAt"] == inst["createdAt"]
    assert inst == {
        "createdAt": inst["createdAt"],
        "updatedAt": inst["updatedAt"],
        "idleSince": None,
        "lastOwner": None,
        "migUUID": mig,
        "gpuUUID": gpu0["uuid"],
        "gpuIndex": 0,
        "profile": "1g.10gb",
        "placement": {"start": 2, "size": 1},
        "gpuInstanceID": 9,
        "computeInstanceID": 0,
        "computeInstanceCount": None,  # list and show count the GI's CIs
        "state": "Active",
        "owner": {
            "namespace": "ns",
            "name": "p",
            "uid": None,
            "containerIndex": 0,
            "deviceIndex": 0,
        },
        "cdiDevice": qualified(mig),
        "error": None,
        "processes": None,  # allocate does not ask (a new instance has none); list/show do
        "processCount": None,
        "outcome": "created",
    }
    # Hardware: exactly one GI with one CI, at the placement, named by the MIG UUID.
    assert live(cli) == [(2, 1, mig)]
    assert live(cli, 1) == []
    [gi] = gpu0["gpuInstances"]
    assert (gi["id"], gi["profileId"], gi["computeInstances"][0]["id"]) == (9, 19, 0)

    # CDI spec: name, mode, the device's and the shared edits, the minimum version.
    spec_at = spec_path(cli, mig)
    assert sorted(lifecycle_files(cli.cdi_dir)) == [spec_at.name]
    assert mode(spec_at) == 0o644
    caps = cap_minors(cli)
    spec = json.loads(spec_at.read_text())
    base = load_base(cli)
    assert spec == {
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "devices": [
            {
                "name": f"mig-{sha(mig)}",
                "containerEdits": {
                    "deviceNodes": [
                        *base_device(base, "0")["deviceNodes"],
                        cap_node(cli, caps["gpu0/gi9/access"], "gpu0/mig/gi9"),
                        cap_node(cli, caps["gpu0/gi9/ci0/access"], "gpu0/mig/gi9/ci0"),
                    ]
                },
            }
        ],
        # NVIDIA's common edits, as they are: no NVIDIA_VISIBLE_DEVICES=void added.
        "containerEdits": base["containerEdits"],
    }

    # Record: HAMi's v1 fields plus the "hamimig" key; 0600 in a 0750 directory; no intent left.
    rec_path = record_path(cli, mig)
    assert sorted(lifecycle_files(cli.state_dir)) == [rec_path.name]
    assert mode(rec_path) == 0o600
    assert mode(cli.state_dir) == 0o750
    rec = record(cli, mig)
    assert {k: v for k, v in rec.items() if k != "hamimig"} == {
        "version": 1,
        "migUUID": mig,
        "parentGPUUUID": gpu0["uuid"],
        "profile": "1g.10gb",
        "placement": {"start": 2, "size": 1},
        "gpuInstanceID": 9,
        "computeInstanceID": 0,
    }
    ext = rec["hamimig"]
    assert ext["state"] == "Active"
    assert ext["owner"] == inst["owner"]
    assert ext["cdiDevice"] == qualified(mig)
    assert ext["error"] is None
    assert state_of(cli, mig) == "Active"


def test_allocate_on_second_gpu_by_uuid_uses_that_gpus_minor(cli: Cli) -> None:
    gpu1 = gpus(cli)[1]["uuid"]
    data = ok(alloc(cli, "ns/p", "3g.40gb", "4", gpu1))
    mig = data["instance"]["migUUID"]
    assert data["instance"]["gpuIndex"] == 1
    assert data["instance"]["placement"] == {"start": 4, "size": 4}
    assert live(cli, 0) == []
    assert live(cli, 1) == [(4, 4, mig)]
    gi = data["instance"]["gpuInstanceID"]
    caps = cap_minors(cli)
    nodes = json.loads(spec_path(cli, mig).read_text())["devices"][0]["containerEdits"]
    assert nodes["deviceNodes"] == [
        {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
        cap_node(cli, caps[f"gpu1/gi{gi}/access"], f"gpu1/mig/gi{gi}"),
        cap_node(cli, caps[f"gpu1/gi{gi}/ci0/access"], f"gpu1/mig/gi{gi}/ci0"),
    ]


# ---------------------------------------------------------------------------------------------
# allocate: idempotent per pod slot


def test_allocate_is_idempotent_for_the_same_slot(cli: Cli) -> None:
    first = ok(alloc(cli, "ns/p", "1g.10gb", "3"))
    mig = first["instance"]["migUUID"]
    before, counted = snapshot(cli), calls(cli)
    again = ok(alloc(cli, "ns/p", "1g.10gb", "3"))
    assert again["instance"]["migUUID"] == mig
    assert (again["created"], again["reused"], again["reclaimed"]) == (False, False, [])
    assert again["instance"]["state"] == "Active"
    assert again["instance"]["owner"]["name"] == "p"
    assert mutating(call_diff(counted, calls(cli))) == {}
    assert snapshot(cli) == before
    # Without --placement the same slot also gets its instance back.
    assert ok(alloc(cli, "ns/p", "1g.10gb"))["instance"]["migUUID"] == mig
    assert snapshot(cli) == before


def test_another_device_index_of_the_same_pod_is_another_slot(cli: Cli) -> None:
    a = allocated(cli, "ns/p", "1g.10gb", "0")
    ran = alloc(cli, "ns/p", "1g.10gb", "1", "0", "--device-index", "1")
    b = ok(ran)
    assert b["created"] is True
    assert b["instance"]["migUUID"] != a
    assert b["instance"]["owner"]["deviceIndex"] == 1
    assert live(cli) == sorted([(0, 1, a), (1, 1, b["instance"]["migUUID"])])


@pytest.mark.parametrize(
    ("profile", "placement", "gpu"),
    [
        ("2g.20gb", "2", "0"),  # another profile
        ("1g.10gb", "3", "1"),  # another GPU
        ("1g.10gb", "4", "0"),  # another placement
        ("1g.10gb+me", "3", "0"),  # the media-extension variant at the same placement
    ],
)
def test_same_slot_asking_for_something_else_is_a_conflict(
    cli: Cli, profile: str, placement: str, gpu: str
) -> None:
    allocated(cli, "ns/p", "1g.10gb", "3")
    before, counted = snapshot(cli), calls(cli)
    ran = alloc(cli, "ns/p", profile, placement, gpu)
    assert ran.exit_code == 3
    assert error_code(ran) == "conflict"
    assert snapshot(cli) == before
    assert mutating(call_diff(counted, calls(cli))) == {}


# ---------------------------------------------------------------------------------------------
# release


def test_release_by_pod_keeps_gi_ci_and_cdi_spec(cli: Cli) -> None:
    a = allocated(cli, "ns/p", "1g.10gb", "0")
    b = ok(alloc(cli, "ns/p", "1g.10gb", "1", "0", "--container-index", "1"))["instance"]
    other = allocated(cli, "ns/q", "1g.10gb", "2")
    hw_before = gpus(cli)
    specs_before = lifecycle_files(cli.cdi_dir)
    data = ok(cli.json("release", "--pod", "ns/p"))
    assert data["kind"] == "Release"
    released = {i["migUUID"]: i for i in data["released"]}
    assert sorted(released) == sorted([a, b["migUUID"]])
    for inst in released.values():
        assert inst["state"] == "Idle"
        assert inst["owner"] is None
    assert gpus(cli) == hw_before
    assert lifecycle_files(cli.cdi_dir) == specs_before
    for mig in (a, b["migUUID"]):
        ext = record(cli, mig)["hamimig"]
        assert (ext["state"], ext["owner"]) == ("Idle", None)
        assert rec_state(cli, mig) == "Idle"
    assert record(cli, other)["hamimig"]["state"] == "Active"
    assert rec_state(cli, other) == "Active"


def test_release_says_which_pod_it_released(cli: Cli) -> None:
    """The released instance has no owner any more; the table names the pod it was released
    from, and the JSON has it as `lastOwner`."""
    mig = allocated(cli, "ns/p", "1g.10gb", "0")
    for dry in (["--dry-run"], []):
        ran = cli("release", "--mig-uuid", mig, *dry)
        assert ran.exit_code == 0, ran.stderr
        [row] = [line for line in ran.stdout.splitlines() if mig in line]
        assert "ns/p" in row
    again = ok(cli.json("release", "--pod", "ns/p"))  # already released: unchanged
    [inst] = again["released"]
    assert inst["owner"] is None
    assert (inst["lastOwner"]["namespace"], inst["lastOwner"]["name"]) == ("ns", "p")
    [row] = [line for line in cli("release", "--pod", "ns/p").stdout.splitlines() if mig in line]
    assert "ns/p" in row


def test_release_by_mig_uuid(cli: Cli) -> None:
    a = allocated(cli, "ns/p", "2g.20gb", "4")
    hw_before = gpus(cli)
    spec_before = spec_path(cli, a).read_bytes()
    data = ok(cli.json("release", "--mig-uuid", a))
    assert [(i["migUUID"], i["state"]) for i in data["released"]] == [(a, "Idle")]
    assert gpus(cli) == hw_before
    assert spec_path(cli, a).read_bytes() == spec_before
    assert record(cli, a)["hamimig"]["state"] == "Idle"


@pytest.mark.parametrize(
    "args",
    [
        ["--pod", "ns/nobody"],
        ["--mig-uuid", "MIG-00000000-0000-0000-0000-000000000000"],
    ],
)
def test_release_of_unknown_is_not_found(cli: Cli, args: list[str]) -> None:
    allocated(cli, "ns/p", "1g.10gb", "0")
    before = snapshot(cli)
    ran = cli.json("release", *args)
    assert ran.exit_code == 6
    assert error_code(ran) == "not-found"
    assert snapshot(cli) == before


# ---------------------------------------------------------------------------------------------
# exact reuse


def test_exact_reuse_hands_out_the_same_instance_without_nvml_mutations(cli: Cli) -> None:
    a = idle(cli, "ns/old", "1g.10gb", "2")
    spec_before = spec_path(cli, a).read_bytes()
    hw_before = gpus(cli)
    counted = calls(cli)
    data = ok(alloc(cli, "ns/new", "1g.10gb", "2:1"))
    diff = call_diff(counted, calls(cli))
    assert mutating(diff) == {}
    assert data["instance"]["migUUID"] == a
    assert (data["created"], data["reused"], data["reclaimed"]) == (False, True, [])
    assert data["instance"]["state"] == "Active"
    assert data["instance"]["owner"]["name"] == "new"
    assert data["instance"]["cdiDevice"] == qualified(a)
    assert gpus(cli) == hw_before
    assert spec_path(cli, a).read_bytes() == spec_before
    ext = record(cli, a)["hamimig"]
    assert (ext["state"], ext["owner"]["name"]) == ("Active", "new")


def test_reuse_by_gpu_uuid(cli: Cli) -> None:
    a = idle(cli, "ns/old", "2g.20gb", "2")
    gpu0 = gpus(cli)[0]["uuid"]
    counted = calls(cli)
    data = ok(alloc(cli, "ns/new", "2g.20gb", "2", gpu0))
    assert (data["instance"]["migUUID"], data["reused"], data["created"]) == (a, True, False)
    assert data["instance"]["gpuUUID"] == gpu0
    assert mutating(call_diff(counted, calls(cli))) == {}


def test_reuse_picks_the_matching_placement_among_idle_instances(cli: Cli) -> None:
    _, b, _ = idles(cli, ("1g.10gb", "0", "0"), ("1g.10gb", "5", "0"), ("1g.10gb", "6", "0"))
    data = ok(alloc(cli, "ns/new", "1g.10gb", "5"))
    assert (data["instance"]["migUUID"], data["reused"]) == (b, True)
    assert data["instance"]["placement"] == {"start": 5, "size": 1}


def test_idle_instance_on_another_gpu_is_not_reused(cli: Cli) -> None:
    a = idle(cli, "ns/old", "1g.10gb", "0", gpu="1")
    data = ok(alloc(cli, "ns/new", "1g.10gb", "0", "0"))
    assert data["created"] is True
    assert data["reused"] is False
    assert data["instance"]["migUUID"] != a
    assert data["instance"]["gpuIndex"] == 0
    assert record(cli, a)["hamimig"]["state"] == "Idle"
    assert live(cli, 1) == [(0, 1, a)]


def test_different_profile_at_same_placement_is_not_reused(cli: Cli) -> None:
    """1g.10gb and 1g.10gb+me share slice count and placement but not the profile ID."""
    a = idle(cli, "ns/old", "1g.10gb", "0")
    data = ok(alloc(cli, "ns/new", "1g.10gb+me", "0"))
    new = data["instance"]["migUUID"]
    assert (data["created"], data["reused"]) == (True, False)
    assert new != a
    assert data["instance"]["profile"] == "1g.10gb+me"
    assert data["reclaimed"] == [a]
    assert live(cli) == [(0, 1, new)]
    assert not record_path(cli, a).exists()
    assert not spec_path(cli, a).exists()
    assert gpus(cli)[0]["gpuInstances"][0]["profileId"] == 20


@pytest.mark.parametrize("damage", ["missing", "unparsable"])
def test_reuse_repairs_the_cdi_spec(cli: Cli, damage: str) -> None:
    a = idle(cli, "ns/old", "1g.10gb", "4")
    b = allocated(cli, "ns/other", "1g.10gb", "5")
    expected = spec_path(cli, a).read_bytes()
    path = spec_path(cli, a)
    if damage == "missing":
        path.unlink()
    else:  # damaged, not someone else's spec: rewritten
        path.write_text('{"cdiVersion": "0.3.0", "kind": "x/y", "devices": [\n')
        path.chmod(0o600)
    counted = calls(cli)
    data = ok(alloc(cli, "ns/new", "1g.10gb", "4"))
    assert (data["instance"]["migUUID"], data["reused"]) == (a, True)
    assert mutating(call_diff(counted, calls(cli))) == {}
    assert path.read_bytes() == expected
    assert mode(path) == 0o644
    assert sorted(lifecycle_files(cli.cdi_dir)) == sorted([path.name, spec_path(cli, b).name])


@pytest.mark.parametrize("foreign", ["tampered", "other-device"])
def test_reuse_never_overwrites_a_file_that_is_not_the_instances_spec(
    cli: Cli, foreign: str
) -> None:
    """Another kind, or another instance's spec (docs/formats.md "CDI specs"): the instance
    is not handed out and the file is kept (tests/test_cdi_removal_by_content.py)."""
    a = idle(cli, "ns/old", "1g.10gb", "4")
    b = allocated(cli, "ns/other", "1g.10gb", "5")
    path = spec_path(cli, a)
    if foreign == "tampered":
        path.write_text('{"cdiVersion": "0.3.0", "kind": "x/y", "devices": []}\n')
    else:
        path.write_bytes(spec_path(cli, b).read_bytes())
    frozen = Unchanged(cli)
    message = refused(alloc(cli, "ns/new", "1g.10gb", "4"), 5, "unverifiable")
    assert f"cannot reuse {a}" in message and str(path) in message
    frozen.check()


def test_failed_cdi_repair_leaves_the_instance_idle(cli: Cli) -> None:
    a = idle(cli, "ns/old", "1g.10gb", "4")
    expected = spec_path(cli, a).read_bytes()
    spec_path(cli, a).unlink()
    rec_before = record_path(cli, a).read_bytes()
    hw_before = gpus(cli)
    fault(cli, "cdi.write", "EIO")
    ran = alloc(cli, "ns/new", "1g.10gb", "4")
    assert ran.exit_code == 4
    assert error_code(ran) == "hardware"
    assert "Idle" in ran.json()["error"]["message"]
    assert record_path(cli, a).read_bytes() == rec_before
    assert gpus(cli) == hw_before
    assert not spec_path(cli, a).exists()
    assert lifecycle_files(cli.cdi_dir) == {}
    assert rec_state(cli, a) == "Idle"
    # Still cached: the next request (the fault is spent) reuses it and repairs the spec.
    data = ok(alloc(cli, "ns/new", "1g.10gb", "4"))
    assert (data["instance"]["migUUID"], data["reused"]) == (a, True)
    assert spec_path(cli, a).read_bytes() == expected


# ---------------------------------------------------------------------------------------------
# placement pressure


def test_placement_pressure_reclaims_only_the_blocking_idle_instances(cli: Cli) -> None:
    keep0, block2, block3, keep4 = idles(
        cli,
        ("1g.10gb", "0", "0"),
        ("1g.10gb", "2", "0"),
        ("1g.10gb", "3", "0"),
        ("1g.10gb", "4", "0"),
    )
    active6 = allocated(cli, "ns/e", "1g.10gb", "6")
    kept = {
        m: (record_path(cli, m).read_bytes(), spec_path(cli, m).read_bytes())
        for m in (
            keep0,
            keep4,
            active6,
        )
    }
    data = ok(alloc(cli, "ns/new", "2g.20gb", "2"))
    new = data["instance"]["migUUID"]
    assert (data["created"], data["reused"]) == (True, False)
    assert sorted(data["reclaimed"]) == sorted([block2, block3])
    assert data["instance"]["placement"] == {"start": 2, "size": 2}
    assert live(cli) == [(0, 1, keep0), (2, 2, new), (4, 1, keep4), (6, 1, active6)]
    for mig in (block2, block3):
        assert not record_path(cli, mig).exists()
        assert not spec_path(cli, mig).exists()
    for mig, (rec, spec) in kept.items():
        assert record_path(cli, mig).read_bytes() == rec
        assert spec_path(cli, mig).read_bytes() == spec
    assert sorted(lifecycle_files(cli.cdi_dir)) == sorted(
        spec_path(cli, m).name for m in (keep0, keep4, active6, new)
    )
    assert sorted(lifecycle_files(cli.state_dir)) == sorted(
        record_path(cli, m).name for m in (keep0, keep4, active6, new)
    )


@pytest.mark.parametrize("blocker", ["Active", "Unmanaged", "OrphanGI"])
def test_placement_blocked_by_what_hamimig_never_reclaims(cli: Cli, blocker: str) -> None:
    idle2 = idle(cli, "ns/a", "1g.10gb", "2")
    if blocker == "Active":
        allocated(cli, "ns/b", "1g.10gb", "3")
    else:
        sim_create(cli, "1g.10gb", "3", no_ci=blocker == "OrphanGI")
    before, counted = snapshot(cli), calls(cli)
    ran = alloc(cli, "ns/new", "2g.20gb", "2")
    assert ran.exit_code == 3
    assert error_code(ran) == "conflict"
    assert blocker in ran.json()["error"]["message"]
    assert snapshot(cli) == before
    assert mutating(call_diff(counted, calls(cli))) == {}
    assert rec_state(cli, idle2) == "Idle"


# ---------------------------------------------------------------------------------------------
# placement choice without --placement


def test_without_placement_an_exact_idle_match_comes_first(cli: Cli) -> None:
    a = idle(cli, "ns/old", "1g.10gb", "3")
    counted = calls(cli)
    data = ok(alloc(cli, "ns/new", "1g.10gb"))
    assert (data["instance"]["migUUID"], data["reused"], data["created"]) == (a, True, False)
    assert data["instance"]["placement"] == {"start": 3, "size": 1}
    assert mutating(call_diff(counted, calls(cli))) == {}


def test_without_placement_a_free_placement_before_reclaiming(cli: Cli) -> None:
    a, b = idles(cli, ("1g.10gb", "0", "0"), ("1g.10gb", "2", "0"))
    data = ok(alloc(cli, "ns/new", "2g.20gb"))
    assert (data["created"], data["reclaimed"]) == (True, [])
    assert data["instance"]["placement"] == {"start": 4, "size": 2}
    assert live(cli) == [(0, 1, a), (2, 1, b), (4, 2, data["instance"]["migUUID"])]
    assert rec_state(cli, a) == rec_state(cli, b) == "Idle"


def test_without_placement_the_fewest_idle_instances_are_reclaimed(cli: Cli) -> None:
    *low, two, six = idles(
        cli,
        *(("1g.10gb", str(s), "0") for s in range(4)),
        ("2g.20gb", "4", "0"),
        ("1g.10gb", "6", "0"),
    )
    data = ok(alloc(cli, "ns/new", "3g.40gb"))
    new = data["instance"]["migUUID"]
    assert data["instance"]["placement"] == {"start": 4, "size": 4}
    assert sorted(data["reclaimed"]) == sorted([two, six])
    assert live(cli) == sorted([*((s, 1, m) for s, m in enumerate(low)), (4, 4, new)])
    for mig in low:
        assert rec_state(cli, mig) == "Idle"


def test_without_placement_active_instances_are_never_chosen_for_reclaim(cli: Cli) -> None:
    *low, two = idles(cli, *(("1g.10gb", str(s), "0") for s in range(4)), ("2g.20gb", "4", "0"))
    active = allocated(cli, "ns/busy", "1g.10gb", "6")
    data = ok(alloc(cli, "ns/new", "3g.40gb"))
    new = data["instance"]["migUUID"]
    assert data["instance"]["placement"] == {"start": 0, "size": 4}
    assert sorted(data["reclaimed"]) == sorted(low)
    assert live(cli) == [(0, 4, new), (4, 2, two), (6, 1, active)]
    assert rec_state(cli, active) == "Active"


def test_without_placement_refused_when_every_placement_is_held(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    allocated(cli, "ns/b", "1g.10gb", "4")
    before = snapshot(cli)
    ran = alloc(cli, "ns/new", "3g.40gb")
    assert ran.exit_code == 3
    assert snapshot(cli) == before


# ---------------------------------------------------------------------------------------------
# Error: an instance that cannot be destroyed


def error_instance(cli: Cli, gi_only: bool = False) -> str:
    """An Idle 1g.10gb at 2 whose destruction fails: reclaim leaves it in Error (exit 4)."""
    a = idle(cli, "ns/old", "1g.10gb", "2")
    if gi_only:  # a monitoring client holds the GI: no process runs on the MIG device
        sim(cli, "busy", "--mig-uuid", a, "--gi-only")
    else:  # the destroy fails although no process showed (one started in between)
        fail_destroys(cli)
    ran = cli.json("reclaim", "--mig-uuid", a)
    assert ran.exit_code == 4
    assert error_code(ran) == "hardware"
    return a


def test_failed_destroy_leaves_error_with_record_and_spec(cli: Cli) -> None:
    a = idle(cli, "ns/old", "1g.10gb", "2")
    spec = spec_path(cli, a).read_bytes()
    fail_destroys(cli)
    ran = cli.json("reclaim", "--mig-uuid", a)
    assert ran.exit_code == 4
    assert "IN_USE" in ran.json()["error"]["message"]
    ext = record(cli, a)["hamimig"]
    assert ext["state"] == "Error"
    assert "IN_USE" in ext["error"]
    assert spec_path(cli, a).read_bytes() == spec
    assert live(cli) == [(2, 1, a)]
    assert state_of(cli, a) == "Error"
    shown = ok(cli.json("show", a))
    assert (shown["state"], shown["cdiSpec"]) == ("Error", str(spec_path(cli, a)))


def test_error_instance_is_not_reused_and_blocks_while_still_busy(cli: Cli) -> None:
    a = error_instance(cli)
    spec = spec_path(cli, a).read_bytes()
    hw_before = gpus(cli)
    counted = calls(cli)
    ran = alloc(cli, "ns/new", "1g.10gb", "2")
    assert ran.exit_code == 3
    assert error_code(ran) == "conflict"
    diff = call_diff(counted, calls(cli))
    # The destroy was retried first (and failed again); nothing was created.
    assert diff.get("nvmlComputeInstanceDestroy") == 1
    assert "nvmlDeviceCreateGpuInstanceWithPlacement" not in diff
    assert "nvmlGpuInstanceCreateComputeInstance" not in diff
    assert gpus(cli) == hw_before
    assert record(cli, a)["hamimig"]["state"] == "Error"
    assert spec_path(cli, a).read_bytes() == spec
    # Without --placement it is not handed out either: a fresh instance elsewhere.
    data = ok(alloc(cli, "ns/new", "1g.10gb"))
    assert data["instance"]["migUUID"] != a
    assert (data["reused"], data["created"]) == (False, True)
    assert rec_state(cli, a) == "Error"


def test_matching_allocate_retries_the_destroy_of_an_error_instance(cli: Cli) -> None:
    a = error_instance(cli)
    sim(cli, "fault", "clear")
    data = ok(alloc(cli, "ns/new", "1g.10gb", "2"))
    new = data["instance"]["migUUID"]
    assert new != a
    assert (data["created"], data["reused"], data["reclaimed"]) == (True, False, [a])
    assert live(cli) == [(2, 1, new)]
    assert not record_path(cli, a).exists()
    assert not spec_path(cli, a).exists()


def test_reconcile_destroys_an_error_instance_once_it_is_free(cli: Cli) -> None:
    a = error_instance(cli)
    gpu0 = gpus(cli)[0]["uuid"]
    # Without a pod list, a complete Error instance may be a pod's (HAMi's plugin restores
    # Error records as Idle and hands them out): not retried.
    [kept] = ok(cli.json("reconcile"))["actions"]
    assert (kept["action"], kept["migUUID"]) == ("skip", a)
    assert "a pod may hold it" in kept["reason"] and "no pod list" in kept["reason"]
    still = cli.json("reconcile", "--pods", owners_running(cli))
    assert still.exit_code == 4
    assert [x["action"] for x in still.json()["actions"]] == ["retry-destroy"]
    assert record(cli, a)["hamimig"]["state"] == "Error"
    assert spec_path(cli, a).exists()

    sim(cli, "fault", "clear")
    data = ok(cli.json("reconcile", "--pods", owners_running(cli)))
    assert data["kind"] == "Reconcile"
    assert data["dryRun"] is False
    [action] = data["actions"]
    assert action["action"] == "retry-destroy"
    assert (action["migUUID"], action["gpuUUID"]) == (a, gpu0)
    assert action["placement"] == {"start": 2, "size": 1}
    assert live(cli) == []
    assert lifecycle_files(cli.state_dir) == {}
    assert lifecycle_files(cli.cdi_dir) == {}
    assert ok(cli.json("reconcile"))["actions"] == []


def test_gi_held_by_a_client_leaves_error_and_reconcile_finishes_it(cli: Cli) -> None:
    a = error_instance(cli, gi_only=True)
    gi_only = [gi for gi in gpus(cli)[0]["gpuInstances"] if gi["placement"]["start"] == 2]
    assert len(gi_only) == 1
    assert gi_only[0]["computeInstances"] == []  # the CI went, the GI stayed
    ext = record(cli, a)["hamimig"]
    assert ext["state"] == "Error"
    assert "IN_USE" in ext["error"]
    assert spec_path(cli, a).exists()
    assert state_of(cli, a) == "Error"
    # Not reused: a matching request retries the destroy, which still fails.
    ran = alloc(cli, "ns/new", "1g.10gb", "2")
    assert ran.exit_code == 3
    assert record(cli, a)["hamimig"]["state"] == "Error"

    sim(cli, "busy", "--mig-uuid", a, "--clear")
    data = ok(cli.json("reconcile"))
    assert [(x["action"], x["migUUID"]) for x in data["actions"]] == [("retry-destroy", a)]
    assert gpus(cli)[0]["gpuInstances"] == []
    assert lifecycle_files(cli.state_dir) == {}
    assert lifecycle_files(cli.cdi_dir) == {}


def test_missing_idle_record_on_another_gpu_does_not_block_a_request_by_gpu_uuid(
    cli: Cli,
) -> None:
    gone = idle(cli, "ns/old", "1g.10gb", "0", gpu="1")
    sim(cli, "reset", "--gpu", "1")
    gpu0 = gpus(cli)[0]["uuid"]
    data = ok(alloc(cli, "ns/new", "1g.10gb", "0", gpu0))
    assert data["created"] is True
    assert state_of(cli, gone) == "Missing"


def test_missing_idle_record_on_another_gpu_does_not_block_a_request_by_index(cli: Cli) -> None:
    gone = idle(cli, "ns/old", "1g.10gb", "0", gpu="1")
    sim(cli, "reset", "--gpu", "1")
    ran = alloc(cli, "ns/new", "1g.10gb", "0", "0")
    assert ran.exit_code == 0, ran.stdout
    assert ran.json()["created"] is True
    assert ran.json()["instance"]["gpuIndex"] == 0
    assert state_of(cli, gone) == "Missing"


def test_show_agrees_with_list_on_a_half_destroyed_error_instance(cli: Cli) -> None:
    a = error_instance(cli, gi_only=True)
    assert state_of(cli, a) == "Error"
    shown = ok(cli.json("show", a))
    assert shown["state"] == "Error"


# ---------------------------------------------------------------------------------------------
# a failed allocation destroys what it created


def assert_nothing_created(cli: Cli, hw_before: Any) -> None:
    assert gpus(cli) == hw_before
    assert intent_files(cli) == []
    assert lifecycle_files(cli.state_dir) == {}
    assert lifecycle_files(cli.cdi_dir) == {}


@pytest.mark.parametrize(
    ("op", "error"),
    [
        ("nvmlGpuInstanceCreateComputeInstance", "UNKNOWN"),
        ("cdi.write", "EIO"),
        ("record.write", "EIO"),
    ],
)
def test_failed_allocation_rolls_back_everything_it_created(
    cli: Cli, op: str, error: str | None
) -> None:
    hw_before = gpus(cli)
    fault(cli, op, error)
    counted = calls(cli)
    ran = alloc(cli, "ns/p", "2g.20gb", "2")
    assert ran.exit_code == 4
    assert error_code(ran) == "hardware"
    assert "rolled back" in ran.json()["error"]["message"]
    diff = call_diff(counted, calls(cli))
    assert diff["nvmlDeviceCreateGpuInstanceWithPlacement"] == 1
    assert diff["nvmlGpuInstanceDestroy"] == 1
    if op != "nvmlGpuInstanceCreateComputeInstance":
        assert diff["nvmlComputeInstanceDestroy"] == 1  # the CI existed: it went first
    assert_nothing_created(cli, hw_before)
    assert instances(cli) == []
    # The node is usable again: the same request now succeeds.
    assert ok(alloc(cli, "ns/p", "2g.20gb", "2"))["created"] is True


def test_failed_allocation_after_reclaim_keeps_other_idle_instances(cli: Cli) -> None:
    gone2, gone3, keep5 = idles(
        cli, ("1g.10gb", "2", "0"), ("1g.10gb", "3", "0"), ("1g.10gb", "5", "0")
    )
    keep_files = (record_path(cli, keep5).read_bytes(), spec_path(cli, keep5).read_bytes())
    fault(cli, "nvmlGpuInstanceCreateComputeInstance", "UNKNOWN")
    ran = alloc(cli, "ns/new", "2g.20gb", "2")
    assert ran.exit_code == 4
    # The blocking Idle instances were reclaimed before the failure (by design) ...
    for mig in (gone2, gone3):
        assert not record_path(cli, mig).exists()
        assert not spec_path(cli, mig).exists()
    # ... the partial new instance is gone, and the other cached instance stays.
    assert live(cli) == [(5, 1, keep5)]
    assert (record_path(cli, keep5).read_bytes(), spec_path(cli, keep5).read_bytes()) == keep_files
    assert intent_files(cli) == []
    assert sorted(lifecycle_files(cli.state_dir)) == [record_path(cli, keep5).name]
    assert sorted(lifecycle_files(cli.cdi_dir)) == [spec_path(cli, keep5).name]
    assert [(i["migUUID"], i["state"]) for i in instances(cli)] == [(keep5, "Idle")]


def test_failed_gi_creation_changes_nothing(cli: Cli) -> None:
    keep = idle(cli, "ns/a", "1g.10gb", "0")
    before = snapshot(cli)
    fault(cli, "nvmlDeviceCreateGpuInstanceWithPlacement", "UNKNOWN")
    ran = alloc(cli, "ns/new", "2g.20gb", "2")
    assert ran.exit_code == 4
    assert snapshot(cli) == before
    assert rec_state(cli, keep) == "Idle"


# ---------------------------------------------------------------------------------------------
# CDI removal queue


def test_failed_cdi_removal_is_queued_and_retried_by_reconcile(cli: Cli) -> None:
    a, keep = idles(cli, ("1g.10gb", "1", "0"), ("1g.10gb", "5", "0"))
    fault(cli, "cdi.remove", "EIO")
    ran = cli.json("reclaim", "--mig-uuid", a)
    assert ran.exit_code == 0, ran.stdout
    assert [i["migUUID"] for i in ran.json()["reclaimed"]] == [a]
    # The hardware is gone and so is the record; the spec stays, remembered in the queue.
    assert live(cli) == [(5, 1, keep)]
    assert not record_path(cli, a).exists()
    assert spec_path(cli, a).exists()
    queue = json.loads((cli.state_dir / QUEUE_NAME).read_text())
    assert [r["migUUID"] for r in queue["removals"]] == [a]
    assert "Input/output error" in queue["removals"][0]["lastError"]

    data = ok(cli.json("reconcile"))
    assert [(x["action"], x["migUUID"]) for x in data["actions"]] == [("retry-cdi-removal", a)]
    assert not spec_path(cli, a).exists()
    queue_path = cli.state_dir / QUEUE_NAME
    assert not queue_path.exists() or json.loads(queue_path.read_text())["removals"] == []
    assert sorted(lifecycle_files(cli.cdi_dir)) == [spec_path(cli, keep).name]
    assert rec_state(cli, keep) == "Idle"
    assert ok(cli.json("reconcile"))["actions"] == []


def test_cdi_removal_failing_again_stays_queued(cli: Cli) -> None:
    a = idle(cli, "ns/old", "1g.10gb", "1")
    fault(cli, "cdi.remove", "EIO")
    ok(cli.json("reclaim", "--mig-uuid", a))
    fault(cli, "cdi.remove", "EACCES")
    ran = cli.json("reconcile")
    assert ran.exit_code == 4
    assert [x["action"] for x in ran.json()["actions"]] == ["retry-cdi-removal"]
    assert spec_path(cli, a).exists()
    queue = json.loads((cli.state_dir / QUEUE_NAME).read_text())["removals"]
    assert [(r["migUUID"], r["attempts"]) for r in queue] == [(a, 2)]
    ok(cli.json("reconcile"))
    assert not spec_path(cli, a).exists()


# ---------------------------------------------------------------------------------------------
# reclaim


def test_reclaim_refuses_active_unmanaged_and_unknown(cli: Cli) -> None:
    active = allocated(cli, "ns/p", "1g.10gb", "0")
    unmanaged = sim_create(cli, "1g.10gb", "1")["migUUID"]
    before = snapshot(cli)
    for mig, code in ((active, 3), (unmanaged, 3), ("MIG-00000000-0000-0000-0000-000000000000", 6)):
        ran = cli.json("reclaim", "--mig-uuid", mig)
        assert ran.exit_code == code, (mig, ran.stdout)
        assert error_code(ran) == {3: "conflict", 6: "not-found"}[code]
        assert snapshot(cli) == before


def test_reclaim_all_idle_dry_run_then_for_real(cli: Cli) -> None:
    a, b, other_gpu = idles(
        cli, ("1g.10gb", "0", "0"), ("2g.20gb", "2", "0"), ("1g.10gb", "0", "1")
    )
    active = allocated(cli, "ns/c", "1g.10gb", "4")
    unmanaged = sim_create(cli, "1g.10gb", "5")["migUUID"]
    before = snapshot(cli)
    dry = ok(cli.json("reclaim", "--gpu", "0", "--all-idle", "--dry-run"))
    assert dry["kind"] == "Reclaim"
    assert dry["dryRun"] is True
    assert sorted(i["migUUID"] for i in dry["reclaimed"]) == sorted([a, b])
    assert {i["state"] for i in dry["reclaimed"]} == {"Idle"}
    assert snapshot(cli) == before

    real = ok(cli.json("reclaim", "--gpu", "0", "--all-idle"))
    assert real["dryRun"] is False
    assert sorted(i["migUUID"] for i in real["reclaimed"]) == sorted([a, b])
    assert live(cli) == [(4, 1, active), (5, 1, unmanaged)]
    assert live(cli, 1) == [(0, 1, other_gpu)]
    for mig in (a, b):
        assert not record_path(cli, mig).exists()
        assert not spec_path(cli, mig).exists()
    assert sorted(lifecycle_files(cli.cdi_dir)) == sorted(
        spec_path(cli, m).name for m in (active, other_gpu)
    )


def test_reclaim_placement_with_active_inside_changes_nothing(cli: Cli) -> None:
    idle(cli, "ns/a", "1g.10gb", "0")
    allocated(cli, "ns/b", "1g.10gb", "2")
    before = snapshot(cli)
    ran = cli.json("reclaim", "--gpu", "0", "--placement", "0:4")
    assert ran.exit_code == 3
    assert error_code(ran) == "conflict"
    assert "Active" in ran.json()["error"]["message"]
    assert snapshot(cli) == before


def test_reclaim_placement_destroys_only_idle_in_the_window(cli: Cli) -> None:
    a, b, keep = idles(cli, ("1g.10gb", "0", "0"), ("1g.10gb", "3", "0"), ("1g.10gb", "4", "0"))
    data = ok(cli.json("reclaim", "--gpu", "0", "--placement", "0:4"))
    assert sorted(i["migUUID"] for i in data["reclaimed"]) == sorted([a, b])
    assert live(cli) == [(4, 1, keep)]


# ---------------------------------------------------------------------------------------------
# NVML errors fail closed


@pytest.mark.parametrize(
    "op",
    [
        "nvmlDeviceGetGpuInstances",
        "nvmlDeviceGetMigDeviceHandleByIndex",
    ],
)
def test_nvml_error_while_reading_the_layout_changes_nothing(cli: Cli, op: str) -> None:
    keep = idle(cli, "ns/a", "1g.10gb", "2")  # would be reclaimed by the request below
    before = snapshot(cli)
    fault(cli, op, "UNKNOWN")
    counted = calls(cli)
    ran = alloc(cli, "ns/new", "2g.20gb", "2")
    assert ran.exit_code == 4
    assert error_code(ran) == "hardware"
    assert op in ran.json()["error"]["message"]
    assert mutating(call_diff(counted, calls(cli))) == {}
    assert snapshot(cli) == before
    assert rec_state(cli, keep) == "Idle"


def test_nvml_error_while_verifying_a_reuse_keeps_it_idle(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "2")
    before = snapshot(cli)
    fault(cli, "nvmlDeviceGetHandleByUUID", "GPU_IS_LOST")
    ran = alloc(cli, "ns/new", "1g.10gb", "2")
    assert ran.exit_code == 4
    assert snapshot(cli) == before
    assert rec_state(cli, a) == "Idle"


def test_nvml_error_while_destroying_leaves_error(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "2")
    fault(cli, "nvmlComputeInstanceDestroy", "UNKNOWN")
    ran = cli.json("reclaim", "--mig-uuid", a)
    assert ran.exit_code == 4
    assert record(cli, a)["hamimig"]["state"] == "Error"
    assert "UNKNOWN" in record(cli, a)["hamimig"]["error"]
    assert spec_path(cli, a).exists()
    assert live(cli) == [(2, 1, a)]
    # The fault is spent: reconcile destroys it now.
    data = ok(cli.json("reconcile", "--pods", owners_running(cli)))
    assert [(x["action"], x["migUUID"]) for x in data["actions"]] == [("retry-destroy", a)]
    assert live(cli) == []
    assert lifecycle_files(cli.state_dir) == {}
    assert lifecycle_files(cli.cdi_dir) == {}


# ---------------------------------------------------------------------------------------------
# unreadable records


def test_unreadable_record_warns_readers_and_stops_every_mutating_command(cli: Cli) -> None:
    active = allocated(cli, "ns/act", "1g.10gb", "0")
    idle_mig = idle(cli, "ns/idle", "1g.10gb", "2")
    bad = cli.state_dir / f"hami-owned-mig-{'a' * 64}.json"
    bad.write_text("{not json")
    bad.chmod(0o600)

    # Read-only commands list it under warnings and exit 0.
    data = ok(cli.json("list"))
    assert [w["file"] for w in data["warnings"]] == [str(bad)]
    assert data["warnings"][0]["reason"]
    assert sorted((i["migUUID"], i["state"]) for i in data["instances"]) == sorted(
        [(active, "Active"), (idle_mig, "Idle")]
    )
    assert cli("list").exit_code == 0  # the table too
    assert ok(cli.json("show", active))["state"] == "Active"

    # Mutating commands refuse (exit 5) and change nothing, whatever path they would take.
    refused = [
        ["allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb", "--placement", "4"],
        ["allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb", "--placement", "2"],
        ["allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "2g.20gb", "--placement", "2"],
        ["allocate", "--pod", "ns/act", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0"],
        ["release", "--pod", "ns/act"],
        ["release", "--mig-uuid", active],
        ["reclaim", "--mig-uuid", idle_mig],
        ["reclaim", "--gpu", "0", "--all-idle"],
        ["reclaim", "--gpu", "0", "--placement", "2"],
        ["reconcile"],
    ]
    before, counted = snapshot(cli), calls(cli)
    for argv in refused:
        ran = cli.json(*argv)
        assert ran.exit_code == 5, (argv, ran.stdout)
        assert error_code(ran) == "unverifiable"
        assert str(bad) in ran.json()["error"]["message"]
        assert snapshot(cli) == before, argv
    assert mutating(call_diff(counted, calls(cli))) == {}


# ---------------------------------------------------------------------------------------------
# the node lock


def test_mutating_commands_exit_7_while_another_holds_the_lock(cli: Cli) -> None:
    allocated(cli, "ns/p", "1g.10gb", "3")
    commands = [
        ["allocate", "--pod", "ns/q", "--gpu", "0", "--profile", "1g.10gb"],
        ["allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb"],
        ["release", "--pod", "ns/p"],
        ["reclaim", "--gpu", "0", "--all-idle"],
        ["reconcile"],
    ]
    before = snapshot(cli)
    with NodeLock(cli.state_dir, timeout=1.0):
        for argv in commands:
            ran = cli.json(*argv, "--lock-timeout", "0.2")
            assert ran.exit_code == 7, (argv, ran.stdout)
            assert error_code(ran) == "busy"
            assert snapshot(cli) == before
    # Once the lock is free the same commands run.
    for argv in commands:
        assert cli.json(*argv, "--lock-timeout", "0.2").exit_code == 0, argv


@pytest.mark.slow
def test_lock_held_by_another_process(cli: Cli) -> None:
    cli.state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from hamimig.store.lock import NodeLock\n"
            "with NodeLock(Path(sys.argv[1])):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(30)\n",
            str(cli.state_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        ran = run_hamimig(
            *cli.globals(),
            "-o",
            "json",
            "allocate",
            "--pod",
            "ns/p",
            "--gpu",
            "0",
            "--profile",
            "1g.10gb",
            "--lock-timeout",
            "0.2",
        )
        assert ran.returncode == 7
        assert json.loads(ran.stdout)["error"]["code"] == "busy"
        assert live(cli) == []
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


# ---------------------------------------------------------------------------------------------
# config


def test_profile_allowlist_refuses_other_profiles(cli: Cli) -> None:
    idle2g = idle(cli, "ns/old", "2g.20gb", "4")  # cached before the allowlist existed
    strict = configured(cli, "devices:\n  nvidia:\n    migProfileAllowlist: [1g.10gb]\n")
    before = snapshot(strict)
    for placement in ("0", "4", None):
        ran = alloc(strict, "ns/p", "2g.20gb", placement)
        assert ran.exit_code == 2, (placement, ran.stdout)
        assert error_code(ran) == "usage"
        assert "migProfileAllowlist" in ran.json()["error"]["message"]
        assert snapshot(strict) == before
    assert rec_state(strict, idle2g) == "Idle"
    assert ok(alloc(strict, "ns/p", "1g.10gb", "0"))["created"] is True


def test_legacy_mode_writes_no_cdi_spec_but_records(cli: Cli) -> None:
    legacy = configured(cli, LEGACY_CONFIG)
    data = ok(alloc(legacy, "ns/p", "1g.10gb", "1"))
    a = data["instance"]["migUUID"]
    assert data["instance"]["cdiDevice"] is None
    assert not legacy.cdi_dir.exists() or lifecycle_files(legacy.cdi_dir) == {}
    assert record(legacy, a)["hamimig"]["state"] == "Active"
    assert record(legacy, a)["hamimig"]["cdiDevice"] is None
    assert mode(record_path(legacy, a)) == 0o600
    ok(legacy.json("release", "--pod", "ns/p"))
    again = ok(alloc(legacy, "ns/q", "1g.10gb", "1"))
    assert (again["instance"]["migUUID"], again["reused"]) == (a, True)
    b = ok(alloc(legacy, "ns/r", "2g.20gb", "2"))["instance"]["migUUID"]
    ok(legacy.json("release", "--pod", "ns/r"))
    ok(legacy.json("reclaim", "--mig-uuid", b))
    assert not record_path(legacy, b).exists()
    assert not legacy.cdi_dir.exists() or lifecycle_files(legacy.cdi_dir) == {}
    shown = ok(legacy.json("show", a))
    assert shown["cdiSpec"] is None


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("devices:\n  nvidia:\n    migProfileAllowList: [1g.10gb]\n", "migProfileAllowList"),
        ("cdi:\n  enable: false\n", "cdi.enable"),
        ("device:\n  nvidia: {}\n", "device"),
    ],
)
def test_unknown_config_key_is_a_usage_error(cli: Cli, text: str, name: str) -> None:
    bad = configured(cli, text)
    ran = alloc(bad, "ns/p", "1g.10gb", "0")
    assert ran.exit_code == 2
    assert error_code(ran) == "usage"
    assert name in ran.json()["error"]["message"]
    assert live(cli) == []
    assert lifecycle_files(cli.state_dir) == {}


# ---------------------------------------------------------------------------------------------
# list and show


def test_list_joins_records_with_the_live_layout(cli: Cli) -> None:
    active = allocated(cli, "ns/act", "1g.10gb", "0")
    idle_mig, err = idles(cli, ("1g.10gb", "1", "0"), ("1g.10gb", "2", "0"))
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", err).exit_code == 4
    sim(cli, "fault", "clear")
    unmanaged = sim_create(cli, "1g.10gb", "3")["migUUID"]
    sim_create(cli, "2g.20gb", "4", no_ci=True)
    gone_active = allocated(cli, "ns/gone", "1g.10gb", "0", gpu="1")
    gone_idle = idle(cli, "ns/gone-idle", "2g.20gb", "2", gpu="1")
    sim(cli, "reset", "--gpu", "1")

    data = ok(cli.json("list"))
    assert data["kind"] == "InstanceList"
    assert data["warnings"] == []
    got = sorted(
        (i["gpuIndex"], i["placement"]["start"], i["state"], i["migUUID"], i["profile"])
        for i in data["instances"]
    )
    assert got == sorted(
        [
            (0, 0, "Active", active, "1g.10gb"),
            (0, 1, "Idle", idle_mig, "1g.10gb"),
            (0, 2, "Error", err, "1g.10gb"),
            (0, 3, "Unmanaged", unmanaged, "1g.10gb"),
            (0, 4, "OrphanGI", None, "2g.20gb"),
            (1, 0, "Missing", gone_active, "1g.10gb"),
            (1, 2, "Missing", gone_idle, "2g.20gb"),
        ]
    )
    by_state = {i["state"]: i for i in data["instances"] if i["gpuIndex"] == 0}
    assert by_state["Active"]["owner"]["name"] == "act"
    assert by_state["Idle"]["owner"] is None
    assert by_state["Active"]["cdiDevice"] == qualified(active)
    assert "IN_USE" in by_state["Error"]["error"]
    assert by_state["OrphanGI"]["computeInstanceID"] is None
    assert by_state["Unmanaged"]["cdiDevice"] is None
    for state in ("Missing", "Error", "OrphanGI", "Active"):
        filtered = ok(cli.json("list", "--state", state))["instances"]
        assert {i["state"] for i in filtered} == {state}
    missing = ok(cli.json("list", "--state", "Missing"))["instances"]
    assert sorted(i["migUUID"] for i in missing) == sorted([gone_active, gone_idle])


@pytest.mark.slow
def test_list_shows_creating_for_an_allocation_that_crashed(cli: Cli) -> None:
    keep = idle(cli, "ns/keep", "1g.10gb", "6")
    fault(cli, "nvmlGpuInstanceCreateComputeInstance", action="crash-before")
    ran = run_hamimig(*cli.globals(), *allocate_args("ns/crash", "2g.20gb", "2"))
    assert ran.returncode == 137, ran.stderr
    [intent] = intent_files(cli)
    assert not intent.startswith("hami-owned-")
    [gi] = [g for g in gpus(cli)[0]["gpuInstances"] if g["placement"]["start"] == 2]
    assert gi["computeInstances"] == []
    data = ok(cli.json("list"))
    creating = [i for i in data["instances"] if i["state"] == "Creating"]
    assert len(creating) == 1
    c = creating[0]
    assert (c["gpuIndex"], c["profile"], c["placement"]) == (0, "2g.20gb", {"start": 2, "size": 2})
    assert c["gpuInstanceID"] == gi["id"]
    assert c["migUUID"] is None
    assert c["owner"]["name"] == "crash"
    assert state_of(cli, keep) == "Idle"
    assert [i["state"] for i in data["instances"]].count("OrphanGI") == 0
    # The interrupted allocation blocks further allocations on that GPU until recovery.
    before = snapshot(cli)
    refused = alloc(cli, "ns/new", "1g.10gb", "0")
    assert refused.exit_code == 5
    assert snapshot(cli) == before


def test_show_managed_unmanaged_and_unknown(cli: Cli) -> None:
    a = allocated(cli, "ns/p", "1g.10gb", "2")
    shown = ok(cli.json("show", a))
    assert shown["kind"] == "Instance"
    assert (shown["migUUID"], shown["state"], shown["profile"]) == (a, "Active", "1g.10gb")
    assert shown["owner"]["name"] == "p"
    assert shown["record"] == str(record_path(cli, a))
    assert shown["cdiSpec"] == str(spec_path(cli, a))
    assert shown["cdiDevice"] == qualified(a)

    ok(cli.json("release", "--mig-uuid", a))
    shown = ok(cli.json("show", a))
    assert (shown["state"], shown["owner"]) == ("Idle", None)

    u = sim_create(cli, "2g.20gb", "4")["migUUID"]
    shown = ok(cli.json("show", u))
    assert (shown["migUUID"], shown["state"], shown["profile"]) == (u, "Unmanaged", "2g.20gb")
    assert shown["placement"] == {"start": 4, "size": 2}
    assert (shown["record"], shown["cdiSpec"], shown["owner"]) == (None, None, None)

    ran = cli.json("show", "MIG-00000000-0000-0000-0000-000000000000")
    assert ran.exit_code == 6
    assert error_code(ran) == "not-found"

    sim(cli, "reset", "--gpu", "0")
    shown = ok(cli.json("show", a))
    assert shown["state"] == "Missing"


# ---------------------------------------------------------------------------------------------
# every spec allocate writes loads in the reference CDI library


@pytest.mark.parametrize("model", sorted(MODELS))
def test_reference_library_loads_every_allocated_spec(
    tmp_path: Path, model: str, cdi_check: Path
) -> None:
    sim_path = tmp_path / "sim" / "node.json"
    sim_init(sim_path, model, 2)
    node = Cli(sim_path, tmp_path / "state", tmp_path / "cdi")
    names = {p.id: p.name for p in MODELS[model].profiles}
    plan = [
        ("0", names[19], "0"),  # 1g
        ("0", names[20], "1"),  # 1g+me
        ("0", names[14], "2"),  # 2g
        ("0", names[9], "4"),  # 3g
        ("1", names[5], "0"),  # 4g
        ("1", names[15], "4"),  # 1g, 2 memory slices
        ("1", names[19], "6"),  # 1g
    ]
    migs = []
    for i, (gpu, profile, placement) in enumerate(plan):
        migs.append(allocated(node, f"ns/p{i}", profile, placement, gpu))
    # A reuse after the spec went missing writes it again: it must load too.
    ok(node.json("release", "--mig-uuid", migs[0]))
    spec_path(node, migs[0]).unlink()
    assert ok(alloc(node, "ns/again", names[19], "0"))["reused"] is True
    ran = subprocess.run(
        [str(cdi_check), str(node.cdi_dir)], capture_output=True, text=True, timeout=60, check=False
    )
    report = json.loads(ran.stdout)
    assert (ran.returncode, report["errors"] or []) == (0, [])
    assert sorted(report["devices"] or []) == sorted(qualified(m) for m in migs)
    assert len(lifecycle_files(node.cdi_dir)) == len(plan)
