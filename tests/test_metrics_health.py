"""`hamimig metrics`' health families, through the CLI on the simulated node: pending intents and
their age, the CDI removal queue, unreadable records, the last reconcile pass, doctor's verdict,
idle ages, failed event journal appends; every family present on every node; and the whole
textfile on a node with something of everything, checked by Prometheus' own `promtool`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from hamimig.reports import metrics as metrics_report
from hamimig.sim.state import CRASH_EXIT_STATUS
from hamimig.store.counters import COUNTERS_NAME, EVENTS_WRITE_FAILURES, Counters
from tests.support.cli import (
    Cli,
    allocated,
    configured,
    fail_destroys,
    idle,
    ok,
    owners_running,
    run_hamimig,
    sim,
    sim_create,
    state_of,
)
from tests.support.pods import PodsFile
from tests.support.records import hami_record, record_path

INFO = "hamimig_mig_instance_info"
IDLE_AGE = "hamimig_idle_instance_age_seconds"
PENDING = "hamimig_pending_intents"
PENDING_AGE = "hamimig_pending_intent_max_age_seconds"
QUEUE = "hamimig_cdi_removal_queue_length"
UNREADABLE = "hamimig_unreadable_records"
LAST_RECONCILE = "hamimig_last_reconcile_timestamp_seconds"
DOCTOR_FAILED = "hamimig_doctor_failed_checks"
DOCTOR_WARNED = "hamimig_doctor_warned_checks"
EVENTS_FAILED = "hamimig_events_write_failures"  # the parser's name: a counter without _total
SCALARS = (PENDING, PENDING_AGE, QUEUE, UNREADABLE, LAST_RECONCILE, DOCTOR_FAILED, DOCTOR_WARNED)
SLACK = 60
"""Seconds a test may take between the node's clock moving and metrics reading it."""


# ---------------------------------------------------------------------------------------------
# Helpers


def families(cli: Cli) -> dict[str, list[Sample]]:
    ran = cli("metrics")
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    return {f.name: list(f.samples) for f in text_string_to_metric_families(ran.stdout)}


def value(cli: Cli, name: str) -> int:
    """The one sample of a family labelled only by its node, which must be a whole number."""
    [sample] = families(cli)[name]
    assert list(sample.labels) == ["node"] and sample.value == int(sample.value)
    return int(sample.value)


def node_now(cli: Cli) -> float:
    """The simulated node's clock: the host's plus the offset `sim clock` set."""
    offset: float = sim(cli, "clock")["clock"]["offsetSeconds"]
    return time.time() + offset


def doctor_summary(cli: Cli) -> tuple[int, int]:
    """(fail, warn) as `hamimig doctor` itself counts them."""
    summary = cli.json("doctor").json()["summary"]
    return summary["fail"], summary["warn"]


def doctor_gauges(cli: Cli) -> tuple[int, int]:
    found = families(cli)
    return int(found[DOCTOR_FAILED][0].value), int(found[DOCTOR_WARNED][0].value)


def idle_ages(cli: Cli) -> dict[str, int]:
    return {s.labels["mig_uuid"]: int(s.value) for s in families(cli)[IDLE_AGE]}


def interrupted_allocation(cli: Cli, pod: str, placement: str, gpu: str = "0") -> None:
    """An allocation killed after its GI was created: its intent stays on disk (and the GPU
    takes no other allocation until `recover`)."""
    op = "nvmlDeviceCreateGpuInstanceWithPlacement"
    sim(cli, "fault", "add", "--op", op, "--action", "crash-after")
    args = ["allocate", "--pod", pod, "--gpu", gpu, "--profile", "1g.10gb"]
    ran = run_hamimig(*cli.globals(), "-o", "json", *args, "--placement", placement)
    assert ran.returncode == CRASH_EXIT_STATUS, (ran.stdout, ran.stderr)


def unreadable_record(cli: Cli, name: str = "hami-owned-garbage.json") -> Path:
    path = cli.state_dir / name
    path.write_text("{not json")
    path.chmod(0o600)
    return path


def queued_removal(cli: Cli, mig: str) -> None:
    """Reclaim `mig` (Idle) while CDI spec removals fail: its removal is queued."""
    sim(cli, "fault", "add", "--op", "cdi.remove", "--error", "EIO", "--times", "1000")
    ok(cli.json("reclaim", "--mig-uuid", mig))


# ---------------------------------------------------------------------------------------------
# Every family, every node


