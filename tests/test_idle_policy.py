"""The idle cache policy through the CLI: `idleTTL` and `maxIdleInstancesPerGPU`, enforced by
`reconcile` with a pod source; idle age (`idleSince`, `updatedAt`, the idle-seen file);
`reclaim --idle-older-than`; and the simulated node's clock that moves time without sleeping
(docs/formats.md "Config", "Ownership records", "Idle-seen times")."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hamimig.sim.state import CRASH_EXIT_STATUS
from tests.support.cli import (
    Cli,
    allocated,
    configured,
    fail_destroys,
    idle,
    instances,
    ok,
    refused,
    run_hamimig,
    sim,
    sim_create,
    state_of,
)
from tests.support.files import tree
from tests.support.nvml import DESTROY_CI
from tests.support.pods import PodsFile, entry, kube_pod
from tests.support.records import ext, hami_record, record_path

TTL_1H = "devices:\n  nvidia:\n    idleTTL: 1h\n"


def policy(cli: Cli, ttl: str | None = None, cap: int | None = None) -> Cli:
    lines = ["devices:", "  nvidia:"]
    if ttl is not None:
        lines.append(f"    idleTTL: {ttl}")
    if cap is not None:
        lines.append(f"    maxIdleInstancesPerGPU: {cap}")
    return configured(cli, "\n".join(lines) + "\n")


def advance(cli: Cli, duration: str) -> None:
    sim(cli, "clock", "--advance", duration)


def reconcile(cli: Cli, pods: str, *extra: str) -> dict[str, Any]:
    return ok(cli.json("reconcile", "--pods", pods, *extra))


def actions(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [a for a in report["actions"] if a["action"] == kind]


def evicted(report: dict[str, Any]) -> list[str]:
    return [a["migUUID"] for a in actions(report, "evict-idle")]


def listed(cli: Cli) -> set[str]:
    return {i["migUUID"] for i in instances(cli)}


# ----- the clock -----------------------------------------------------------------------------


def test_sim_clock_moves_the_node_time_and_reports_it(cli: Cli) -> None:
    before = sim(cli, "clock")["clock"]
    assert before["offsetSeconds"] == 0.0
    moved = sim(cli, "clock", "--advance", "2h")
    assert moved["clock"]["offsetSeconds"] == 7200.0
    assert "2h ahead of this host" in moved["message"]
    assert sim(cli, "show")["clock"]["offsetSeconds"] == 7200.0
    mig = allocated(cli, "ns/a", "1g.10gb")
    stamped = ext(cli, mig)["createdAt"]
    assert stamped > moved["clock"]["now"][:16]  # the record carries the node's time
    at = sim(cli, "clock", "--set", "2030-01-01T00:00:00Z")["clock"]["now"]
    assert at.startswith("2030-01-01T00:00:0")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--advance", "1.5h"], "--advance: '1.5h' is not a duration like 90s"),
        (["--advance", "-1h"], "--advance: '-1h' is not a duration"),
        (["--set", "2030-01-01T00:00:00"], "--set: '2030-01-01T00:00:00' is not an RFC 3339"),
        (["--set", "2300-01-01T00:00:00Z"], "more than a century"),
        (["--advance", "1h", "--set", "2030-01-01T00:00:00Z"], "exclude each other"),
    ],
)
def test_sim_clock_refuses_bad_input_in_one_line(cli: Cli, args: list[str], needle: str) -> None:
    before = tree(cli.sim.parent)
    message = refused(cli.json("sim", "clock", *args), 2, "usage")
    assert needle in message and "\n" not in message
    assert tree(cli.sim.parent) == before


# ----- config ----------------------------------------------------------------------------------


def test_config_show_names_the_settings_and_their_sources(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    def settings(c: Cli) -> dict[str, tuple[Any, str]]:
        doc = ok(c.json("config", "show"))
        return {s["key"]: (s["value"], s["source"]) for s in doc["settings"]}

    keys = ("devices.nvidia.idleTTL", "devices.nvidia.maxIdleInstancesPerGPU")
    shown = settings(cli)
    assert [shown[k] for k in keys] == [("off", "default"), (None, "default")]
    filed = policy(cli, "1h30m", 4)
    shown = settings(filed)
    assert [shown[k] for k in keys] == [("1h30m", str(filed.config)), (4, str(filed.config))]
    assert settings(policy(cli, "3600"))["devices.nvidia.idleTTL"][0] == "1h"
    assert settings(policy(cli, "0"))["devices.nvidia.idleTTL"][0] == "off"
    assert settings(policy(cli, "~"))["devices.nvidia.idleTTL"] == ("off", "default")
    assert settings(policy(cli, "0090"))["devices.nvidia.idleTTL"][0] == "1m30s"
    monkeypatch.setenv("HAMIMIG_IDLE_TTL", "90s")
    monkeypatch.setenv("HAMIMIG_MAX_IDLE_INSTANCES_PER_GPU", "0")
    shown = settings(filed)
    assert [shown[k] for k in keys] == [
        ("1m30s", "env HAMIMIG_IDLE_TTL"),
        (0, "env HAMIMIG_MAX_IDLE_INSTANCES_PER_GPU"),
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("idleTTL: 1.5h", "'1.5h' is not a duration"),
        ("idleTTL: 1.5", "idleTTL must be a duration"),
        ("idleTTL: true", "idleTTL must be a duration"),
        ("idleTTL: ''", "'' is not a duration"),
        ("idleTTL: [1h]", "idleTTL must be a duration"),
        ("idleTTL: -60", "'-60' is not a duration"),
        ("maxIdleInstancesPerGPU: -1", "must be a whole number of at least 0"),
        ("maxIdleInstancesPerGPU: 2.0", "must be a whole number"),
        ("maxIdleInstancesPerGPU: '2'", "plain decimal whole number, not '2'"),
        ("maxIdleInstancesPerGPU: 010", "plain decimal whole number, not '010'"),
        ("maxIdleInstancesPerGPU: 0x3", "plain decimal whole number, not '0x3'"),
        ("idleTTL: 1:30", "'1:30' is not a duration"),
        ("idleTTL: 0x10", "'0x10' is not a duration"),
        ("idleTTL: 1_000", "'1_000' is not a duration"),
        ("maxIdleInstancesPerGPU: yes", "must be a whole number"),
        ("maxIdleInstancesPerGPU: 100000", "at most 1000"),
        ("idleTtl: 1h", "unknown key 'devices.nvidia.idleTtl'"),
    ],
)
def test_bad_policy_settings_exit_2_naming_them(cli: Cli, text: str, needle: str) -> None:
    bad = configured(cli, f"devices:\n  nvidia:\n    {text}\n")
    message = refused(bad.json("config", "show"), 2, "usage")
    assert needle in message, message
    assert "\n" not in message
    refused(bad.json("reconcile"), 2, "usage")


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [
        ("HAMIMIG_IDLE_TTL", "", "environment HAMIMIG_IDLE_TTL: '' is not a duration"),
        ("HAMIMIG_IDLE_TTL", "soon", "is not a duration"),
        ("HAMIMIG_MAX_IDLE_INSTANCES_PER_GPU", "-3", "must be a whole number"),
        ("HAMIMIG_MAX_IDLE_INSTANCES_PER_GPU", "four", "must be a whole number"),
        ("HAMIMIG_MAX_IDLE_INSTANCES_PER_GPU", "1234567", "at most 1000, not 1234567"),
    ],
)
def test_bad_policy_environment_exits_2_naming_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, var: str, value: str, needle: str
) -> None:
    monkeypatch.setenv(var, value)
    assert needle in refused(cli.json("config", "show"), 2, "usage")


# ----- idle age ------------------------------------------------------------------------------


def test_idle_since_starts_at_release_survives_recover_and_goes_on_reuse(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    assert "idleSince" not in ext(cli, mig)
    ok(cli.json("release", "--pod", "ns/a"))
    since = ext(cli, mig)["idleSince"]
    assert since == ext(cli, mig)["updatedAt"]
    advance(cli, "1h")
    for _ in range(2):
        ok(cli.json("recover", "--pods", pods_file()))
        assert ext(cli, mig)["idleSince"] == since  # a second recover keeps the clock
    ok(cli.json("reconcile", "--pods", pods_file()))
    assert ext(cli, mig)["idleSince"] == since
    again = allocated(cli, "ns/b", "1g.10gb", "0")
    assert again == mig
    assert ext(cli, mig)["state"] == "Active"
    assert "idleSince" not in ext(cli, mig)


def test_recovery_restoring_an_active_record_to_idle_starts_its_clock(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = allocated(cli, "ns/gone", "1g.10gb", "0")
    advance(cli, "3h")
    report = ok(cli.json("recover", "--pods", pods_file()))
    assert [a["action"] for a in report["actions"] if a["migUUID"] == mig] == ["restore-idle"]
    since = ext(cli, mig)["idleSince"]
    assert since == ext(cli, mig)["updatedAt"]
    assert since > ext(cli, mig)["createdAt"]


def test_adoption_starts_the_clock_of_an_adopted_pair(cli: Cli) -> None:
    inst = sim_create(cli, "1g.10gb", "4")
    adopting = configured(cli, "devices:\n  nvidia:\n    adoptExistingMIGInstances: true\n")
    ok(adopting.json("recover", "--assume-no-pods", "--adopt"))
    fields = ext(cli, inst["migUUID"])
    assert (fields["state"], fields["idleSince"]) == ("Idle", fields["updatedAt"])


def test_a_record_with_an_unreadable_idle_since_is_refused_not_guessed(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/a", "1g.10gb")
    path = record_path(cli, mig)
    doc = json.loads(path.read_text())
    doc["hamimig"]["idleSince"] = "yesterday"
    path.write_text(json.dumps(doc))
    assert "hamimig.idleSince 'yesterday'" in refused(
        policy(cli, "1h").json("reconcile", "--pods", pods_file()), 5, "unverifiable"
    )
    assert any("idleSince" in w["reason"] for w in ok(cli.json("list"))["warnings"])


# ----- reconcile's idle TTL ------------------------------------------------------------------


def test_ttl_evicts_only_instances_idle_longer_than_it(cli: Cli, pods_file: PodsFile) -> None:
    node = policy(cli, "1h")
    old = idle(cli, "ns/old", "1g.10gb", "0")
    keep = allocated(cli, "ns/keep", "1g.10gb", "6")
    advance(cli, "2h")
    young = idle(cli, "ns/young", "1g.10gb", "1")
    pods = pods_file(kube_pod("ns/keep"))
    report = reconcile(node, pods)
    assert evicted(report) == [old]
    (reason,) = [a["reason"] for a in actions(report, "evict-idle")]
    assert reason.startswith("idle policy: idle 2h") and reason.endswith("> idleTTL 1h")
    assert listed(cli) == {keep, young}
    assert not record_path(cli, old).exists()
    assert not any(cli.cdi_dir.glob(f"*{old}*"))
    assert state_of(cli, keep) == "Active"
    again = reconcile(node, pods)
    assert evicted(again) == [] and listed(cli) == {keep, young}


def test_ttl_counts_a_record_without_idle_since_from_its_last_update(
    cli: Cli, pods_file: PodsFile
) -> None:
    """A record an older hamimig wrote: no idleSince, so its age is from `updatedAt`."""
    mig = idle(cli, "ns/a", "1g.10gb")
    path = record_path(cli, mig)
    doc = json.loads(path.read_text())
    del doc["hamimig"]["idleSince"]
    doc["hamimig"]["updatedAt"] = "2020-01-01T00:00:00.000+00:00"
    path.write_text(json.dumps(doc))
    report = reconcile(policy(cli, "1h"), pods_file())
    assert evicted(report) == [mig]
    assert "counted from updatedAt" in actions(report, "evict-idle")[0]["reason"]


def test_ttl_counts_hamis_own_record_from_the_first_pass_that_saw_it(
    cli: Cli, pods_file: PodsFile
) -> None:
    inst = sim_create(cli, "1g.10gb", "2")
    path = hami_record(cli, inst)
    written = path.read_bytes()
    node, pods = policy(cli, "1h"), pods_file()
    advance(cli, "5h")  # however old the instance: nobody has seen it unheld yet
    first = reconcile(node, pods)
    assert evicted(first) == []
    seen = json.loads((cli.state_dir / "idle-seen.json").read_text())
    assert list(seen["seen"]) == [inst["migUUID"]]
    assert (cli.state_dir / "idle-seen.json").stat().st_mode & 0o777 == 0o600
    assert path.read_bytes() == written  # HAMi's record is never rewritten to start a clock
    advance(cli, "30m")
    assert evicted(reconcile(node, pods)) == []
    assert json.loads((cli.state_dir / "idle-seen.json").read_text()) == seen  # kept, not reset
    advance(cli, "31m")
    report = reconcile(node, pods)
    assert evicted(report) == [inst["migUUID"]]
    assert "counted from first seen unheld" in actions(report, "evict-idle")[0]["reason"]
    assert not path.exists()
    reconcile(node, pods)
    assert json.loads((cli.state_dir / "idle-seen.json").read_text())["seen"] == {}


def test_a_pod_holding_hamis_record_restarts_its_clock(cli: Cli, pods_file: PodsFile) -> None:
    inst = sim_create(cli, "1g.10gb", "2")
    hami_record(cli, inst)
    node = policy(cli, "1h")
    reconcile(node, pods_file())
    advance(cli, "2h")
    holding = pods_file(kube_pod("ns/user", [entry(inst)]))
    report = reconcile(node, holding)
    assert evicted(report) == []
    assert json.loads((cli.state_dir / "idle-seen.json").read_text())["seen"] == {}
    advance(cli, "2h")
    assert evicted(reconcile(node, pods_file())) == []  # released again: a fresh clock


def test_an_unreadable_idle_seen_file_restarts_the_clocks_with_a_warning(
    cli: Cli, pods_file: PodsFile
) -> None:
    inst = sim_create(cli, "1g.10gb", "2")
    hami_record(cli, inst)
    cli.state_dir.mkdir(exist_ok=True)
    (cli.state_dir / "idle-seen.json").write_text("{not json")
    (cli.state_dir / "idle-seen.json").chmod(0o600)
    advance(cli, "3h")
    report = reconcile(policy(cli, "1h"), pods_file())
    assert evicted(report) == []
    assert any(
        "clocks of HAMi's own records start again" in w["reason"] for w in report["warnings"]
    )
    assert list(json.loads((cli.state_dir / "idle-seen.json").read_text())["seen"]) == [
        inst["migUUID"]
    ]
    checks = {c["name"]: c["status"] for c in ok(cli.json("doctor"))["checks"]}
    assert checks["idle-seen"] == "ok"


# ----- reconcile's cap -----------------------------------------------------------------------


def test_the_cap_evicts_the_longest_idle_first_per_gpu(cli: Cli, pods_file: PodsFile) -> None:
    first = idle(cli, "ns/a", "1g.10gb", "0")
    advance(cli, "1m")
    second = idle(cli, "ns/b", "1g.10gb", "1")
    advance(cli, "1m")
    third = idle(cli, "ns/c", "1g.10gb", "2")
    other_gpu = idle(cli, "ns/d", "1g.10gb", "0", gpu="1")
    report = reconcile(policy(cli, cap=1), pods_file())
    assert evicted(report) == [first, second]
    assert [a["reason"] for a in actions(report, "evict-idle")] == [
        "idle policy: GPU 0 holds 3 Idle > 1",
        "idle policy: GPU 0 holds 2 Idle > 1",
    ]
    assert listed(cli) == {third, other_gpu}


def test_ties_go_to_the_older_creation_then_the_mig_uuid(cli: Cli, pods_file: PodsFile) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "0")
    b = idle(cli, "ns/b", "1g.10gb", "1")
    since = ext(cli, a)["idleSince"]
    for mig, created in (
        (a, "2026-01-02T00:00:00.000+00:00"),
        (b, "2026-01-01T00:00:00.000+00:00"),
    ):
        path = record_path(cli, mig)
        doc = json.loads(path.read_text())
        doc["hamimig"]["idleSince"] = since
        doc["hamimig"]["createdAt"] = created
        path.write_text(json.dumps(doc))
    assert evicted(reconcile(policy(cli, cap=1), pods_file(), "--dry-run")) == [b]
    for mig in (a, b):
        path = record_path(cli, mig)
        doc = json.loads(path.read_text())
        doc["hamimig"]["createdAt"] = "2026-01-01T00:00:00.000+00:00"
        path.write_text(json.dumps(doc))
    assert evicted(reconcile(policy(cli, cap=1), pods_file(), "--dry-run")) == [min(a, b)]


def test_cap_zero_keeps_no_idle_instance(cli: Cli, pods_file: PodsFile) -> None:
    migs = {idle(cli, f"ns/p{n}", "1g.10gb", str(n)) for n in range(3)}
    report = reconcile(policy(cli, cap=0), pods_file())
    assert set(evicted(report)) == migs
    assert listed(cli) == set()


def test_ttl_and_cap_together(cli: Cli, pods_file: PodsFile) -> None:
    stale = idle(cli, "ns/stale", "1g.10gb", "0")
    advance(cli, "3h")
    older = idle(cli, "ns/older", "1g.10gb", "1")
    advance(cli, "1m")
    newer = idle(cli, "ns/newer", "1g.10gb", "2")
    report = reconcile(policy(cli, "2h", 1), pods_file())
    assert evicted(report) == [stale, older]
    reasons = [a["reason"] for a in actions(report, "evict-idle")]
    assert "> idleTTL 2h" in reasons[0]
    assert reasons[1] == "idle policy: GPU 0 holds 2 Idle > 1"
    assert listed(cli) == {newer}


def test_error_instances_do_not_count_toward_the_cap(cli: Cli, pods_file: PodsFile) -> None:
    broken = idle(cli, "ns/broken", "1g.10gb", "0")
    fail_destroys(cli)
    refused(cli.json("reclaim", "--mig-uuid", broken), 4, "hardware")
    assert state_of(cli, broken) == "Error"
    kept = idle(cli, "ns/kept", "1g.10gb", "1")
    ran = policy(cli, cap=1).json("reconcile", "--pods", pods_file())
    assert ran.exit_code == 4  # the retry fails again: destroys still fail
    report = ran.json()
    assert evicted(report) == []
    assert [a["migUUID"] for a in actions(report, "retry-destroy")] == [broken]
    assert state_of(cli, broken) == "Error" and state_of(cli, kept) == "Idle"


def test_instances_released_by_the_same_pass_count_but_stay(cli: Cli, pods_file: PodsFile) -> None:
    old = idle(cli, "ns/old", "1g.10gb", "0")
    advance(cli, "1m")
    active = allocated(cli, "ns/gone", "1g.10gb", "1")
    advance(cli, "1m")
    report = reconcile(policy(cli, cap=1), pods_file())
    assert [a["migUUID"] for a in actions(report, "release-idle")] == [active]
    assert evicted(report) == [old]
    assert actions(report, "evict-idle")[0]["reason"] == "idle policy: GPU 0 holds 2 Idle > 1"
    assert listed(cli) == {active} and state_of(cli, active) == "Idle"


# ----- what the policy never touches ---------------------------------------------------------


def test_an_idle_instance_a_running_pod_names_is_kept_and_not_counted(
    cli: Cli, pods_file: PodsFile
) -> None:
    """HAMi's plugin handed an Idle instance to a pod after hamimig last wrote its record."""
    handed = idle(cli, "ns/a", "1g.10gb", "0")
    inst = next(i for i in instances(cli) if i["migUUID"] == handed)
    spare = idle(cli, "ns/b", "1g.10gb", "1")
    advance(cli, "2h")
    pods = pods_file(kube_pod("ns/user", [entry(inst)]))
    report = reconcile(policy(cli, "1h", 1), pods)
    assert evicted(report) == [spare]
    (skip,) = [a for a in actions(report, "skip") if a["migUUID"] == handed]
    assert "pod ns/user's allocation annotation names it; kept" in skip["reason"]
    assert listed(cli) == {handed}
    assert evicted(reconcile(policy(cli, cap=0), pods)) == []  # not counted, never taken


