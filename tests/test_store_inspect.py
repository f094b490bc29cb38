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
from collections.abc import Callable
from pathlib import Path

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


def test_doctor_checks_the_counters_file_mode_too(cli: Cli) -> None:
    ran = cli.json("allocate", "--pod", "ns/a", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 0, ran.stdout
    (cli.state_dir / COUNTERS_NAME).chmod(0o666)
    data = cli.json("doctor").json()
    check = next(c for c in data["checks"] if c["name"] == "file-mode/counters")
    assert check["status"] == "fail"
    assert check["hint"] == f"chmod 0600 {cli.state_dir / COUNTERS_NAME}"


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
