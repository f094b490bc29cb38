"""`hamimig metrics`: the Prometheus textfile for node-exporter, validated with
prometheus_client's parser, and the lifecycle counters kept in `counters.json`.

Everything goes through the CLI on the simulated node; the counters are checked for their exact
values after sequences of allocations, releases, reuses, reclaims and injected failures.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from hamimig.store.counters import COUNTERS_NAME, Counters, decode_stored
from hamimig.store.files import TEMP_PREFIX
from hamimig.store.records import LOADER_PREFIX, RecordStore
from tests.support.cli import Cli, alloc, allocate, allocated, fault, ok, owners_running, sim

INFO = "hamimig_mig_instance_info"
GAUGE = "hamimig_mig_instances"
# HAMi's scheduler (cmd/scheduler/metrics.go, dynamic MIG) labels its
# hami_node_gpu_mig_instance_info with exactly these; ours has the same ones plus `state`.
HAMI_INFO_LABELS = {
    "node",
    "device_uuid",
    "device_index",
    "mig_uuid",
    "profile",
    "gpu_instance_id",
    "compute_instance_id",
    "placement_start",
    "placement_size",
}
GPU_LABELS = ["node", "device_uuid", "device_index"]
"""How HAMi's scheduler labels a GPU on every series of its own (`node` first), and so every
series of ours that is about one GPU."""
# Every family of the exposition, as the parser names them (counters without `_total`).
FAMILIES = {
    INFO,
    GAUGE,
    "hamimig_idle_instance_age_seconds",
    "hamimig_mig_creations",
    "hamimig_mig_reuses",
    "hamimig_mig_reclaims",
    "hamimig_mig_failures",
    "hamimig_events_write_failures",
    "hamimig_pending_intents",
    "hamimig_pending_intent_max_age_seconds",
    "hamimig_cdi_removal_queue_length",
    "hamimig_unreadable_records",
    "hamimig_last_reconcile_timestamp_seconds",
    "hamimig_doctor_failed_checks",
    "hamimig_doctor_warned_checks",
}
STATES = [
    "Creating",
    "Active",
    "Idle",
    "Reclaiming",
    "Error",
    "Unmanaged",
    "OrphanGI",
    "Missing",
    "Unreadable",
]
ZERO = {
    "creations": 0,
    "reuses": 0,
    "reclaims": 0,
    "failures/allocate": 0,
    "failures/destroy": 0,
}


# ---------------------------------------------------------------------------------------------
# Helpers


def parse(text: str) -> dict[str, list[Sample]]:
    """Family name (as the parser names it: counters without `_total`) -> samples."""
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def exposition(cli: Cli, *globals_: str) -> dict[str, list[Sample]]:
    ran = cli(*globals_, "metrics")
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    return parse(ran.stdout)


def counters(cli: Cli) -> dict[str, int]:
    """The counters as the exposition reports them, cross-checked against counters.json."""
    families = exposition(cli)
    out = {}
    for name in ("creations", "reuses", "reclaims"):
        [sample] = families[f"hamimig_mig_{name}"]
        assert sample.name == f"hamimig_mig_{name}_total"
        out[name] = int(sample.value)
    for sample in families["hamimig_mig_failures"]:
        out[f"failures/{sample.labels['op']}"] = int(sample.value)
    path = cli.state_dir / COUNTERS_NAME
    if path.is_file():
        stored = decode_stored(path.read_bytes())[0]
        flat = {
            (name if label == "" else f"{name}/{label}"): value
            for name, by_label in stored.items()
            for label, value in by_label.items()
        }
        assert {k: v for k, v in out.items() if v} == flat
    return out


def expect(**changes: int) -> dict[str, int]:
    out = dict(ZERO)
    for key, value in changes.items():
        out[key.replace("__", "/")] = value
    return out


# ---------------------------------------------------------------------------------------------
# counters


def test_fresh_node_reports_zeros_and_metrics_writes_nothing(cli: Cli) -> None:
    families = exposition(cli)
    assert families[INFO] == []
    gauge = families[GAUGE]
    assert len(gauge) == 2 * len(STATES)  # two MIG GPUs, every state, zeros included
    assert {s.labels["state"] for s in gauge} == set(STATES)
    assert all(s.value == 0 for s in gauge)
    assert counters(cli) == ZERO
    assert not cli.state_dir.exists()  # read-only: not even the state directory


def test_counters_follow_creations_reuses_and_reclaims_exactly(cli: Cli) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    assert counters(cli) == expect(creations=1)
    # The same slot again is idempotent: nothing created, nothing reused.
    again = allocate(cli, "ns/a", "1g.10gb", "0")
    assert (again["created"], again["reused"]) == (False, False)
    ok(cli.json("release", "--pod", "ns/a"))
    assert counters(cli) == expect(creations=1)
    # Exact reuse of the Idle instance.
    reused = allocate(cli, "ns/b", "1g.10gb", "0")
    assert (reused["reused"], reused["instance"]["migUUID"]) == (True, a)
    ok(cli.json("release", "--pod", "ns/b"))
    assert counters(cli) == expect(creations=1, reuses=1)
    # A dry run counts nothing.
    ok(cli.json("reclaim", "--mig-uuid", a, "--dry-run"))
    assert counters(cli) == expect(creations=1, reuses=1)
    # Placement pressure: the blocking Idle instance is reclaimed, then a new one created.
    c = allocate(cli, "ns/c", "2g.20gb", "0")
    assert c["reclaimed"] == [a]
    assert counters(cli) == expect(creations=2, reuses=1, reclaims=1)
    # An explicit reclaim of two Idle instances.
    allocated(cli, "ns/d", "1g.10gb", "4")
    allocated(cli, "ns/e", "1g.10gb", "5", gpu="1")
    ok(cli.json("release", "--pod", "ns/d"))
    ok(cli.json("release", "--pod", "ns/e"))
    ok(cli.json("reclaim", "--gpu", "0", "--all-idle"))
    ok(cli.json("reclaim", "--gpu", "1", "--placement", "5"))
    assert counters(cli) == expect(creations=4, reuses=1, reclaims=3)
    # Refused commands count nothing.
    assert cli.json("reclaim", "--mig-uuid", c["instance"]["migUUID"]).exit_code == 3
    assert counters(cli) == expect(creations=4, reuses=1, reclaims=3)
    # counters.json: 0600, next to the records, never a name HAMi's loader reads.
    path = cli.state_dir / COUNTERS_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not COUNTERS_NAME.startswith(LOADER_PREFIX)
    assert json.loads(path.read_text()) == {
        "version": 1,
        "counters": {"creations": 4, "reclaims": 3, "reuses": 1},
    }


def test_failures_are_counted_when_an_allocation_is_rolled_back_or_a_destroy_fails(
    cli: Cli,
) -> None:
    # A GI creation the hardware refuses changes nothing at all, not even the counters.
    fault(cli, "nvmlDeviceCreateGpuInstanceWithPlacement", "UNKNOWN")
    assert alloc(cli, "ns/p", "2g.20gb", "2").exit_code == 4
    assert not (cli.state_dir / COUNTERS_NAME).exists()
    assert counters(cli) == ZERO
    # Failures after the GI exists are rolled back: one failure each, no creation.
    fault(cli, "nvmlGpuInstanceCreateComputeInstance", "UNKNOWN")
    ran = alloc(cli, "ns/p", "2g.20gb", "2")
    assert ran.exit_code == 4 and "rolled back" in ran.json()["error"]["message"]
    assert counters(cli) == expect(failures__allocate=1)
    fault(cli, "record.write", "EIO")
    assert alloc(cli, "ns/p", "2g.20gb", "2").exit_code == 4
    assert counters(cli) == expect(failures__allocate=2)
    # A destroy that fails leaves Error: one destroy failure per attempt.
    a = allocated(cli, "ns/p", "2g.20gb", "2")
    ok(cli.json("release", "--mig-uuid", a))
    # (a process that started after the reclaim found the instance idle: IN_USE)
    fail = ("--op", "nvmlComputeInstanceDestroy", "--error", "IN_USE", "--times", "1000")
    sim(cli, "fault", "add", *fail)
    assert cli.json("reclaim", "--mig-uuid", a).exit_code == 4
    assert counters(cli) == expect(creations=1, failures__allocate=2, failures__destroy=1)
    assert cli.json("reconcile", "--pods", owners_running(cli)).exit_code == 4  # still busy
    assert counters(cli) == expect(creations=1, failures__allocate=2, failures__destroy=2)
    # Once free, reconcile destroys the Error instance: that is a reclaim.
    sim(cli, "fault", "clear")
    ok(cli.json("reconcile", "--pods", owners_running(cli)))
    assert counters(cli) == expect(
        creations=1, reclaims=1, failures__allocate=2, failures__destroy=2
    )


def test_a_counter_write_failure_never_fails_or_rolls_back_an_operation(cli: Cli) -> None:
    cli.state_dir.mkdir(parents=True, mode=0o750)
    (cli.state_dir / COUNTERS_NAME).mkdir()  # no file can replace a directory
    created = allocate(cli, "ns/p", "1g.10gb", "0")
    assert created["created"] is True
    mig = created["instance"]["migUUID"]
    ok(cli.json("release", "--pod", "ns/p"))
    assert allocate(cli, "ns/q", "1g.10gb", "0")["reused"] is True
    ok(cli.json("release", "--pod", "ns/q"))
    assert [i["migUUID"] for i in ok(cli.json("reclaim", "--mig-uuid", mig))["reclaimed"]] == [mig]
    assert [n for n in os.listdir(cli.state_dir) if n.startswith(TEMP_PREFIX)] == []
    # metrics still works: zeros, and a warning naming the unusable file.
    ran = cli("metrics")
    assert ran.exit_code == 0
    assert COUNTERS_NAME in ran.stderr
    assert counters(cli) == ZERO
    data = ok(cli.json("metrics"))
    assert [w["file"] for w in data["warnings"]] == [str(cli.state_dir / COUNTERS_NAME)]


def test_an_unreadable_counters_file_starts_again_from_zero(cli: Cli) -> None:
    cli.state_dir.mkdir(parents=True, mode=0o750)
    path = cli.state_dir / COUNTERS_NAME
    path.write_text("{not json")
    assert "warnings" in ok(cli.json("metrics"))
    allocated(cli, "ns/p", "1g.10gb", "0")
    assert json.loads(path.read_text()) == {"version": 1, "counters": {"creations": 1}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "warnings" not in ok(cli.json("metrics"))


def test_counter_store_format_and_validation(tmp_path: Path) -> None:
    store = Counters(tmp_path / "state")
    assert store.load().values == {}
    store.bump("creations")
    store.bump("creations", n=2)
    store.bump("failures", "destroy")
    store.bump("failures", "allocate")
    values = store.load()
    assert (values.get("creations"), values.get("failures", "destroy")) == (3, 1)
    assert values.get("reuses") == 0 and values.problem is None
    assert json.loads(store.path.read_text()) == {
        "version": 1,
        "counters": {"creations": 3, "failures": {"allocate": 1, "destroy": 1}},
    }
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o750
    with pytest.raises(ValueError):
        store.bump("creations", "oops")  # labelled and unlabelled never mix
    with pytest.raises(ValueError):
        store.bump("failures", "")
    for bad in (
        b'{"version": 2, "counters": {}}',
        b'{"version": 1.0, "counters": {}}',
        b'{"version": 1, "counters": {"creations": -1}}',
        b'{"version": 1, "counters": {"creations": true}}',
        b'{"version": 1, "counters": {"failures": {"": 1}}}',
        b"[]",
    ):
        store.path.write_bytes(bad)
        assert store.load().problem is not None, bad
    # HAMi's record loader (hami-owned-* only) never sees the counters.
    records, problems = RecordStore(tmp_path / "state").load()
    assert (records, problems) == ({}, [])


# ---------------------------------------------------------------------------------------------
# the exposition and the textfile


def populate(cli: Cli) -> dict[str, str]:
    """GPU 0: an Active and an Idle instance; GPU 1: an Unmanaged pair and an orphan GI."""
    active = allocated(cli, "ns/a", "1g.10gb", "0")
    idle = allocated(cli, "ns/i", "2g.20gb", "4")
    ok(cli.json("release", "--pod", "ns/i"))
    unmanaged = sim(cli, "create", "--gpu", "1", "--profile", "3g.40gb", "--placement", "4")
    sim(cli, "create", "--gpu", "1", "--profile", "1g.10gb", "--placement", "0", "--no-ci")
    return {"Active": active, "Idle": idle, "Unmanaged": unmanaged["instance"]["migUUID"]}


def test_textfile_is_replaced_atomically_and_parses(cli: Cli, tmp_path: Path) -> None:
    migs = populate(cli)
    listed = ok(cli.json("list"))
    gpus = {g["index"]: g["uuid"] for g in listed["gpus"]}
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    target = textdir / "hamimig.prom"
    target.write_text("stale\n")
    target.chmod(0o600)
    old_umask = os.umask(0o077)
    try:
        ran = cli.json("--node", "node-1", "metrics", "--textfile", str(target))
    finally:
        os.umask(old_umask)
    data = ok(ran)
    assert data == {"kind": "Metrics", "path": str(target), "series": data["series"]}
    # Atomic replacement: only the file, no temp file left, 0644 whatever the umask.
    assert os.listdir(textdir) == ["hamimig.prom"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    text = target.read_text()
    families = parse(text)
    assert data["series"] == sum(len(s) for s in families.values())
    assert text.count("# TYPE ") == len(families) == len(FAMILIES)
    assert set(families) == FAMILIES

    # The info series: HAMi's labels (plus state), one per realized instance, value 1.
    info = families[INFO]
    assert all(set(s.labels) == HAMI_INFO_LABELS | {"state"} for s in info)
    assert all(s.value == 1 for s in info)
    by_state = {s.labels["state"]: s.labels for s in info}
    assert {state: labels["mig_uuid"] for state, labels in by_state.items()} == migs
    by_uuid = {i["migUUID"]: i for i in listed["instances"] if i["migUUID"]}
    for labels in by_state.values():
        inst = by_uuid[labels["mig_uuid"]]
        assert labels == {
            "node": "node-1",
            "device_uuid": inst["gpuUUID"],
            "device_index": str(inst["gpuIndex"]),
            "mig_uuid": inst["migUUID"],
            "profile": inst["profile"],
            "gpu_instance_id": str(inst["gpuInstanceID"]),
            "compute_instance_id": str(inst["computeInstanceID"]),
            "placement_start": str(inst["placement"]["start"]),
            "placement_size": str(inst["placement"]["size"]),
            "state": inst["state"],
        }

    # The gauge: every state for every GPU, zeros included, its GPU named as the info series does.
    assert all(list(s.labels) == [*GPU_LABELS, "state"] for s in families[GAUGE])
    gauge = {
        (s.labels["device_index"], s.labels["device_uuid"], s.labels["state"]): s.value
        for s in families[GAUGE]
    }
    nonzero = {
        ("0", gpus[0], "Active"): 1,
        ("0", gpus[0], "Idle"): 1,
        ("1", gpus[1], "Unmanaged"): 1,
        ("1", gpus[1], "OrphanGI"): 1,
    }
    assert gauge == {
        (str(i), gpus[i], state): nonzero.get((str(i), gpus[i], state), 0)
        for i in (0, 1)
        for state in STATES
    }
    assert families["hamimig_mig_creations"][0].value == 2

    # The table output says where it wrote; a second run replaces the file again.
    again = cli("metrics", "--textfile", str(target))
    assert again.exit_code == 0
    assert again.stdout.strip() == f"wrote {data['series']} series to {target}"
    assert os.listdir(textdir) == ["hamimig.prom"]


def test_a_failed_textfile_write_keeps_the_old_file(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "hamimig.prom"
    target.write_text("old\n")
    real_replace: Callable[..., None] = os.replace

    def failing_replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if str(dst).endswith(".prom"):
            raise OSError(errno.EIO, "Input/output error")
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing_replace)
    ran = cli.json("metrics", "--textfile", str(target))
    assert ran.exit_code == 4
    assert ran.json()["error"]["code"] == "hardware"
    assert target.read_text() == "old\n"
    assert os.listdir(out) == ["hamimig.prom"]


def test_textfile_usage_errors(cli: Cli, tmp_path: Path) -> None:
    missing = cli.json("metrics", "--textfile", str(tmp_path / "absent" / "hamimig.prom"))
    assert missing.exit_code == 2
    assert "does not exist" in missing.json()["error"]["message"]
    (tmp_path / "dir.prom").mkdir()
    assert cli.json("metrics", "--textfile", str(tmp_path / "dir.prom")).exit_code == 2


def test_stdout_and_json_without_textfile(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    table = cli("metrics")
    assert table.exit_code == 0 and table.stderr == ""
    data = ok(cli.json("metrics"))
    assert (data["kind"], data["path"]) == ("Metrics", None)
    assert data["text"] == table.stdout
    assert data["series"] == sum(len(s) for s in parse(data["text"]).values())


def test_every_series_names_its_node_and_its_gpu_in_hamis_words(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One vocabulary, so that hamimig's series join HAMi's (`on (node, device_uuid)`): `node`
    on every series, from --node, else NODE_NAME, else the hostname; a GPU is `device_uuid` and
    `device_index` wherever one is named."""
    populate(cli)
    monkeypatch.delenv("NODE_NAME", raising=False)
    for globals_, env, node in (
        (["--node", "gpu-node-7"], "from-env", "gpu-node-7"),
        ([], "from-env", "from-env"),
        ([], None, socket.gethostname()),
    ):
        if env is None:
            monkeypatch.delenv("NODE_NAME")
        else:
            monkeypatch.setenv("NODE_NAME", env)
        samples = [s for f in exposition(cli, *globals_).values() for s in f]
        assert {s.name for s in samples} >= {INFO, GAUGE, "hamimig_pending_intents"}
        for sample in samples:
            assert sample.labels["node"] == node, sample
            assert not {"gpu_uuid", "gpu_index"} & set(sample.labels), sample
            if "device_uuid" in sample.labels:
                assert list(sample.labels)[:3] == GPU_LABELS, sample
                assert sample.labels["device_uuid"].startswith("GPU-"), sample


def test_label_values_are_escaped(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    weird = 'node "quoted" \\ back\nslash'
    families = exposition(cli, "--node", weird)
    [info] = families[INFO]
    assert info.labels["node"] == weird