def test_a_slot_a_pending_pod_reserves_is_kept(cli: Cli, pods_file: PodsFile) -> None:
    """The scheduler planned a pod onto the Idle instance's slot; the plugin will reuse it."""
    mig = idle(cli, "ns/a", "1g.10gb", "3")
    inst = next(i for i in instances(cli) if i["migUUID"] == mig)
    planned = entry(inst, migUUID=None, gpuInstanceID=None, computeInstanceID=None)
    advance(cli, "2h")
    report = reconcile(
        policy(cli, "1h"), pods_file(kube_pod("ns/next", [planned], phase="Pending"))
    )
    assert evicted(report) == []
    assert "reserves its slot; kept" in actions(report, "skip")[0]["reason"]
    finished = pods_file(kube_pod("ns/next", [entry(inst)], phase="Succeeded"))
    assert evicted(reconcile(policy(cli, "1h"), finished)) == [mig]  # a finished pod holds nothing


def test_a_busy_idle_instance_is_kept(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/a", "1g.10gb")
    sim(cli, "busy", "--mig-uuid", mig)
    advance(cli, "2h")
    report = reconcile(policy(cli, "1h", 0), pods_file())
    assert evicted(report) == []
    assert "busy: processes run on it; kept" in actions(report, "skip")[0]["reason"]
    assert state_of(cli, mig) == "Idle"


def test_active_unmanaged_and_orphan_instances_are_never_evicted(
    cli: Cli, pods_file: PodsFile
) -> None:
    active = allocated(cli, "ns/run", "1g.10gb", "0")
    unmanaged = sim_create(cli, "1g.10gb", "1")["migUUID"]
    sim_create(cli, "1g.10gb", "2", no_ci=True)
    advance(cli, "9h")
    report = reconcile(policy(cli, "1m", 0), pods_file(kube_pod("ns/run")))
    assert evicted(report) == []
    states = {i["state"] for i in instances(cli)}
    assert states == {"Active", "Unmanaged", "OrphanGI"}
    assert {active, unmanaged} <= listed(cli)


def test_an_allocation_in_flight_on_the_slices_keeps_the_instance(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    advance(cli, "2h")
    intent = {
        "version": 1,
        "id": "inflight",
        "op": "allocate",
        "gpuUUID": next(i for i in instances(cli) if i["migUUID"] == mig)["gpuUUID"],
        "gpuIndex": 0,
        "profile": "2g.20gb",
        "profileID": 14,
        "placement": {"start": 0, "size": 2},
        "owner": {
            "namespace": "ns",
            "name": "n",
            "uid": None,
            "containerIndex": 0,
            "deviceIndex": 0,
        },
        "createdAt": "2026-01-01T00:00:00Z",
        "gpuInstanceID": None,
        "computeInstanceID": None,
        "migUUID": None,
    }
    path = cli.state_dir / "intent-inflight.json"
    path.write_text(json.dumps(intent))
    path.chmod(0o600)
    report = reconcile(policy(cli, "1h"), pods_file())
    assert evicted(report) == []
    assert "an allocation is in flight on its slices; kept" in actions(report, "skip")[0]["reason"]


def test_without_a_pod_source_the_policy_is_skipped_with_a_note(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "1g.10gb")
    advance(cli, "2h")
    node = policy(cli, "1h", 0)
    counters = str(cli.state_dir / "counters.json")  # the pass's timestamp: bookkeeping

    def files() -> dict[str, tuple[int, bytes]]:
        return {k: v for k, v in tree(cli.state_dir, cli.cdi_dir).items() if k != counters}

    before = files()
    report = ok(node.json("reconcile"))
    assert report["actions"] == []
    (note,) = report["notes"]
    assert note.startswith("idle policy (idleTTL 1h, maxIdleInstancesPerGPU 0) not applied")
    assert "pod list" in note
    assert state_of(cli, mig) == "Idle"
    assert files() == before
    table = node("reconcile")
    assert table.exit_code == 0 and "note: idle policy" in table.stdout
    assert ok(cli.json("reconcile"))["actions"] == [] and "notes" not in ok(cli.json("reconcile"))


def test_a_dry_run_shows_the_evictions_and_changes_nothing(cli: Cli, pods_file: PodsFile) -> None:
    old = idle(cli, "ns/a", "1g.10gb", "0")
    inst = sim_create(cli, "1g.10gb", "4")
    hami_record(cli, inst)
    advance(cli, "3h12m")
    node, pods = policy(cli, "1h", 0), pods_file()
    before = tree(cli.state_dir, cli.cdi_dir)
    layout = sim(cli, "show")["gpus"]
    report = reconcile(node, pods, "--dry-run")
    assert report["dryRun"] is True
    assert evicted(report) == [old, inst["migUUID"]]
    reasons = [a["reason"] for a in actions(report, "evict-idle")]
    assert reasons[0].startswith("idle policy: idle 3h12m > idleTTL 1h")
    assert reasons[1] == "idle policy: GPU 0 holds 1 Idle > 0"  # HAMi's: no age yet
    assert tree(cli.state_dir, cli.cdi_dir) == before  # no idle-seen file either
    assert sim(cli, "show")["gpus"] == layout
    table = node("reconcile", "--pods", pods, "--dry-run")
    assert "evict-idle" in table.stdout and "dry run" in table.stdout
    assert evicted(reconcile(node, pods)) == [old, inst["migUUID"]]


# ----- crashes -------------------------------------------------------------------------------


def test_a_crash_during_a_policy_eviction_is_finished_by_recover(
    cli: Cli, pods_file: PodsFile
) -> None:
    """Each eviction is an ordinary journaled reclaim: killed between the CI and the GI, the
    record says Reclaiming, and recovery finishes the destruction."""
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    keep = allocated(cli, "ns/keep", "1g.10gb", "6")
    advance(cli, "2h")
    pods = pods_file(kube_pod("ns/keep"))
    sim(cli, "fault", "add", "--op", DESTROY_CI, "--action", "crash-after")
    node = policy(cli, "1h")
    ran = run_hamimig(*node.globals(), "-o", "json", "reconcile", "--pods", pods)
    assert ran.returncode == CRASH_EXIT_STATUS and ran.stdout == ""
    assert ext(cli, mig)["state"] == "Reclaiming"
    assert state_of(cli, mig) == "Reclaiming"
    report = ok(node.json("recover", "--pods", pods))
    assert [a["action"] for a in report["actions"] if a["migUUID"] == mig] == ["finish-reclaim"]
    assert listed(cli) == {keep}
    assert not record_path(cli, mig).exists()


def test_a_crash_before_the_idle_seen_write_loses_nothing(
    cli: Cli, pods_file: PodsFile, tmp_path: Path
) -> None:
    inst = sim_create(cli, "1g.10gb", "2")
    hami_record(cli, inst)
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    advance(cli, "2h")
    sim(cli, "fault", "add", "--op", DESTROY_CI, "--action", "crash-before")
    node = policy(cli, "1h")
    pods = pods_file()
    ran = run_hamimig(*node.globals(), "-o", "json", "reconcile", "--pods", pods)
    assert ran.returncode == CRASH_EXIT_STATUS
    # The first sighting was saved before the eviction started; the record says Reclaiming.
    assert list(json.loads((cli.state_dir / "idle-seen.json").read_text())["seen"]) == [
        inst["migUUID"]
    ]
    assert ext(cli, mig)["state"] == "Reclaiming"
    report = reconcile(node, pods)
    assert [a["migUUID"] for a in actions(report, "retry-destroy")] == [mig]
    assert listed(cli) == {inst["migUUID"]}


# ----- reclaim --idle-older-than -------------------------------------------------------------


def test_reclaim_idle_older_than_takes_only_the_older_idle_instances(cli: Cli) -> None:
    old = idle(cli, "ns/old", "1g.10gb", "0")
    advance(cli, "2h")
    young = idle(cli, "ns/young", "1g.10gb", "1")
    active = allocated(cli, "ns/run", "1g.10gb", "2")
    elsewhere = idle(cli, "ns/other", "1g.10gb", "0", gpu="1")
    advance(cli, "10m")
    inst = sim_create(cli, "1g.10gb", "4")
    hami_record(cli, inst)  # never seen by a policy pass: no age, never "older"
    dry = ok(cli.json("reclaim", "--gpu", "0", "--idle-older-than", "1h", "--dry-run"))
    assert [i["migUUID"] for i in dry["reclaimed"]] == [old]
    assert dry["notes"] == [
        "1 Idle instance(s) on this GPU have no idle age yet (records HAMi wrote get one at the "
        "first 'hamimig reconcile' with pods that sees them unheld); kept"
    ]
    assert old in listed(cli)
    done = ok(cli.json("reclaim", "--gpu", "0", "--idle-older-than", "5m"))
    assert [i["migUUID"] for i in done["reclaimed"]] == [old, young]
    assert listed(cli) == {active, elsewhere, inst["migUUID"]}
    assert ok(cli.json("reclaim", "--gpu", "0", "--idle-older-than", "1s"))["reclaimed"] == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "0", "--idle-older-than", "1h", "--all-idle"], "exactly one of"),
        (["--gpu", "0", "--idle-older-than", "1h", "--placement", "0"], "exactly one of"),
        (["--gpu", "0", "--idle-older-than", "an hour"], "--idle-older-than: 'an hour' is not"),
        (["--gpu", "0", "--idle-older-than", ""], "--idle-older-than: '' is not"),
        (["--mig-uuid", "MIG-x", "--idle-older-than", "1h"], "drop --placement/--all-idle"),
        (["--idle-older-than", "1h"], "--idle-older-than DURATION"),
    ],
)
def test_reclaim_idle_older_than_usage_errors(cli: Cli, args: list[str], needle: str) -> None:
    idle(cli, "ns/a", "1g.10gb")
    before = tree(cli.state_dir, cli.cdi_dir)
    assert needle in refused(cli.json("reclaim", *args), 2, "usage")
    assert tree(cli.state_dir, cli.cdi_dir) == before


