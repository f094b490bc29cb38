"""One result shape: allocate, release, reclaim and forget report the instances they acted on
with their last `state` and an `outcome`; recover, adopt and reconcile say per action whether
it changed anything and end with a summary; every JSON key that was there before stays."""

from __future__ import annotations

import re
from typing import Any

from tests.support.cli import (
    ADOPT_CONFIG,
    Cli,
    allocate,
    allocate_args,
    allocated,
    configured,
    fail_destroys,
    fault,
    idle,
    ok,
    owners_running,
    sim,
    sim_create,
)

INSTANCE_KEYS = {
    "migUUID",
    "gpuUUID",
    "gpuIndex",
    "profile",
    "placement",
    "gpuInstanceID",
    "computeInstanceID",
    "computeInstanceCount",
    "lastOwner",
    "state",
    "owner",
    "cdiDevice",
    "error",
    "processes",
    "processCount",
    "createdAt",
    "updatedAt",
    "idleSince",
}
"""The Instance object's keys before `outcome` was added (with `processCount`, which came with
the count of processes in `-o wide`)."""


def _outcomes(instances: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(i["migUUID"], i["state"], i["outcome"]) for i in instances]


def _row(stdout: str, mig: str) -> list[str]:
    """The cells of the table row whose MIG UUID is `mig` (its first line)."""
    rows = [
        [cell.strip() for cell in line.strip("│ ").split("│")]
        for line in stdout.splitlines()
        if line.startswith("│")
    ]
    [row] = [cells for cells in rows if mig in cells]
    return row


def _header(stdout: str) -> list[str]:
    [line] = [line for line in stdout.splitlines() if "MIG UUID" in line or "ACTION" in line]
    return [cell.strip() for cell in line.strip("┃ ").split("┃")]


def _cell(stdout: str, mig: str, column: str) -> str:
    return _row(stdout, mig)[_header(stdout).index(column)]


def _summary(stdout: str) -> tuple[set[str], str]:
    """The action table's last line: its counts, and what it says changed."""
    last = stdout.splitlines()[-1]
    assert last.startswith("summary: "), stdout
    counts, tail = last.removeprefix("summary: ").split("; ", 1)
    return set(counts.split(", ")), tail


# ---------------------------------------------------------------------------------------------
# allocate, release, reclaim, forget: the outcome of each instance


def test_allocate_reports_created_then_unchanged_then_reused(cli: Cli) -> None:
    first = allocate(cli, "ns/a", "1g.10gb", "0")
    mig = first["instance"]["migUUID"]
    assert (first["instance"]["state"], first["instance"]["outcome"]) == ("Active", "created")
    again = allocate(cli, "ns/a", "1g.10gb", "0")
    assert (again["instance"]["outcome"], again["created"], again["reused"]) == (
        "unchanged",
        False,
        False,
    )
    ok(cli.json("release", "--mig-uuid", mig))
    reused = allocate(cli, "ns/b", "1g.10gb", "0")
    assert (reused["instance"]["migUUID"], reused["instance"]["outcome"]) == (mig, "reused")
    assert reused["reused"] is True


def test_release_reports_released_and_an_idle_one_unchanged(cli: Cli) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    released = ok(cli.json("release", "--pod", "ns/a"))["released"]
    assert _outcomes(released) == [(mig, "Idle", "released")]
    again = ok(cli.json("release", "--mig-uuid", mig))["released"]
    assert _outcomes(again) == [(mig, "Idle", "unchanged")]
    table = cli("release", "--mig-uuid", mig).stdout
    assert table.splitlines()[0] == "already released (Idle): nothing changed"
    assert _cell(table, mig, "OUTCOME") == "unchanged"


