"""Durable files Go would refuse are refused; doctor flags a lock path that is not a file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hamimig.store.intents import IntentStore, intent_file_name
from hamimig.store.lock import LOCK_NAME
from hamimig.store.queue import QUEUE_NAME, RemovalQueue
from tests.support.cli import Cli
from tests.support.records import MIG, an_intent

CONSTANTS = ["NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("constant", CONSTANTS)
def test_non_json_numbers_make_an_intent_unreadable(tmp_path: Path, constant: str) -> None:
    intent = an_intent()
    doc = dict(intent.to_json(), gpuIndex="__c__")
    name = intent_file_name(intent.id)
    (tmp_path / name).write_text(json.dumps(doc).replace('"__c__"', constant))
    intents, problems = IntentStore(tmp_path).load()
    assert intents == []
    assert [Path(p.file).name for p in problems] == [name]
    assert f"it contains {constant}, which JSON does not allow" in problems[0].reason


@pytest.mark.parametrize("constant", CONSTANTS)
def test_non_json_numbers_make_the_queue_unreadable(tmp_path: Path, constant: str) -> None:
    queue = RemovalQueue(tmp_path)
    queue.add(MIG, "EIO", "t1")
    doc = json.loads((tmp_path / QUEUE_NAME).read_text())
    doc["removals"][0]["attempts"] = "__c__"
    (tmp_path / QUEUE_NAME).write_text(json.dumps(doc).replace('"__c__"', constant))
    removals, problems = queue.load()
    assert removals == []
    assert len(problems) == 1
    assert f"it contains {constant}, which JSON does not allow" in problems[0].reason


def doctor(cli: Cli) -> tuple[int, dict[str, Any]]:
    ran = cli.json("doctor")
    data: dict[str, Any] = ran.json()
    return ran.exit_code, data


def failing(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in data["checks"] if c["status"] == "fail"}


def healthy(cli: Cli) -> None:
    ran = cli.json("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 0, ran.stdout
    assert doctor(cli)[0] == 0


@pytest.mark.parametrize(
    ("plant", "what"),
    [
        (lambda p, tmp: p.mkdir(), "is a directory"),
        (lambda p, tmp: p.symlink_to(tmp / "elsewhere"), "is a symbolic link"),
        (lambda p, tmp: os.mkfifo(p), "is a FIFO"),
    ],
)
def test_doctor_fails_a_lock_path_that_is_not_a_file(
    cli: Cli, tmp_path: Path, plant: Any, what: str
) -> None:
    healthy(cli)
    lock = cli.state_dir / LOCK_NAME
    if lock.exists():
        lock.unlink()
    plant(lock, tmp_path)
    status, data = doctor(cli)
    assert status == 5
    assert list(failing(data)) == ["state-dir/lock"]
    check = failing(data)["state-dir/lock"]
    assert check["message"].startswith(f"the node lock {lock} {what}")
    assert check["hint"] == f"remove {lock} (hamimig creates the lock file itself)"


def test_mutating_commands_refuse_a_lock_path_that_is_a_directory(cli: Cli) -> None:
    healthy(cli)
    lock = cli.state_dir / LOCK_NAME
    lock.unlink()
    lock.mkdir()
    ran = cli("release", "--pod", "ns/p")
    assert ran.exit_code == 2
    assert ran.stderr.strip() == f"hamimig: error: lock file {lock} is a directory"