# ----- the pod list must be current ----------------------------------------------------------


def test_a_record_changed_after_the_pod_list_is_kept(cli: Cli, pods_file: PodsFile) -> None:
    """HAMi's plugin hands an Idle instance out without writing its record, so only a pod list
    taken after the record's last change can show who holds it."""
    pods = pods_file()
    past = time.time() - 60
    os.utime(pods, (past, past))
    mig = idle(cli, "ns/a", "1g.10gb")
    report = reconcile(policy(cli, cap=0), pods)
    assert evicted(report) == []  # kept, so not counted toward the cap: no line for it
    assert state_of(cli, mig) == "Idle"
    path = record_path(cli, mig)
    doc = json.loads(path.read_text())
    doc["hamimig"]["idleSince"] = "2020-01-01T00:00:00.000+00:00"
    path.write_text(json.dumps(doc))
    report = reconcile(policy(cli, "1h"), pods)
    assert evicted(report) == []
    (skip,) = actions(report, "skip")
    assert "> idleTTL 1h, but changed after the pod snapshot" in skip["reason"]
    assert evicted(reconcile(policy(cli, cap=0), pods_file())) == [mig]


def test_a_stale_pod_list_skips_the_policy_with_a_note(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/a", "1g.10gb")
    advance(cli, "2h")
    pods = pods_file()
    past = time.time() - 600
    os.utime(pods, (past, past))
    report = reconcile(policy(cli, "1h", 0), pods)
    assert evicted(report) == []
    (note,) = report["notes"]
    assert "not applied: the pod list from" in note and "was taken 10m" in note
    assert state_of(cli, mig) == "Idle"


def test_a_release_whose_slot_a_pod_reserves_does_not_count(cli: Cli, pods_file: PodsFile) -> None:
    cached = idle(cli, "ns/a", "1g.10gb", "0")
    advance(cli, "1m")
    gone = allocated(cli, "ns/b", "1g.10gb", "1")
    inst = next(i for i in instances(cli) if i["migUUID"] == gone)
    planned = entry(inst, migUUID=None, gpuInstanceID=None, computeInstanceID=None)
    advance(cli, "1m")
    report = reconcile(
        policy(cli, cap=1), pods_file(kube_pod("ns/next", [planned], phase="Pending"))
    )
    assert [a["migUUID"] for a in actions(report, "release-idle")] == [gone]
    assert evicted(report) == []
    assert listed(cli) == {cached, gone}


def test_an_idle_record_whose_gpu_is_gone_is_left_to_recover(cli: Cli, pods_file: PodsFile) -> None:
    mig = idle(cli, "ns/a", "1g.10gb")
    path = record_path(cli, mig)
    doc = json.loads(path.read_text())
    doc["parentGPUUUID"] = "GPU-00000000-0000-0000-0000-000000000000"
    path.write_text(json.dumps(doc))
    advance(cli, "2h")
    # Its instance is still live (on GPU 0): the record disagrees with the hardware, so the
    # pass stops there (exit 5) rather than act on it; the policy destroys nothing.
    ran = policy(cli, "1h", 0).json("reconcile", "--pods", pods_file())
    assert "which is not on this node, but the instance is live" in refused(ran, 5, "unverifiable")
    shown = [i["state"] for i in ok(cli.json("list"))["instances"] if i["migUUID"] == mig]
    assert sorted(shown) == ["Missing", "Unmanaged"]  # the record, and the live pair, kept


def test_the_environment_cap_reads_the_whole_number(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAMIMIG_MAX_IDLE_INSTANCES_PER_GPU", "0000001")
    doc = ok(cli.json("config", "show"))
    values = {s["key"]: s["value"] for s in doc["settings"]}
    assert values["devices.nvidia.maxIdleInstancesPerGPU"] == 1