def test_reclaim_reports_the_last_state_and_reclaimed(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    reclaimed = ok(cli.json("reclaim", "--mig-uuid", mig))["reclaimed"]
    assert _outcomes(reclaimed) == [(mig, "Idle", "reclaimed")]


def test_a_reclaimed_table_no_longer_reads_as_a_live_idle_instance(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    ran = cli("reclaim", "--gpu", "0", "--all-idle")
    assert ran.exit_code == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "reclaimed (destroyed: no longer on the node)"
    assert "OUTCOME" in _header(ran.stdout)
    assert _cell(ran.stdout, mig, "OUTCOME") == "reclaimed"
    assert _cell(ran.stdout, mig, "STATE") == "Idle"  # the last state it had
    assert mig not in cli("list").stdout


def test_forget_reports_the_instance_forgotten_beside_its_files(cli: Cli) -> None:
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    data = ok(cli.json("forget", mig))
    assert data["forgotten"][0]["migUUID"] == mig  # the existing shape, unchanged
    assert _outcomes(data["instances"]) == [(mig, "Idle", "forgotten")]
    assert set(data["instances"][0]) == INSTANCE_KEYS | {"outcome"}


def test_the_four_commands_print_one_instance_table_with_an_outcome(cli: Cli) -> None:
    ran = cli(*allocate_args("ns/a", "1g.10gb", "0"))
    assert ran.exit_code == 0, ran.stderr
    mig = ran.stdout.split()[1]
    assert ran.stdout.startswith(f"created: {mig} ")  # the sentence stays
    assert _cell(ran.stdout, mig, "OUTCOME") == "created"
    released = cli("release", "--pod", "ns/a").stdout
    assert _cell(released, mig, "OUTCOME") == "released"
    forgotten = cli("forget", mig).stdout
    assert _cell(forgotten, mig, "OUTCOME") == "forgotten"
    headers = {tuple(_header(out)) for out in (ran.stdout, released, forgotten)}
    assert len(headers) == 1, headers  # the same columns


# ---------------------------------------------------------------------------------------------
# Dry runs: the outcome each would have, and the title says so


def test_dry_runs_report_the_outcome_they_would_have(cli: Cli) -> None:
    create = ok(cli.json(*allocate_args("ns/a", "1g.10gb", "0"), "--dry-run"))
    assert (create["dryRun"], create["instance"]["outcome"]) == (True, "created")
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    release = ok(cli.json("release", "--pod", "ns/a", "--dry-run"))
    assert _outcomes(release["released"]) == [(mig, "Idle", "released")]
    ok(cli.json("release", "--pod", "ns/a"))
    reuse = ok(cli.json(*allocate_args("ns/b", "1g.10gb", "0"), "--dry-run"))
    assert (reuse["instance"]["migUUID"], reuse["instance"]["outcome"]) == (mig, "reused")
    reclaim = ok(cli.json("reclaim", "--gpu", "0", "--all-idle", "--dry-run"))
    assert _outcomes(reclaim["reclaimed"]) == [(mig, "Idle", "reclaimed")]
    forget = ok(cli.json("forget", mig, "--dry-run"))
    assert _outcomes(forget["instances"]) == [(mig, "Idle", "forgotten")]
    # Nothing happened: the instance is still there, Idle.
    assert ok(cli.json("show", mig))["state"] == "Idle"


def test_dry_run_tables_say_dry_run_and_the_outcome(cli: Cli) -> None:
    """The table's OUTCOME says what would happen; the JSON keeps the documented values."""
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    reclaim = cli("reclaim", "--gpu", "0", "--all-idle", "--dry-run").stdout
    assert reclaim.splitlines()[0] == "would reclaim (dry run: nothing changed)"
    assert _cell(reclaim, mig, "OUTCOME") == "would reclaim"
    forget = cli("forget", mig, "--dry-run").stdout
    assert forget.splitlines()[0] == "would forget (dry run: nothing changed)"
    assert _cell(forget, mig, "OUTCOME") == "would forget"
    reuse = cli(*allocate_args("ns/b", "1g.10gb", "0"), "--dry-run").stdout
    assert "(dry run: nothing changed)" in reuse.splitlines()[0]
    assert _cell(reuse, mig, "OUTCOME") == "would reuse"
    active = allocated(cli, "ns/c", "1g.10gb", "1")
    release = cli("release", "--pod", "ns/c", "--dry-run").stdout
    assert _cell(release, active, "OUTCOME") == "would release"
    create = cli(*allocate_args("ns/d", "1g.10gb", "2"), "--dry-run").stdout
    [row] = [line for line in create.splitlines() if line.startswith("│")]
    assert "would create" in row
    # Nothing was done, and a real run's table still says what it did.
    assert _cell(cli("release", "--pod", "ns/c").stdout, active, "OUTCOME") == "released"


# ---------------------------------------------------------------------------------------------
# recover, adopt, reconcile: what changed, and a summary


def test_recover_twice_the_second_says_nothing_to_change(cli: Cli) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")  # Active, and no pod holds it
    first = ok(cli.json("--node", "n", "recover", "--assume-no-pods"))
    assert [(a["action"], a["migUUID"], a["changed"]) for a in first["actions"]] == [
        ("restore-idle", mig, True)
    ]
    assert first["summary"] == {
        "changed": 1,
        "unchanged": 0,
        "failed": 0,
        "filesChanged": 1,  # the record
        "byAction": {"restore-idle": 1},
    }
    second = ok(cli.json("--node", "n", "recover", "--assume-no-pods"))
    assert [a["changed"] for a in second["actions"]] == [False]
    assert second["summary"]["changed"] == 0
    assert second["summary"]["filesChanged"] == 0
    table = cli("--node", "n", "recover", "--assume-no-pods").stdout
    assert _cell(table, mig, "CHANGED") == "no"
    assert table.splitlines()[-1] == (
        "summary: 1 verified; nothing to change (0 changed, 0 files changed)"
    )


def test_recover_table_says_per_row_what_changed(cli: Cli) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    kept = idle(cli, "ns/b", "1g.10gb", "1")
    unmanaged = sim_create(cli, "1g.10gb", "5")["migUUID"]
    dry = cli("--node", "n", "recover", "--assume-no-pods", "--dry-run").stdout
    assert dry.splitlines()[0] == "recovery (dry run: nothing changed)"
    assert _cell(dry, mig, "CHANGED") == "would"
    assert _cell(dry, kept, "CHANGED") == "no"
    # The counts come in the order the actions do (records by MIG UUID: random here).
    assert _summary(dry) == (
        {"1 restore-idle", "1 verified", "1 preserve-unmanaged"},
        "1 would change (dry run: nothing changed)",
    )
    ran = cli("--node", "n", "recover", "--assume-no-pods").stdout
    assert _cell(ran, mig, "CHANGED") == "yes"
    assert _cell(ran, kept, "CHANGED") == "no"
    assert _cell(ran, unmanaged, "CHANGED") == "no"
    assert _summary(ran) == (
        {"1 restored Idle", "1 verified", "1 preserve-unmanaged"},
        "1 changed, 1 file changed",
    )


def test_adopt_says_what_it_claimed_then_nothing_to_change(cli: Cli) -> None:
    node = configured(cli, ADOPT_CONFIG)
    pair = sim_create(node, "1g.10gb", "3")["migUUID"]
    first = ok(node.json("adopt", "--assume-no-pods"))
    assert [(a["action"], a["migUUID"], a["changed"]) for a in first["actions"]] == [
        ("adopt-idle", pair, True)
    ]
    assert first["summary"]["changed"] == 1
    assert first["summary"]["filesChanged"] == 2  # its record and its CDI spec
    second = node("adopt", "--assume-no-pods")
    assert second.exit_code == 0, second.stderr
    assert second.stdout.splitlines()[0] == "adoption: nothing to change"
    assert ok(node.json("adopt", "--assume-no-pods"))["summary"]["changed"] == 0


def test_reconcile_shares_the_action_table(cli: Cli) -> None:
    data = ok(cli.json("reconcile"))
    assert data["summary"] == {
        "changed": 0,
        "unchanged": 0,
        "failed": 0,
        "filesChanged": 0,
        "byAction": {},
    }
    assert cli("reconcile").stdout.splitlines() == ["reconcile: nothing to change"]


# ---------------------------------------------------------------------------------------------
# Each action's result; a failed one is data (`result`, `error`), never counted as changed


def _by_mig(report: dict[str, Any]) -> dict[str, tuple[str, str, bool, Any]]:
    return {
        a["migUUID"]: (a["action"], a["result"], a["changed"], a["error"])
        for a in report["actions"]
    }


def test_a_failed_retry_destroy_is_failed_not_a_change(cli: Cli) -> None:
    restored = allocated(cli, "ns/a", "1g.10gb", "0")  # Active, no pod holds it: restore-idle
    kept = idle(cli, "ns/b", "1g.10gb", "1")  # already as its record says: verified
    unmanaged = sim_create(cli, "1g.10gb", "5")["migUUID"]
    err = idle(cli, "ns/c", "1g.10gb", "2")
    fail_destroys(cli)  # IN_USE on every CI destroy
    assert cli.json("reclaim", "--mig-uuid", err).exit_code == 4  # left in Error

    # A dry run cannot know the destroy will fail: it says what each would be.
    dry = ok(cli.json("--node", "n", "recover", "--assume-no-pods", "--dry-run"))
    assert _by_mig(dry) == {
        restored: ("restore-idle", "done", True, None),
        kept: ("restore-idle", "unchanged", False, None),
        unmanaged: ("preserve-unmanaged", "unchanged", False, None),
        err: ("retry-destroy", "done", True, None),
    }
    assert dry["summary"]["changed"] == 2
    assert (dry["summary"]["unchanged"], dry["summary"]["failed"]) == (2, 0)

    # Recovery's policy: a failed destroy that left the instance in Error exits 0.
    data = ok(cli.json("--node", "n", "recover", "--assume-no-pods"))
    assert "error" not in data  # no failure that makes the exit code
    failed = [a for a in data["actions"] if a["migUUID"] == err]
    assert [(a["action"], a["result"]) for a in failed] == [("retry-destroy", "failed")]
    error = failed[0]["error"]
    assert set(error) == {"code", "message"}
    assert error["code"] == "hardware"
    assert "IN_USE" in error["message"] and err in error["message"]
    assert failed[0]["changed"] is True  # its record was written (Reclaiming, then Error)
    assert {m: v[:3] for m, v in _by_mig(data).items()} == {
        restored: ("restore-idle", "done", True),
        kept: ("restore-idle", "unchanged", False),
        unmanaged: ("preserve-unmanaged", "unchanged", False),
        err: ("retry-destroy", "failed", True),
    }
    assert all(a["error"] is None for a in data["actions"] if a["migUUID"] != err)
    summary = data["summary"]
    assert (summary["changed"], summary["unchanged"], summary["failed"]) == (1, 2, 1)
    assert summary["byAction"] == {"restore-idle": 2, "preserve-unmanaged": 1, "retry-destroy": 1}

    table = cli("--node", "n", "recover", "--assume-no-pods")  # the destroy fails again
    assert table.exit_code == 0, table.stderr
    assert _cell(table.stdout, err, "CHANGED") == "failed"
    assert _cell(table.stdout, restored, "CHANGED") == "no"  # verified now
    assert _summary(table.stdout) == (
        {"2 verified", "1 preserve-unmanaged", "1 retry-destroy failed"},
        "0 changed, 1 failed, 1 file changed",
    )


def test_reconcile_reports_skipped_and_failed_and_exits_4(cli: Cli) -> None:
    err = idle(cli, "ns/old", "1g.10gb", "2")
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", err).exit_code == 4
    # Without a pod list an Error instance that is still complete is left alone on purpose.
    skipped = ok(cli.json("reconcile"))
    assert _by_mig(skipped) == {err: ("skip", "skipped", False, None)}
    assert skipped["summary"]["failed"] == 0
    assert _summary(cli("reconcile").stdout)[1] == "nothing to change (0 changed, 0 files changed)"

    pods = owners_running(cli)
    dry = ok(cli.json("reconcile", "--pods", pods, "--dry-run"))
    assert _by_mig(dry) == {err: ("retry-destroy", "done", True, None)}
    # reconcile's policy: every failed step exits 4, and the report's error says why.
    ran = cli.json("reconcile", "--pods", pods)
    assert ran.exit_code == 4, ran.stdout
    data = ran.json()
    [action] = data["actions"]
    assert (action["result"], action["error"]["code"]) == ("failed", "hardware")
    assert action["error"]["message"] in data["error"]["message"]
    assert (data["summary"]["changed"], data["summary"]["failed"]) == (0, 1)
    table = cli("reconcile", "--pods", owners_running(cli))  # newer than the Error record
    assert table.exit_code == 4
    assert _cell(table.stdout, err, "CHANGED") == "failed"


def test_a_queued_cdi_removal_that_fails_again_is_failed(cli: Cli) -> None:
    a = idle(cli, "ns/old", "1g.10gb", "1")
    fault(cli, "cdi.remove", "EIO")
    ok(cli.json("reclaim", "--mig-uuid", a))  # the spec's removal is queued
    fault(cli, "cdi.remove", "EACCES")
    dry = ok(cli.json("reconcile", "--dry-run"))
    assert _by_mig(dry) == {a: ("retry-cdi-removal", "done", True, None)}
    ran = cli.json("reconcile")
    assert ran.exit_code == 4
    [action] = ran.json()["actions"]
    assert (action["action"], action["result"]) == ("retry-cdi-removal", "failed")
    assert action["error"]["code"] == "hardware"
    assert "still cannot be removed" in action["error"]["message"]
    assert ran.json()["summary"]["changed"] == 0
    assert ran.json()["summary"]["failed"] == 1
    # The retry that works is done.
    done = ok(cli.json("reconcile"))
    assert _by_mig(done) == {a: ("retry-cdi-removal", "done", True, None)}
    assert (done["summary"]["changed"], done["summary"]["failed"]) == (1, 0)


def test_a_failed_step_is_never_counted_verified(cli: Cli) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    sim(cli, "fault", "add", "--op", "record.write", "--error", "EIO", "--times", "1000")
    ran = cli.json("--node", "n", "recover", "--assume-no-pods")
    assert ran.exit_code == 4  # nothing tracked was left: recovery failed
    data = ran.json()
    assert _by_mig(data)[mig][:3] == ("restore-idle", "failed", False)  # nothing written
    assert data["summary"]["failed"] == 1
    table = cli("--node", "n", "recover", "--assume-no-pods").stdout
    assert _cell(table, mig, "CHANGED") == "failed"
    assert table.splitlines()[-2].startswith("summary: 1 restore-idle failed; ")


# ---------------------------------------------------------------------------------------------
# JSON: additive only


def test_every_result_keeps_its_keys_and_only_gains_the_new_ones(cli: Cli) -> None:
    node = configured(cli, ADOPT_CONFIG)
    alloc = ok(node.json(*allocate_args("ns/a", "1g.10gb", "0")))
    mig = alloc["instance"]["migUUID"]
    assert set(alloc) == {"kind", "dryRun", "instance", "created", "reused", "reclaimed"}
    assert set(alloc["instance"]) - INSTANCE_KEYS == {"outcome"}
    assert set(alloc["instance"]) >= INSTANCE_KEYS

    release = ok(node.json("release", "--pod", "ns/a"))
    assert set(release) == {"kind", "dryRun", "released"}
    assert set(release["released"][0]) == INSTANCE_KEYS | {"outcome"}

    other = idle(node, "ns/b", "1g.10gb", "1")
    reclaim = ok(node.json("reclaim", "--mig-uuid", other))
    assert set(reclaim) == {"kind", "dryRun", "reclaimed", "skipped"}
    assert set(reclaim["reclaimed"][0]) == INSTANCE_KEYS | {"outcome"}

    forget = ok(node.json("forget", mig))
    assert set(forget) - {"instances"} == {"kind", "dryRun", "forgotten"}
    assert set(forget["forgotten"][0]) == {"migUUID", "state", "record", "cdiSpec", "unreadable"}

    sim_create(node, "1g.10gb", "5")
    for args in (
        ("--node", "n", "recover", "--assume-no-pods"),
        ("adopt", "--assume-no-pods"),
        ("reconcile",),
    ):
        report = ok(node.json(*args))
        assert set(report) - {"summary"} <= {"kind", "dryRun", "actions", "notes", "skippedGPUs"}
        assert {"kind", "dryRun", "actions", "summary"} <= set(report)
        for action in report["actions"]:
            old = {"action", "migUUID", "gpuUUID", "placement", "reason"}
            assert set(action) == old | {"changed", "result", "error"}
        assert set(report["summary"]) == {
            "changed",
            "unchanged",
            "failed",
            "filesChanged",
            "byAction",
        }

    # `list` and `show` look, and act on nothing: their Instance objects have no outcome.
    listed = ok(node.json("list"))["instances"]
    assert listed and all(set(i) == INSTANCE_KEYS for i in listed)


# ---------------------------------------------------------------------------------------------
# show


def test_show_table_has_the_pod_uid_times_and_processes(cli: Cli) -> None:
    uid = "0f0e0d0c-1111-2222-3333-444455556666"
    args = [*allocate_args("ns/a", "1g.10gb", "0"), "--pod-uid", uid]
    mig = ok(cli.json(*args))["instance"]["migUUID"]
    data = ok(cli.json("show", mig))
    rows = dict(
        re.split(r"\s{2,}", line.strip(), maxsplit=1)
        for line in cli("show", mig).stdout.splitlines()
        if line.strip()
    )
    assert rows["pod UID"] == uid
    assert rows["created"] == data["createdAt"]
    assert rows["updated"] == data["updatedAt"]
    assert rows["idle since"] == "-"
    assert rows["processes"] == "none"
    ok(cli.json("release", "--mig-uuid", mig))
    shown = cli("show", mig).stdout
    idle_since = ok(cli.json("show", mig))["idleSince"]
    assert idle_since and f"idle since  {idle_since}" in shown


def test_a_reclaim_of_several_reports_each_one_and_goes_on_past_a_failure(cli: Cli) -> None:
    """`reclaim --all-idle` destroying one instance and failing on the next once printed only
    an error (exit 4): the destroyed one was unreported, and those after the failure were never
    tried. Each instance now says what happened to it; the command still exits 4."""
    migs = [idle(cli, f"ns/p{n}", "1g.10gb", str(n)) for n in range(3)]
    sim(cli, "fault", "add", "--op", "nvmlGpuInstanceDestroy", "--error", "IN_USE", "--skip", "1")
    ran = cli.json("reclaim", "--gpu", "0", "--all-idle", "--assume-no-pods")
    assert ran.exit_code == 4, ran.stderr
    data = ran.json()
    assert data["kind"] == "Reclaim"
    shown = {i["migUUID"]: i for i in data["reclaimed"]}
    assert sorted(shown) == sorted(migs)
    outcomes = sorted(i["outcome"] for i in shown.values())
    assert outcomes == ["failed", "reclaimed", "reclaimed"]
    [failed] = [i for i in shown.values() if i["outcome"] == "failed"]
    assert failed["state"] == "Error" and "IN_USE" in failed["error"]
    states = {i["migUUID"]: i["state"] for i in ok(cli.json("list"))["instances"]}
    assert states == {failed["migUUID"]: "Error"}  # the other two are gone, as reported
    table = cli("reclaim", "--gpu", "0", "--all-idle", "--assume-no-pods")
    assert table.exit_code == 0  # the Error one is destroyed now that the fault is spent


def test_a_release_of_several_reports_each_one_and_goes_on_past_a_failure(cli: Cli) -> None:
    first = allocated(cli, "ns/two", "1g.10gb", "0")
    second = allocate(cli, "ns/two", "1g.10gb", "1", "0", "--device-index", "1")
    second_mig = second["instance"]["migUUID"]
    sim(cli, "fault", "add", "--op", "record.write", "--error", "EIO", "--skip", "1")
    ran = cli.json("release", "--pod", "ns/two")
    assert ran.exit_code == 4, ran.stderr
    shown = {i["migUUID"]: i for i in ran.json()["released"]}
    assert sorted(shown) == sorted([first, second_mig])
    assert sorted(i["outcome"] for i in shown.values()) == ["failed", "released"]
    [failed] = [i for i in shown.values() if i["outcome"] == "failed"]
    assert failed["state"] == "Active" and "Input/output error" in failed["error"]
    table = cli("release", "--pod", "ns/two")
    assert table.exit_code == 0 and "released" in table.stdout
