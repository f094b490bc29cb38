"""What the stores say about their own files, and doctor asking them rather than knowing their
file names.

Rules:
- every store reads its files through one helper, so each says the same about an absent file
  (nothing), a symlink, a FIFO or a directory at its name (named, never followed or opened
  blocking), an unreadable file (an I/O problem) and bad content (a problem naming the field);
- a problem says which store and which of its files it concerns (what doctor names its check by);
- each store finds its own files whose mode differs from the one it writes;
- doctor's modules import no store's file names, prefixes, modes or raw file helpers.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hamimig.store.cdi import CdiStore, spec_file_name
from hamimig.store.counters import COUNTERS_NAME, Counters
from hamimig.store.files import Problem, StoreFiles, read_entry
from hamimig.store.intents import IntentStore
from hamimig.store.lock import LOCK_NAME, NodeLock
from hamimig.store.queue import QUEUE_NAME, RemovalQueue
from hamimig.store.records import RecordStore, record_name
from tests.support.cli import Cli

MIG = "MIG-11111111-2222-3333-4444-555555555555"
INTENT = "intent-0123456789abcdef0123456789abcdef.json"


def _stores(directory: Path) -> list[StoreFiles]:
    return [RecordStore(directory), IntentStore(directory), RemovalQueue(directory)]


# ---------------------------------------------------------------------------------------------
# read_entry: one way to read our files


def test_an_absent_file_is_nothing_to_report(tmp_path: Path) -> None:
    assert read_entry(tmp_path, "gone.json", bytes) is None


def test_content_is_decoded(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_bytes(b"abc")
    assert read_entry(tmp_path, "f.json", lambda data: data.upper()) == b"ABC"


@pytest.mark.parametrize(
    ("plant", "reason"),
    [
        (lambda p: p.symlink_to("/etc/passwd"), "is a symbolic link (not followed)"),
        (os.mkfifo, "is a FIFO, not a regular file"),
        (lambda p: p.mkdir(), "is a directory, not a regular file"),
    ],
)
def test_what_is_not_a_regular_file_is_named_not_opened(
    tmp_path: Path, plant: Callable[[Path], object], reason: str
) -> None:
    plant(tmp_path / "f.json")
    found = read_entry(tmp_path, "f.json", bytes)
    assert found == Problem(str(tmp_path / "f.json"), reason)
    assert isinstance(found, Problem) and not found.io


def test_bad_content_is_a_problem_with_the_decoders_reason(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_bytes(b"{")

    def decode(data: bytes) -> object:
        raise ValueError("record is not valid JSON: boom")

    found = read_entry(tmp_path, "f.json", decode)
    assert isinstance(found, Problem)
    assert (found.reason, found.io) == ("record is not valid JSON: boom", False)


def test_an_unreadable_file_is_an_io_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f.json").write_bytes(b"{}")

    def failing_read(fd: int, n: int) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "read", failing_read)  # a disk error: root cannot read it either
    found = read_entry(tmp_path, "f.json", bytes)
    monkeypatch.undo()
    assert isinstance(found, Problem) and found.io
    assert found.reason == f"cannot read: {os.strerror(errno.EIO)}"


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    with open(tmp_path / "f.json", "wb") as f:
        f.truncate(5 * 1024 * 1024)
    found = read_entry(tmp_path, "f.json", bytes)
    assert isinstance(found, Problem)
    assert "larger than any hamimig file" in found.reason


# ---------------------------------------------------------------------------------------------
# Every store says which store and which file a problem concerns


def test_each_store_names_its_problems(tmp_path: Path) -> None:
    record = record_name(MIG)
    for name in (record, INTENT, QUEUE_NAME, COUNTERS_NAME):
        (tmp_path / name).write_bytes(b"not json")
    _, [rp] = RecordStore(tmp_path).load()
    _, [ip] = IntentStore(tmp_path).load()
    _, [qp] = RemovalQueue(tmp_path).load()
    cp = Counters(tmp_path).load().problem
    assert cp is not None
    found = {(p.store, p.subject) for p in (rp, ip, qp, cp)}
    assert found == {
        ("record", record.removeprefix("hami-owned-").removesuffix(".json")),
        ("intent", "0123456789abcdef0123456789abcdef"),
        ("cdi-removal-queue", ""),
        ("counters", ""),
    }
    assert rp.file == str(tmp_path / record) and "not valid JSON" in rp.reason


def test_the_record_store_reads_one_record_on_its_own(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    assert store.read_one(MIG) is None
    (tmp_path / record_name(MIG)).symlink_to("/etc/passwd")
    found = store.read_one(MIG)
    assert isinstance(found, Problem)
    assert (found.store, found.reason) == ("record", "is a symbolic link (not followed)")


def test_the_cdi_store_says_why_a_runtime_would_reject_a_spec(tmp_path: Path) -> None:
    cdi = CdiStore(tmp_path)
    name = spec_file_name(MIG)
    assert cdi.inspect(name) is None
    (tmp_path / name).write_text("{")
    bad_json = cdi.inspect(name)
    assert isinstance(bad_json, Problem) and bad_json.reason.startswith("spec is not valid JSON")
    (tmp_path / name).write_text(json.dumps({"cdiVersion": "0.5.0", "kind": "a.b/c"}))
    rejected = cdi.inspect(name)
    assert isinstance(rejected, Problem)
    assert rejected.reason.startswith("runtimes reject it: ")
    assert (rejected.store, rejected.subject) == ("cdi-spec", cdi.subject(name))
    assert cdi.subject(name).startswith("mig-") and len(cdi.subject(name)) == 4 + 64


# ---------------------------------------------------------------------------------------------
# Modes


def test_each_store_finds_its_own_files_with_another_mode(tmp_path: Path) -> None:
    names = {record_name(MIG): "record", INTENT: "intent", QUEUE_NAME: "cdi-removal-queue"}
    for name in (*names, COUNTERS_NAME, "unrelated.json", LOCK_NAME):
        (tmp_path / name).write_bytes(b"{}")
        (tmp_path / name).chmod(0o644)
    found = [f for s in [*_stores(tmp_path), Counters(tmp_path)] for f in s.inspect_modes()]
    assert sorted((f.path.name, f.store, f.mode, f.expected) for f in found) == sorted(
        [(n, store, 0o644, 0o600) for n, store in names.items()]
        + [(COUNTERS_NAME, "counters", 0o644, 0o600)]
    )
    assert not any(f.writable_by_others for f in found)
    (tmp_path / INTENT).chmod(0o666)
    (bad,) = IntentStore(tmp_path).inspect_modes()
    assert bad.writable_by_others


def test_a_store_skips_what_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / QUEUE_NAME).symlink_to("/etc/passwd")
    assert RemovalQueue(tmp_path).inspect_modes() == []
    assert RemovalQueue(tmp_path / "absent").inspect_modes() == []


def test_the_lock_says_what_is_wrong_with_its_file(tmp_path: Path) -> None:
    lock = NodeLock(tmp_path)
    assert lock.inspect() is None
    (tmp_path / LOCK_NAME).mkdir()
    assert lock.inspect() == "is a directory, not a regular file"


# ---------------------------------------------------------------------------------------------
# Doctor asks the stores


def _checks(cli: Cli) -> tuple[int, dict[str, dict[str, Any]]]:
    ran = cli.json("doctor")
    return ran.exit_code, {c["name"]: c for c in ran.json()["checks"]}


def _allocated(cli: Cli, pod: str = "ns/a") -> str:
    ran = cli.json("allocate", "--pod", pod, "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 0, ran.stdout
    mig: str = ran.json()["instance"]["migUUID"]
    return mig


def test_doctor_only_warns_on_the_counters_file_being_writable_by_others(cli: Cli) -> None:
    """Others could skew the metrics through it, not take an instance: not a failure."""
    _allocated(cli)
    (cli.state_dir / COUNTERS_NAME).chmod(0o666)
    code, checks = _checks(cli)
    check = checks["file-mode/counters"]
    assert (code, check["status"]) == (0, "warn")
    assert check["hint"] == f"chmod 0600 {cli.state_dir / COUNTERS_NAME}"
    (cli.state_dir / record_name(next(iter(_live_records(cli))))).chmod(0o666)
    code, checks = _checks(cli)  # a record others could forge is a failure
    assert code == 5
    assert [c["status"] for n, c in checks.items() if n.startswith("file-mode/mig-")] == ["fail"]


def _live_records(cli: Cli) -> list[str]:
    return [i["migUUID"] for i in cli.json("list").json()["instances"]]


def test_doctor_reports_the_counters(cli: Cli) -> None:
    _allocated(cli)
    code, checks = _checks(cli)
    assert (code, checks["counters"]["status"]) == (0, "ok")
    assert checks["counters"]["message"] == "1 lifecycle event(s) counted"
    (cli.state_dir / COUNTERS_NAME).write_text("{")
    code, checks = _checks(cli)
    assert (code, checks["counters"]["status"]) == (0, "warn")
    assert "metrics report zeros" in checks["counters"]["message"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("null", "runtimes reject it: spec is not a JSON object"),
        ("[1, 2]", "runtimes reject it: spec is not a JSON object"),
        ("[" * 200_000, "spec is nested too deeply"),
    ],
)
def test_a_spec_that_is_no_json_object_fails_doctor_and_recover_repairs_it(
    cli: Cli, content: str, reason: str
) -> None:
    mig = _allocated(cli)
    spec = cli.cdi_dir / spec_file_name(mig)
    spec.write_text(content)
    code, checks = _checks(cli)
    check = next(c for n, c in checks.items() if n.startswith("cdi-spec/"))
    assert (code, check["status"]) == (5, "fail")
    assert check["message"] == f"{spec}: {reason}"
    assert "cdi-specs" not in checks  # the one spec there is the bad one
    ran = cli.json("recover", "--pods", _no_pods(cli))
    assert ran.exit_code == 0, ran.stdout
    assert json.loads(spec.read_text())["devices"]


def _no_pods(cli: Cli) -> str:
    path = cli.state_dir.parent / "pods.json"
    path.write_text(json.dumps({"kind": "PodList", "apiVersion": "v1", "items": []}))
    return str(path)


def test_files_whose_names_hold_nothing_are_named_whole(cli: Cli) -> None:
    _allocated(cli)
    for name in ("hami-owned-.json", "intent-.json", "intent-bad.id.json"):
        (cli.state_dir / name).write_text("x")
        (cli.state_dir / name).chmod(0o600)
    code, checks = _checks(cli)
    assert code == 5
    failing = sorted(n for n, c in checks.items() if c["status"] == "fail")
    assert failing == [
        "intent/intent-.json",
        "intent/intent-bad.id.json",
        "record/hami-owned-.json",
    ]
    assert "records" not in checks  # the unusable record speaks for the records
    refusal = cli.json("allocate", "--pod", "ns/b", "--gpu", "0", "--profile", "1g.10gb")
    assert refusal.exit_code == 5
    for name in ("intent-.json", "intent-bad.id.json"):  # what doctor names, forget takes
        forgot = cli.json("forget", "--intent", name)
        assert forgot.exit_code == 0, forgot.stdout
        assert not (cli.state_dir / name).exists()
    assert cli.json("forget", "--intent", "../intent-x.json").exit_code == 2
    assert cli.json("forget", "--intent", "hami-owned-.json").exit_code == 2  # not an intent


def test_an_unusable_lock_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = NodeLock(tmp_path)
    (tmp_path / LOCK_NAME).write_text("")
    assert lock.inspect() is None
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: False if str(p).endswith(LOCK_NAME) else real_access(p, m)
    )
    assert lock.inspect() == f"is not readable and writable by uid {os.getuid()}"


def test_a_gpu_instance_that_cannot_be_read_back_counts_as_a_failed_allocation(cli: Cli) -> None:
    ran = cli.json("sim", "fault", "add", "--op", "nvmlGpuInstanceGetInfo", "--error", "UNKNOWN")
    assert ran.exit_code == 0, ran.stdout
    failed = cli.json("allocate", "--pod", "ns/a", "--gpu", "0", "--profile", "1g.10gb")
    assert failed.exit_code == 4, failed.stdout
    assert Counters(cli.state_dir).load().get("failures", "allocate") == 1
    assert cli.json("list").json()["instances"] == []  # rolled back


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "oversized"])
def test_a_config_that_is_no_regular_file_is_refused_not_read(tmp_path: Path, kind: str) -> None:
    config = tmp_path / "config.yaml"
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "dev-zero":
        config.symlink_to("/dev/zero")
    elif kind == "oversized":
        config.write_text("# " + "x" * (5 * 1024 * 1024) + "\n")
    else:
        config.mkdir()
    ran = subprocess.run(
        [sys.executable, "-m", "hamimig", "--config", str(config), "-o", "json", "config", "show"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2, ran.stdout
    message = json.loads(ran.stdout)["error"]["message"]
    assert message.startswith(f"cannot read config {config}: ")


def test_a_config_behind_a_symlink_is_read(tmp_path: Path) -> None:
    """A ConfigMap mount is a chain of symlinks."""
    (tmp_path / "real.yaml").write_text("cdi:\n  enabled: false\n")
    (tmp_path / "config.yaml").symlink_to(tmp_path / "real.yaml")
    config = str(tmp_path / "config.yaml")
    ran = subprocess.run(
        [sys.executable, "-m", "hamimig", "--config", config, "-o", "json", "config", "show"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert "false" in ran.stdout.lower()


_STORE_INTERNALS = {
    "describe_entry",
    "read_regular",
    "read_entry",
    "list_names",
    "LOADER_PREFIX",
    "RECORD_PREFIX",
    "RECORD_SUFFIX",
    "RECORD_MODE",
    "INTENT_PREFIX",
    "INTENT_SUFFIX",
    "QUEUE_NAME",
    "COUNTERS_NAME",
    "LOCK_NAME",
    "SPEC_PREFIX",
    "SPEC_SUFFIX",
    "SPEC_MODE",
}


def test_doctor_imports_no_store_internals() -> None:
    package = Path(__file__).parent.parent / "hamimig" / "reports" / "doctor"
    modules = sorted(package.glob("*.py"))
    assert len(modules) >= 5
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hamimig.store"):
                leaked = {a.name for a in node.names} & _STORE_INTERNALS
                assert not leaked, f"{module.name} imports {sorted(leaked)} from {node.module}"
