"""The event journal (`events.jsonl`) and `hamimig events`, through the CLI on the simulated node.

Every lifecycle change is one JSON line written by the executor; these tests walk a lifecycle
(allocate, release, reuse, reclaim, Error, reconcile, recover, adopt, forget) and check each
event's keys and values, then the journal's own promises: nothing logged for what changed
nothing, a failed append never fails the step, a crash at the append leaves the node as the step
left it, a torn last line costs only itself, rotation keeps one older file, and the reader skips
and reports what is not an event.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from hamimig.durations import parse_time
from hamimig.sim.state import CRASH_EXIT_STATUS
from hamimig.store.cdi import device_name
from hamimig.store.counters import EVENTS_WRITE_FAILURES, Counters
from hamimig.store.events import EVENTS_NAME, ROTATED_NAME
from tests.support.cli import (
    ADOPT_CONFIG,
    Cli,
    alloc,
    allocated,
    configured,
    fault,
    idle,
    ok,
    refused,
    run_hamimig,
    sim,
    sim_create,
    state_of,
)
from tests.support.files import tree
from tests.support.node import gpus

KEYS = {
    "time",
    "action",
    "outcome",
    "migUUID",
    "gpuUUID",
    "gpuIndex",
    "profile",
    "placement",
    "pod",
    "state",
    "cdi",
    "command",
    "pid",
    "reason",
}


def journal(cli: Cli) -> list[dict[str, Any]]:
    """The events as the file holds them, every line a JSON object."""
    path = cli.state_dir / EVENTS_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def listed(cli: Cli, *args: str) -> list[dict[str, Any]]:
    data = ok(cli.json("events", *args))
    assert data["kind"] == "EventList"
    events: list[dict[str, Any]] = data["events"]
    return events


def actions(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["action"], e["outcome"]) for e in events]


def test_a_lifecycle_is_told_step_by_step(cli: Cli) -> None:
    gpu0 = gpus(cli)[0]["uuid"]
    a = allocated(cli, "ns/a", "3g.40gb", "0")
    ok(cli.json("release", "--pod", "ns/a"))
    assert allocated(cli, "ns/b", "3g.40gb", "0") == a  # exact reuse
    ok(cli.json("release", "--pod", "ns/b"))
    c = allocated(cli, "ns/c", "4g.40gb", "0")  # placement pressure reclaims a

    events = journal(cli)
    assert actions(events) == [
        ("create", "done"),
        ("release", "done"),
        ("reuse", "done"),
        ("release", "done"),
        ("reclaim", "done"),
        ("create", "done"),
    ]
    for event in events:
        assert set(event) == KEYS, event
        assert event["pid"] > 0
        assert event["gpuUUID"] == gpu0 and event["gpuIndex"] == 0
        assert parse_time(event["time"]) is not None and event["time"].endswith("+00:00")
    create, release, reuse, _, reclaim, create_c = events
    assert create | {"time": None, "pid": None} == {
        "time": None,
        "action": "create",
        "outcome": "done",
        "migUUID": a,
        "gpuUUID": gpu0,
        "gpuIndex": 0,
        "profile": "3g.40gb",
        "placement": {"start": 0, "size": 4},
        "pod": "ns/a",
        "state": "Active",
        "cdi": "written",
        "command": "allocate",
        "pid": None,
        "reason": "requested placement",
    }
    assert (release["command"], release["state"], release["pod"]) == ("release", "Idle", "ns/a")
    assert (reuse["pod"], reuse["state"], reuse["migUUID"]) == ("ns/b", "Active", a)
    # The reclaim names the request that forced it, and the instance went with its spec.
    assert reclaim["migUUID"] == a and reclaim["state"] is None and reclaim["cdi"] == "removed"
    assert reclaim["pod"] is None and reclaim["command"] == "allocate"
    assert reclaim["reason"] == "blocks 0:4 for 4g.40gb requested by ns/c"
    assert create_c["migUUID"] == c and create_c["pod"] == "ns/c"
    # Times never go backwards, and `events` shows the same, oldest first.
    times = [parse_time(e["time"]) or 0.0 for e in events]
    assert times == sorted(times)
    assert listed(cli) == events


def test_a_failed_destroy_moves_to_error_and_reconcile_retries_it(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "2")
    fault(cli, "nvmlGpuInstanceDestroy", "UNKNOWN")
    assert cli.json("reclaim", "--mig-uuid", a).exit_code == 4
    failed = journal(cli)[-1]
    assert (failed["action"], failed["outcome"], failed["state"]) == ("reclaim", "failed", "Error")
    assert failed["command"] == "reclaim"
    assert "nvmlGpuInstanceDestroy" in failed["error"] and "UNKNOWN" in failed["error"]
    assert set(failed) == KEYS | {"error"}

    ok(cli.json("reconcile"))
    retried = journal(cli)[-1]
    assert (retried["action"], retried["outcome"], retried["command"]) == (
        "retry-destroy",
        "done",
        "reconcile",
    )
    assert (retried["migUUID"], retried["state"], retried["cdi"]) == (a, None, "removed")
    count = len(journal(cli))
    ok(cli.json("reconcile"))  # nothing left to do: nothing logged
    assert len(journal(cli)) == count


def test_a_failed_allocation_is_logged_with_nvml_error(cli: Cli) -> None:
    fault(cli, "nvmlGpuInstanceCreateComputeInstance", "UNKNOWN")
    assert alloc(cli, "ns/a", "1g.10gb", "0").exit_code == 4
    [event] = journal(cli)
    assert (event["action"], event["outcome"], event["pod"]) == ("create", "failed", "ns/a")
    assert event["migUUID"] is None and event["state"] is None
    assert "rolled back" in event["error"] and "UNKNOWN" in event["error"]
    assert event["placement"] == {"start": 0, "size": 1}


def test_recover_logs_what_it_changed_and_an_idempotent_run_nothing(cli: Cli) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    before = len(journal(cli))
    ok(cli.json("recover", "--assume-no-pods"))
    restored = journal(cli)[before:]
    assert actions(restored) == [("restore-idle", "done")]
    assert restored[0]["migUUID"] == a and restored[0]["state"] == "Idle"
    assert restored[0]["command"] == "recover"
    ok(cli.json("recover", "--assume-no-pods"))
    assert len(journal(cli)) == before + 1
    # Dry runs log nothing either.
    ok(cli.json("reclaim", "--mig-uuid", a, "--dry-run"))
    ok(cli.json("allocate", "--pod", "ns/x", "--gpu", "0", "--profile", "1g.10gb", "--dry-run"))
    assert len(journal(cli)) == before + 1


def test_adoption_and_forget_are_logged(cli: Cli) -> None:
    theirs = sim_create(cli, "1g.10gb", "3")["migUUID"]
    adopting = configured(cli, ADOPT_CONFIG)
    ok(adopting.json("adopt", "--assume-no-pods"))
    [adopted] = journal(cli)
    assert (adopted["action"], adopted["migUUID"], adopted["state"]) == (
        "adopt-idle",
        theirs,
        "Idle",
    )
    assert adopted["cdi"] == "written" and adopted["command"] == "adopt"
    ok(cli.json("forget", theirs))
    forgot = journal(cli)[-1]
    assert (forgot["action"], forgot["migUUID"], forgot["cdi"]) == (
        "forget-record",
        theirs,
        "removed",
    )
    assert state_of(cli, theirs) == "Unmanaged"


def test_a_queued_cdi_removal_and_its_retry(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "1")
    fault(cli, "cdi.remove", "EIO")
    ok(cli.json("reclaim", "--mig-uuid", a))
    queued = journal(cli)[-1]
    assert (queued["action"], queued["cdi"], queued["outcome"]) == ("reclaim", "queued", "done")
    assert "queued" in queued["reason"]
    ok(cli.json("reconcile"))
    retried = journal(cli)[-1]
    assert (retried["action"], retried["cdi"], retried["migUUID"]) == (
        "retry-cdi-removal",
        "removed",
        a,
    )


def test_a_failed_append_never_fails_the_step_and_is_counted(cli: Cli) -> None:
    fault(cli, "events.write", "EIO")
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    assert state_of(cli, a) == "Active"
    assert journal(cli) == []
    assert Counters(cli.state_dir).load().get(EVENTS_WRITE_FAILURES) == 1
    ok(cli.json("release", "--pod", "ns/a"))  # the next append works again
    assert actions(journal(cli)) == [("release", "done")]
    assert Counters(cli.state_dir).load().get(EVENTS_WRITE_FAILURES) == 1


CRASHING = {
    # command -> (its arguments, what `list` shows of the instance after the step)
    "allocate": (
        ["allocate", "--pod", "ns/b", "--gpu", "0", "--profile", "1g.10gb", "--placement", "1"],
        "Active",
    ),
    "release": (["release", "--pod", "ns/a"], "Idle"),
    "reclaim": (["reclaim", "--gpu", "0", "--all-idle"], None),
    "recover": (["recover", "--assume-no-pods"], "Idle"),
}


@pytest.mark.parametrize("command", sorted(CRASHING))
@pytest.mark.parametrize("action", ["crash-before", "crash-after"])
def test_a_crash_at_the_append_leaves_the_step_done(cli: Cli, action: str, command: str) -> None:
    """Each step is complete before its event is written: a crash there loses (at most) the
    event, never the step, and the node goes on as usual (recover finds nothing to repair)."""
    args, after = CRASHING[command]
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    if command == "reclaim":
        ok(cli.json("release", "--pod", "ns/a"))
    logged = len(journal(cli))
    fault(cli, "events.write", action=action)
    ran = run_hamimig(*cli.globals(), "-o", "json", *args)
    assert ran.returncode == CRASH_EXIT_STATUS, (ran.stdout, ran.stderr)
    target = a if command != "allocate" else None
    shown = {i["migUUID"]: i["state"] for i in ok(cli.json("list"))["instances"]}
    if target is None:
        [target] = [m for m in shown if m != a]
    assert shown.get(target) == after
    assert list(cli.state_dir.glob("intent-*")) == []
    events = journal(cli)[logged:]
    assert len(events) == (0 if action == "crash-before" else 1)
    assert all(e["migUUID"] == target for e in events)
    recovered = ok(cli.json("recover", "--assume-no-pods"))
    assert recovered["actions"] == [] or all(
        x["action"] in ("restore-idle", "preserve-unmanaged") for x in recovered["actions"]
    )
    # The journal stays whole: every line an event, none skipped.
    assert "warnings" not in ok(cli.json("events"))


def test_a_torn_last_line_costs_only_itself(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    path = cli.state_dir / EVENTS_NAME
    with path.open("ab") as f:
        f.write(b'{"time":"2026-01-01T00:00:00Z","action":"cre')  # a crash mid-write
    ran = cli.json("events")
    assert ran.exit_code == 0
    [warning] = ran.json()["warnings"]
    assert warning["file"] == str(path) and "line skipped" in warning["reason"]
    ok(cli.json("release", "--pod", "ns/a"))
    data = ok(cli.json("events"))
    assert actions(data["events"]) == [("create", "done"), ("release", "done")]
    assert ["line skipped, not an event: 2" in w["reason"] for w in data["warnings"]] == [True]
    # The torn line ended with a newline of its own: the file is whole lines again.
    assert path.read_bytes().endswith(b"\n")
    assert len(path.read_bytes().splitlines()) == 3


def test_corrupt_lines_are_skipped_and_reported_never_fatal(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    path = cli.state_dir / EVENTS_NAME
    good = path.read_bytes()
    path.write_bytes(
        b"not json\n"
        + good
        + b'["a list"]\n{"action":"create"}\n{"time":"yesterday","action":"x"}\n\n'
        + b"\xff\xfe\n"
        + b"x" * 70000
        + b"\n"
        + good
    )
    data = ok(cli.json("events"))
    assert actions(data["events"]) == [("create", "done"), ("create", "done")]
    [warning] = data["warnings"]
    assert warning["reason"] == "6 lines skipped, not an event: 1, 3, 4, 5, 7, ..."
    table = cli("events")
    assert table.exit_code == 0 and "6 lines skipped" in table.stdout


def test_the_journal_rotates_keeping_one_older_file(cli: Cli) -> None:
    small = configured(cli, "events:\n  maxBytes: 4Ki\n")
    for n in range(12):
        ok(small.json("allocate", "--pod", f"ns/p{n}", "--gpu", "0", "--profile", "1g.10gb"))
        ok(small.json("release", "--pod", f"ns/p{n}"))
    current, older = cli.state_dir / EVENTS_NAME, cli.state_dir / ROTATED_NAME
    assert older.exists() and 0 < current.stat().st_size <= 4096
    assert older.stat().st_size <= 4096
    assert stat.S_IMODE(current.stat().st_mode) == stat.S_IMODE(older.stat().st_mode) == 0o600
    assert sorted(p.name for p in cli.state_dir.glob("events*")) == [EVENTS_NAME, ROTATED_NAME]
    events = listed(small)
    # Both files, the older first, and nothing but whole events; the oldest have rotated away.
    times = [parse_time(e["time"]) or 0.0 for e in events]
    assert times == sorted(times)
    assert events[-1] == journal(cli)[-1]
    assert len(events) < 24 and events[-1]["pod"] == "ns/p11"
    older_lines = older.read_text().splitlines()
    assert [json.loads(line) for line in older_lines] == events[: len(older_lines)]


def test_filters(cli: Cli) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    b = allocated(cli, "ns/b", "1g.10gb", "0", gpu="1")
    ok(cli.json("release", "--pod", "ns/a"))
    gpu1 = gpus(cli)[1]["uuid"]
    assert [e["migUUID"] for e in listed(cli, "--mig-uuid", a)] == [a, a]
    assert [e["migUUID"] for e in listed(cli, "--mig-uuid", a[:8])] == [a, a]
    assert [e["migUUID"] for e in listed(cli, "--mig-uuid", device_name(b))] == [b]
    kind = f"k8s.device-plugin.nvidia.com/dynamic-mig={device_name(b)}"
    assert [e["migUUID"] for e in listed(cli, "--mig-uuid", kind)] == [b]
    assert [e["action"] for e in listed(cli, "--pod", "ns/a")] == ["create", "release"]
    assert [e["migUUID"] for e in listed(cli, "--gpu", "1")] == [b]
    assert [e["migUUID"] for e in listed(cli, "--gpu", gpu1)] == [b]
    assert [e["action"] for e in listed(cli, "--limit", "1")] == ["release"]
    assert listed(cli, "--limit", "0") == []
    assert len(listed(cli, "--since", "1h")) == 3
    sim(cli, "clock", "--advance", "2h")
    assert listed(cli, "--since", "1h") == []
    assert len(listed(cli, "--since", "2000-01-01T00:00:00Z")) == 3
    assert listed(cli, "--since", "2999-01-01T00:00:00Z") == []
    # AND of every filter
    assert listed(cli, "--pod", "ns/b", "--gpu", "0") == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "yesterday"], "--since: 'yesterday' is neither a duration"),
        (["--since", "2026-01-01T00:00:00"], "nor an RFC 3339 time"),
        (["--limit", "-1"], "--limit must be between 0 and"),
        (["--pod", "nopod"], "invalid pod 'nopod'"),
        (["--gpu", "gpu0"], "invalid GPU 'gpu0'"),
        (["--mig-uuid", ""], "--mig-uuid must not be empty"),
        (["--mig-uuid", "MIG-"], "names no digits"),
        (["--mig-uuid", "mig-12xz"], "invalid CDI device name"),
    ],
)
def test_bad_filters_are_one_line_usage_errors(cli: Cli, args: list[str], says: str) -> None:
    message = refused(cli.json("events", *args), 2, "usage")
    assert says in message and "\n" not in message


def test_events_is_read_only_and_needs_no_lock_nor_gpu(cli: Cli, tmp_path: Path) -> None:
    absent = Cli(cli.sim.parent / "no-such-node.json", tmp_path / "none", tmp_path / "none-cdi")
    assert listed(absent) == []
    assert not (tmp_path / "none").exists()
    allocated(cli, "ns/a", "1g.10gb", "0")
    (cli.state_dir / "hamimig.lock").unlink()
    before = tree(cli.state_dir, cli.cdi_dir)
    assert len(listed(cli)) == 1
    assert cli("events").exit_code == 0
    assert tree(cli.state_dir, cli.cdi_dir) == before


@pytest.mark.parametrize("what", ["symlink", "fifo", "zero", "dir"])
def test_a_planted_journal_is_neither_followed_nor_hangs(cli: Cli, what: str) -> None:
    cli.state_dir.mkdir(parents=True)
    path = cli.state_dir / EVENTS_NAME
    victim = cli.state_dir.parent / "victim"
    victim.write_text("untouched\n")
    if what == "symlink":
        path.symlink_to(victim)
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    # Writing: the step stands, the append is counted as failed, nothing is written through.
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    assert state_of(cli, a) == "Active"
    assert Counters(cli.state_dir).load().get(EVENTS_WRITE_FAILURES) == 1
    assert victim.read_text() == "untouched\n"
    assert "1 append(s) failed so far" in doctor_check(cli, "events")["message"]
    # Reading: a warning naming the file, exit 0.
    data = ok(cli.json("events"))
    assert data["events"] == []
    [warning] = data["warnings"]
    assert warning["file"] == str(path) and "cannot be read" in warning["reason"]


def test_the_journal_is_0600_in_its_state_directory(cli: Cli) -> None:
    os.umask(0o022)
    allocated(cli, "ns/a", "1g.10gb", "0")
    assert stat.S_IMODE((cli.state_dir / EVENTS_NAME).stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("100", "between 4Ki and 1Gi"),
        ("2Gi", "between 4Ki and 1Gi"),
        ("16MB", "must be a size in bytes"),
        ("true", "must be a size in bytes"),
        ("-4096", "must be a size in bytes"),
        ("0x1000", "must be a size in bytes"),
    ],
)
def test_max_bytes_must_be_a_sane_size(cli: Cli, value: str, says: str) -> None:
    bad = configured(cli, f"events:\n  maxBytes: {value}\n")
    message = refused(
        bad.json("allocate", "--pod", "ns/a", "--gpu", "0", "--profile", "1g.10gb"), 2, "usage"
    )
    assert "events.maxBytes" in message and says in message
    assert not (cli.state_dir / EVENTS_NAME).exists()


def test_max_bytes_in_config_show_with_its_source(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    def shown(c: Cli) -> dict[str, Any]:
        settings = ok(c.json("config", "show"))["settings"]
        [setting] = [s for s in settings if s["key"] == "events.maxBytes"]
        return setting

    assert shown(cli)["value"] == 16 * 1024 * 1024 and shown(cli)["source"] == "default"
    assert shown(configured(cli, "events:\n  maxBytes: 512Ki\n"))["value"] == 512 * 1024
    monkeypatch.setenv("HAMIMIG_EVENTS_MAX_BYTES", "8192")
    assert shown(cli) | {"key": None} == {
        "key": None,
        "value": 8192,
        "source": "env HAMIMIG_EVENTS_MAX_BYTES",
    }


def test_pod_filter_follows_the_instances_it_held_until_someone_else_takes_them(
    cli: Cli,
) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "0")
    allocated(cli, "ns/big", "2g.20gb", "0")  # reclaims a: placement pressure
    mine = listed(cli, "--pod", "ns/a")
    assert [(e["action"], e["migUUID"]) for e in mine] == [
        ("create", a),
        ("release", a),
        ("reclaim", a),
    ]
    b = idle(cli, "ns/b", "1g.10gb", "4")
    assert allocated(cli, "ns/c", "1g.10gb", "4") == b  # reused by another pod
    ok(cli.json("release", "--pod", "ns/c"))
    ok(cli.json("reclaim", "--mig-uuid", b))
    assert [e["action"] for e in listed(cli, "--pod", "ns/b")] == ["create", "release"]
    assert [e["action"] for e in listed(cli, "--pod", "ns/c")] == ["reuse", "release", "reclaim"]


def test_the_idle_policy_logs_its_evictions(cli: Cli, pods_file: Any) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "0")
    sim(cli, "clock", "--advance", "2h")
    ttl = configured(cli, "devices:\n  nvidia:\n    idleTTL: 1h\n")
    ok(ttl.json("reconcile", "--pods", pods_file()))
    evicted = journal(cli)[-1]
    assert (evicted["action"], evicted["migUUID"], evicted["command"]) == (
        "evict-idle",
        a,
        "reconcile",
    )
    assert "idle policy" in evicted["reason"] and evicted["cdi"] == "removed"


def doctor_check(cli: Cli, name: str) -> dict[str, Any]:
    checks = cli.json("doctor").json()["checks"]
    [check] = [c for c in checks if c["name"] == name]
    found: dict[str, Any] = check
    return found


def test_doctor_judges_the_journal_from_its_last_line(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    path = cli.state_dir / EVENTS_NAME
    check = doctor_check(cli, "events")
    assert check["status"] == "ok" and f"{path.stat().st_size} byte(s)" in check["message"]
    with path.open("ab") as f:
        f.write(b'{"time":')
    check = doctor_check(cli, "events")
    assert check["status"] == "warn" and "last line is torn" in check["message"]
    path.chmod(0o644)
    mode = doctor_check(cli, "file-mode/events")
    assert mode["status"] == "warn" and mode["hint"] == f"chmod 0600 {path}"
    path.chmod(0o666)
    mode = doctor_check(cli, "file-mode/events")
    assert mode["status"] == "warn" and "only the event history depends on it" in mode["message"]
    path.unlink()
    path.symlink_to("/dev/zero")
    check = doctor_check(cli, "events")
    assert check["status"] == "warn" and "symbolic link" in check["message"]


def test_hostile_lines_are_skipped_or_shown_harmlessly(cli: Cli) -> None:
    """What a file can hold must never crash the reader, the doctor or the table, nor drive
    the terminal."""
    allocated(cli, "ns/a", "1g.10gb", "0")
    path = cli.state_dir / EVENTS_NAME
    good = path.read_bytes()
    lines = [
        b"[" * 5000,  # nested past the parser's recursion limit
        b'{"time":"2026-12-02T04:00:00Z","action":"create","pid":NaN}',
        b'{"time":"2026-12-02T04:00:00Z","action":"create","pid":1e999}',
        b'{"time":"20261202T040000Z","action":"create"}',  # ISO 8601, not RFC 3339
    ]
    odd = [
        {"time": "9999-12-31T23:59:59-23:59", "action": "create"},  # UTC year 10000
        {"time": "2026-12-02T04:00:00Z", "action": "create", "migUUID": ["x"], "pod": "ns/a"},
        {"time": "2026-12-02T04:00:00Z", "action": "\u001b]0;pwned\u0007", "pod": {"a": 1}},
    ]
    body = good + b"\n".join(lines) + b"\n" + b"".join(json.dumps(o).encode() + b"\n" for o in odd)
    path.write_bytes(body)
    data = ok(cli.json("events"))
    assert len(data["events"]) == 4
    assert data["warnings"][0]["reason"] == "4 lines skipped, not an event: 2, 3, 4, 5"
    json.dumps(data, allow_nan=False)  # strict JSON out
    for args in ([], ["--pod", "ns/a"], ["-o", "wide"]):
        table = cli("events", *args)
        assert table.exit_code == 0, table.stdout
        assert "\u001b" not in table.stdout
    plain = cli("events").stdout
    assert "9999-12-31T23:59:59-23:59" in plain and "\\x1b]0;pwned" in plain
    # the last line is an event: doctor is fine; a nested last line is a warning, not a crash
    path.write_bytes(good + b"[" * 5000 + b"\n")
    assert doctor_check(cli, "events")["status"] == "warn"


def test_a_table_shows_the_newest_500_and_says_so(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    path = cli.state_dir / EVENTS_NAME
    [event] = journal(cli)
    path.write_text("".join(json.dumps(event | {"pid": n}) + "\n" for n in range(2000)))
    table = cli("events")
    assert table.exit_code == 0
    assert "1500 older matching event(s) not shown" in table.stdout
    assert len(listed(cli)) == 2000  # JSON: all of them
    assert [e["pid"] for e in listed(cli, "--limit", "2")] == [1998, 1999]


def test_steps_on_a_spec_or_a_record_name_the_instance_fully(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "2")
    for spec in cli.cdi_dir.glob("*.json"):
        spec.unlink()
    ok(cli.json("recover", "--assume-no-pods"))
    ok(cli.json("forget", a))
    fault(cli, "cdi.write", "EIO")
    assert alloc(cli, "ns/b", "1g.10gb", "3").exit_code == 4
    repaired, forgot, failed = journal(cli)[-3:]
    assert (repaired["action"], repaired["state"], repaired["gpuIndex"]) == (
        "repair-cdi",
        "Idle",
        0,
    )
    assert (repaired["profile"], repaired["cdi"]) == ("1g.10gb", "written")
    assert (forgot["action"], forgot["gpuIndex"], forgot["profile"]) == (
        "forget-record",
        0,
        "1g.10gb",
    )
    assert [e["migUUID"] for e in listed(cli, "--gpu", "0")].count(a) == 4
    # A creation that failed after its CI existed names the instance it had made.
    assert failed["action"] == "create" and failed["outcome"] == "failed"
    assert failed["migUUID"] is not None and failed["migUUID"].startswith("MIG-")
    assert listed(cli, "--mig-uuid", failed["migUUID"]) == [failed]


def test_a_hard_link_at_the_journal_is_not_written_through(cli: Cli) -> None:
    cli.state_dir.mkdir(parents=True)
    victim = cli.state_dir.parent / "victim"
    victim.write_text("untouched\n")
    os.link(victim, cli.state_dir / EVENTS_NAME)
    allocated(cli, "ns/a", "1g.10gb", "0")
    assert victim.read_text() == "untouched\n"
    assert Counters(cli.state_dir).load().get(EVENTS_WRITE_FAILURES) == 1


def test_events_warns_when_others_could_have_written_them(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    assert "warnings" not in ok(cli.json("events"))
    (cli.state_dir / EVENTS_NAME).chmod(0o666)
    [warning] = ok(cli.json("events"))["warnings"]
    assert "others could have written these events" in warning["reason"]
    (cli.state_dir / EVENTS_NAME).chmod(0o600)
    cli.state_dir.chmod(0o777)
    [warning] = ok(cli.json("events"))["warnings"]
    assert warning["file"] == str(cli.state_dir) and "group- or world-writable" in warning["reason"]


def test_mig_uuid_filter_refuses_what_is_no_mig_uuid(cli: Cli) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    for bad in ("foo", "GPU-1234", "k=MIG-1234"):
        assert "give a MIG UUID" in refused(cli.json("events", "--mig-uuid", bad), 2, "usage")
    upper = f"KIND={device_name(a).upper().replace('MIG-', 'mig-')}"
    assert [e["migUUID"] for e in listed(cli, "--mig-uuid", upper)] == [a]
    assert [e["migUUID"] for e in listed(cli, "--mig-uuid", f" {a[:10]} ")] == [a]
    message = refused(cli.json("events", "--since", "99999999999999999999h"), 2, "usage")
    assert "longer than ten years" in message