def test_a_fresh_node_has_every_health_family_at_zero_and_nothing_is_written(cli: Cli) -> None:
    found = families(cli)
    for name in (PENDING, PENDING_AGE, QUEUE, UNREADABLE, LAST_RECONCILE):
        assert [s.value for s in found[name]] == [0], name
    assert [s.value for s in found[EVENTS_FAILED]] == [0]
    assert found[IDLE_AGE] == []
    assert doctor_gauges(cli) == doctor_summary(cli)
    assert not cli.state_dir.exists()  # read-only, doctor's report included


def test_the_old_family_name_is_gone(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    found = families(cli)
    assert "hami_node_gpu_mig_instance_info" not in found  # HAMi's scheduler's name
    assert len(found[INFO]) == 1


# ---------------------------------------------------------------------------------------------
# Intents, the removal queue, unreadable records


def test_pending_intents_and_the_age_of_the_oldest(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    interrupted_allocation(cli, "ns/b", "3")
    assert value(cli, PENDING) == 1
    assert 0 <= value(cli, PENDING_AGE) < SLACK
    sim(cli, "clock", "--advance", "2m")
    assert 120 <= value(cli, PENDING_AGE) < 120 + SLACK
    interrupted_allocation(cli, "ns/c", "5", gpu="1")
    assert value(cli, PENDING) == 2
    assert 120 <= value(cli, PENDING_AGE) < 120 + SLACK  # the oldest one's age
    # An unreadable intent is an entry on disk too (it has no age to read).
    broken = cli.state_dir / "intent-broken.json"
    broken.write_text("[]")
    broken.chmod(0o600)
    assert value(cli, PENDING) == 3
    broken.unlink()
    ok(cli.json("recover", "--assume-no-pods"))  # rolls both back
    assert (value(cli, PENDING), value(cli, PENDING_AGE)) == (0, 0)


def test_cdi_removal_queue_length_follows_the_queue(cli: Cli) -> None:
    first = idle(cli, "ns/a", "1g.10gb", "0")
    second = idle(cli, "ns/b", "1g.10gb", "1")
    queued_removal(cli, first)
    assert value(cli, QUEUE) == 1
    ok(cli.json("reclaim", "--mig-uuid", second))
    assert value(cli, QUEUE) == 2
    sim(cli, "fault", "clear")
    ok(cli.json("reconcile"))  # retries the removals
    assert value(cli, QUEUE) == 0


def test_unreadable_records_are_counted_and_fail_doctor(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    assert value(cli, UNREADABLE) == 0
    before_failed, _ = doctor_gauges(cli)
    unreadable_record(cli)
    assert value(cli, UNREADABLE) == 1
    unreadable_record(cli, "hami-owned-other.json")
    assert value(cli, UNREADABLE) == 2
    failed, warned = doctor_gauges(cli)
    assert (failed, warned) == doctor_summary(cli)
    assert failed == before_failed + 2  # one failing record/NAME check per file
    # Not counted: a file HAMi's loader never reads. Counted: every file recover refuses
    # over, an intent and the removal queue too (each makes recover exit 5).
    (cli.state_dir / "hami-owned-notes.txt").write_text("x")
    assert value(cli, UNREADABLE) == 2
    (cli.state_dir / "intent-broken.json").write_text("[]")
    assert value(cli, UNREADABLE) == 3
    (cli.state_dir / "cdi-removal-queue.json").write_text("garbage")
    assert value(cli, UNREADABLE) == 4
    assert cli.json("recover", "--assume-no-pods", "--dry-run").exit_code == 5


# ---------------------------------------------------------------------------------------------
# The last reconcile pass


def test_last_reconcile_is_set_by_a_real_pass_only(cli: Cli, pods_file: PodsFile) -> None:
    assert value(cli, LAST_RECONCILE) == 0
    ok(cli.json("reconcile", "--dry-run"))
    assert value(cli, LAST_RECONCILE) == 0
    assert not (cli.state_dir / COUNTERS_NAME).exists()  # a dry run writes nothing
    sim(cli, "clock", "--advance", "1h")
    ok(cli.json("reconcile"))  # a pass with nothing to do still ran
    first = value(cli, LAST_RECONCILE)
    assert node_now(cli) - SLACK < first <= node_now(cli)
    assert first > time.time() + 3600 - SLACK  # the node's clock, not the host's
    # Counting keeps it; dry runs and refused passes leave it as it was.
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    assert value(cli, LAST_RECONCILE) == first
    sim(cli, "clock", "--advance", "10m")
    ok(cli.json("reconcile", "--dry-run"))
    assert value(cli, LAST_RECONCILE) == first
    garbage = unreadable_record(cli)
    assert cli.json("reconcile").exit_code == 5  # refused before acting
    assert value(cli, LAST_RECONCILE) == first
    garbage.unlink()
    os.chmod(cli.state_dir, 0o777)  # others could forge records: refused
    assert cli.json("reconcile").exit_code == 5
    os.chmod(cli.state_dir, 0o750)
    assert value(cli, LAST_RECONCILE) == first
    # A pass whose steps fail still ran to its end: set (the failures show elsewhere).
    ok(cli.json("release", "--mig-uuid", mig))
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", mig).exit_code == 4
    assert state_of(cli, mig) == "Error"
    sim(cli, "clock", "--advance", "5m")
    assert cli.json("reconcile", "--pods", owners_running(cli)).exit_code == 4
    second = value(cli, LAST_RECONCILE)
    assert second >= first + 900 and node_now(cli) - SLACK < second <= node_now(cli)
    stored = json.loads((cli.state_dir / COUNTERS_NAME).read_text())
    assert stored["timestamps"] == {"lastReconcile": second}
    assert stored["counters"]["failures"]["destroy"] == 2  # the counters are untouched by it


def test_a_failed_last_reconcile_write_never_fails_reconcile(cli: Cli) -> None:
    cli.state_dir.mkdir(parents=True, mode=0o750)
    (cli.state_dir / COUNTERS_NAME).mkdir()  # no file can replace a directory
    ok(cli.json("reconcile"))
    assert value(cli, LAST_RECONCILE) == 0


def test_the_timestamp_and_the_counters_keep_each_other(tmp_path: Path) -> None:
    store = Counters(tmp_path / "state")
    store.bump("creations")
    store.set_timestamp("lastReconcile", 1_767_225_600)
    store.bump("creations")
    store.set_timestamp("lastReconcile", 1_767_225_700)
    values = store.load()
    assert (values.get("creations"), values.timestamp("lastReconcile")) == (2, 1_767_225_700)
    assert values.timestamp("never") == 0
    assert json.loads(store.path.read_text()) == {
        "version": 1,
        "counters": {"creations": 2},
        "timestamps": {"lastReconcile": 1_767_225_700},
    }
    with pytest.raises(ValueError):
        store.set_timestamp("lastReconcile", -1)
    for bad in (
        b'{"version": 1, "counters": {}, "timestamps": []}',
        b'{"version": 1, "counters": {}, "timestamps": {"lastReconcile": -1}}',
        b'{"version": 1, "counters": {}, "timestamps": {"lastReconcile": "x"}}',
    ):
        store.path.write_bytes(bad)
        assert store.load().problem is not None, bad


# ---------------------------------------------------------------------------------------------
# Doctor


def test_doctor_gauges_count_what_doctor_reports(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    healthy_failed, healthy_warned = doctor_gauges(cli)
    assert (healthy_failed, healthy_warned) == doctor_summary(cli)
    os.chmod(cli.state_dir, 0o777)
    failed, warned = doctor_gauges(cli)
    assert (failed, warned) == doctor_summary(cli)
    assert failed > healthy_failed
    os.chmod(cli.state_dir, 0o750)
    queued_removal(cli, idle(cli, "ns/b", "1g.10gb", "1"))
    failed, warned = doctor_gauges(cli)
    assert (failed, warned) == doctor_summary(cli)
    assert warned > healthy_warned  # a queued removal warns


def test_a_doctor_report_that_cannot_be_built_counts_as_one_failure(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("doctor exploded")

    monkeypatch.setattr(metrics_report, "run_checks", broken)
    assert doctor_gauges(cli) == (1, 0)
    data = ok(cli.json("metrics"))
    [warning] = data["warnings"]
    assert "doctor exploded" in warning["reason"]
    assert len(families(cli)[INFO]) == 1  # the rest is all there


# ---------------------------------------------------------------------------------------------
# Idle ages


def test_idle_ages_follow_the_node_clock_with_the_info_labels(cli: Cli) -> None:
    active = allocated(cli, "ns/a", "1g.10gb", "0")
    first = idle(cli, "ns/b", "1g.10gb", "1")
    assert 0 <= idle_ages(cli)[first] < SLACK
    sim(cli, "clock", "--advance", "90s")
    second = idle(cli, "ns/c", "2g.20gb", "4")
    ages = idle_ages(cli)
    assert set(ages) == {first, second}  # the Active one has none
    assert 90 <= ages[first] < 90 + SLACK
    assert 0 <= ages[second] < SLACK
    found = families(cli)
    info = {s.labels["mig_uuid"]: s.labels for s in found[INFO]}
    for sample in found[IDLE_AGE]:
        assert sample.labels == info[sample.labels["mig_uuid"]]
        assert sample.labels["state"] == "Idle"
    assert info[active]["state"] == "Active"
    # Reused: Active again, no idle age.
    allocated(cli, "ns/d", "1g.10gb", "1")
    assert set(idle_ages(cli)) == {second}


def test_an_idle_time_in_the_future_reads_zero(cli: Cli) -> None:
    sim(cli, "clock", "--advance", "2h")
    mig = idle(cli, "ns/a", "1g.10gb", "0")
    sim(cli, "clock", "--set", "2020-01-01T00:00:00Z")  # the clock set back
    assert idle_ages(cli) == {mig: 0}


def test_hamis_idle_record_has_an_age_once_a_policy_pass_has_seen_it(
    cli: Cli, pods_file: PodsFile
) -> None:
    inst = sim_create(cli, "1g.10gb", "2")
    hami_record(cli, inst)
    mig = inst["migUUID"]
    # Idle, but no pass has seen it unheld: no idle age, no series (the info series is there).
    assert idle_ages(cli) == {}
    assert [s.labels["state"] for s in families(cli)[INFO]] == ["Idle"]
    node = configured(cli, "devices:\n  nvidia:\n    idleTTL: 1h\n")
    ok(node.json("reconcile", "--pods", pods_file()))
    assert 0 <= idle_ages(node)[mig] < SLACK
    sim(cli, "clock", "--advance", "90s")
    assert 90 <= idle_ages(node)[mig] < 90 + SLACK
    assert record_path(cli, mig).exists()


# ---------------------------------------------------------------------------------------------
# Event journal write failures


def test_events_write_failures_total_reads_the_counter(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    assert value(cli, EVENTS_FAILED) == 0
    store = Counters(cli.state_dir)
    store.bump(EVENTS_WRITE_FAILURES)
    store.bump(EVENTS_WRITE_FAILURES)
    [sample] = families(cli)[EVENTS_FAILED]
    assert (sample.name, sample.value) == ("hamimig_events_write_failures_total", 2)


# ---------------------------------------------------------------------------------------------
# The whole textfile, by promtool


def rich_node(cli: Cli) -> dict[str, str]:
    """Active, Idle (with ages), Error and Unmanaged instances, an interrupted allocation, a
    queued CDI removal, after a reconcile pass (whose Error retry fails), and an unreadable
    record."""
    active = allocated(cli, "ns/active", "1g.10gb", "0")
    idle_old = idle(cli, "ns/idle-old", "1g.10gb", "1")
    sim(cli, "clock", "--advance", "90s")
    idle_new = idle(cli, "ns/idle-new", "2g.20gb", "4", gpu="1")
    error = idle(cli, "ns/error", "1g.10gb", "0", gpu="1")
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", error).exit_code == 4
    sim(cli, "fault", "clear")
    unmanaged = sim_create(cli, "1g.10gb", "6")["migUUID"]
    sim_create(cli, "1g.10gb", "2", gpu="1", no_ci=True)  # an orphan GI
    # After the last creation on GPU 1: an allocation retries the queue before it creates, and
    # one on GPU 1 would be refused while the spec naming that GPU stays queued.
    queued_removal(cli, idle(cli, "ns/gone", "1g.10gb", "6", gpu="1"))
    interrupted_allocation(cli, "ns/crashed", "3")
    sim(cli, "fault", "add", "--op", "cdi.remove", "--error", "EIO", "--times", "1000")
    fail_destroys(cli)
    # the Error instance is still busy
    assert cli.json("reconcile", "--pods", owners_running(cli)).exit_code == 4
    unreadable_record(cli)
    return {
        "Active": active,
        "Idle": idle_old,
        "Idle-new": idle_new,
        "Error": error,
        "Unmanaged": unmanaged,
    }


def test_the_textfile_of_a_rich_node_passes_promtool(cli: Cli, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian/Ubuntu: apt-get install prometheus)")
    migs = rich_node(cli)
    target = tmp_path / "hamimig.prom"
    ok(cli.json("--node", "node-1", "metrics", "--textfile", str(target)))
    text = target.read_text()
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "", ""), text
    # And it says what the node holds.
    found = {f.name: list(f.samples) for f in text_string_to_metric_families(text)}
    states = {s.labels["mig_uuid"]: s.labels["state"] for s in found[INFO]}
    assert {states[m] for m in migs.values()} == {"Active", "Idle", "Error", "Unmanaged"}
    ages = {s.labels["mig_uuid"]: s.value for s in found[IDLE_AGE]}
    assert set(ages) == {migs["Idle"], migs["Idle-new"]}
    assert ages[migs["Idle"]] >= 90
    scalars = {name: found[name][0].value for name in SCALARS}
    assert scalars[PENDING] == 1
    assert scalars[QUEUE] == 1
    assert scalars[UNREADABLE] == 1
    assert scalars[LAST_RECONCILE] > 0
    assert scalars[DOCTOR_FAILED] >= 1


# ---------------------------------------------------------------------------------------------
# A broken node still exports its health


def test_with_nvml_down_the_health_series_are_still_written(cli: Cli, tmp_path: Path) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    sim(cli, "fault", "add", "--op", "nvmlInit", "--error", "LIBRARY_NOT_FOUND", "--times", "100")
    prom = tmp_path / "hamimig.prom"
    ran = cli("metrics", "--textfile", str(prom))
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert "instances: not exported" in ran.stderr
    text = prom.read_text()
    assert INFO + "{" not in text  # no instance series without NVML
    failed = [line for line in text.splitlines() if line.startswith(DOCTOR_FAILED + "{")]
    assert failed and int(failed[0].split()[-1]) >= 1  # doctor's nvml check fails
    if shutil.which("promtool"):
        checked = subprocess.run(
            ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_textfile_never_replaces_what_is_not_a_textfile(cli: Cli, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.prom"
    os.mkfifo(fifo)
    config = tmp_path / "config.yaml"
    config.write_text("devices: {}\n")
    for target, says in ((fifo, "FIFO"), (config, "neither a *.prom textfile")):
        ran = cli.json("metrics", "--textfile", str(target))
        assert ran.exit_code == 2 and says in ran.json()["error"]["message"]
    assert config.read_text() == "devices: {}\n"
    assert cli("metrics", "--textfile", str(tmp_path / "new.txt")).exit_code == 0  # new: warned


def test_an_impossible_counter_reads_as_zeros_and_the_text_stays_valid(cli: Cli) -> None:
    cli.state_dir.mkdir(parents=True)
    (cli.state_dir / COUNTERS_NAME).write_text(
        '{"version": 1, "counters": {"creations": 1' + "0" * 400 + "}}"
    )
    ran = cli("--node", "gpu-1", "metrics")
    assert ran.exit_code == 0 and "larger than 2^53" in ran.stderr
    assert 'hamimig_mig_creations_total{node="gpu-1"} 0' in ran.stdout


def test_an_intent_without_a_valid_time_counts_as_unreadable(cli: Cli) -> None:
    cli.state_dir.mkdir(parents=True)
    sim(cli, "fault", "add", "--op", "intent.write", "--action", "crash-after")
    ran = run_hamimig(*cli.globals(), "allocate", "--pod", "ns/a", "--gpu", "0",
                      "--profile", "1g.10gb")  # fmt: skip
    assert ran.returncode == CRASH_EXIT_STATUS
    [intent] = list(cli.state_dir.glob("intent-*.json"))
    doc = json.loads(intent.read_text())
    doc["createdAt"] = "garbage"
    intent.write_text(json.dumps(doc))
    # It loads (any text is a createdAt to the loader), but it can never age: so it counts.
    assert (value(cli, PENDING), value(cli, PENDING_AGE), value(cli, UNREADABLE)) == (1, 0, 1)
    doc["createdAt"] = "2026-01-01T00:00:00Z"
    intent.write_text(json.dumps(doc))
    assert value(cli, UNREADABLE) == 0 and value(cli, PENDING_AGE) > 0


def test_a_node_name_from_the_environment_must_be_utf8(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_NAME", "\udcff\udcfe")
    ran = cli.json("metrics")
    assert ran.exit_code == 2 and "not valid UTF-8" in ran.json()["error"]["message"]
