"""The intent journal and the CDI removal queue: round trips, ordering, corrupt files."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from hamimig.errors import UnverifiableError
from hamimig.store._fields import validated
from hamimig.store.intents import Intent, IntentStore
from hamimig.store.queue import QueuedRemoval, RemovalQueue
from hamimig.store.records import RecordStore
from tests.support.records import MIG, MIG2, an_intent

# --------------------------------------------------------------------------------------------
# Intents


def test_intent_json_round_trip_and_keys() -> None:
    intent = an_intent(gpu_instance_id=5, compute_instance_id=0, mig_uuid=MIG)
    doc = intent.to_json()
    assert doc["version"] == 1
    assert set(doc) == {
        "version",
        "id",
        "op",
        "gpuUUID",
        "gpuIndex",
        "profile",
        "profileID",
        "placement",
        "owner",
        "createdAt",
        "gpuInstanceID",
        "computeInstanceID",
        "migUUID",
    }
    assert validated(Intent, json.loads(json.dumps(doc))) == intent
    bare = an_intent(owner=None)
    assert validated(Intent, bare.to_json()) == bare


def test_intent_store_round_trip_order_and_mode(tmp_path: Path) -> None:
    store = IntentStore(tmp_path / "state")
    later = an_intent("2024-05-02T00:00:00Z")
    earlier = an_intent("2024-05-01T00:00:00Z")
    store.write(later)
    store.write(earlier)
    updated = dataclasses.replace(earlier, gpu_instance_id=5)
    store.write(updated)
    intents, problems = store.load()
    assert problems == []
    assert intents == [updated, later]
    path = store.path_of(earlier.id)
    assert path.name == f"intent-{earlier.id}.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    store.remove(earlier.id)
    store.remove(earlier.id)
    assert store.load() == ([later], [])


def test_intents_are_invisible_to_the_record_loader(tmp_path: Path) -> None:
    IntentStore(tmp_path).write(an_intent())
    assert RecordStore(tmp_path).load() == ({}, [])


def test_corrupt_symlinked_and_misnamed_intents_are_problems(tmp_path: Path) -> None:
    good = an_intent()
    store = IntentStore(tmp_path)
    store.write(good)
    (tmp_path / "intent-corrupt.json").write_text("{")
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(an_intent().to_json()))
    (tmp_path / "intent-link.json").symlink_to(target)
    other = an_intent()
    (tmp_path / "intent-misnamed.json").write_text(json.dumps(other.to_json()))
    newer = dict(an_intent().to_json(), version=2)
    (tmp_path / f"intent-{newer['id']}.json").write_text(json.dumps(newer))
    floating = dict(an_intent().to_json(), version=1.0)  # Go's decoder refuses 1.0 for an int
    (tmp_path / f"intent-{floating['id']}.json").write_text(json.dumps(floating))
    intents, problems = store.load()
    assert intents == [good]
    reasons = {Path(p.file).name: p.reason for p in problems}
    assert set(reasons) == {
        "intent-corrupt.json",
        "intent-link.json",
        "intent-misnamed.json",
        f"intent-{newer['id']}.json",
        f"intent-{floating['id']}.json",
    }
    assert "symbolic link" in reasons["intent-link.json"]
    assert "does not match" in reasons["intent-misnamed.json"]
    assert "version" in reasons[f"intent-{newer['id']}.json"]
    assert "version 1.0" in reasons[f"intent-{floating['id']}.json"]


def test_intent_ids_cannot_escape_the_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        IntentStore(tmp_path).path_of("../x")
    with pytest.raises(ValueError):
        IntentStore(tmp_path).write(an_intent(id="a/b"))


def test_missing_state_directory_means_no_intents(tmp_path: Path) -> None:
    assert IntentStore(tmp_path / "absent").load() == ([], [])


# --------------------------------------------------------------------------------------------
# Removal queue


def test_queue_add_increments_and_drop(tmp_path: Path) -> None:
    queue = RemovalQueue(tmp_path / "state")
    assert queue.load() == ([], [])
    queue.add(MIG, "EIO", "t1")
    queue.add(MIG2, "EACCES", "t2")
    queue.add(MIG, "ENOSPC", "t3")
    removals, problems = queue.load()
    assert problems == []
    assert removals == [
        QueuedRemoval(MIG, since="t1", attempts=2, last_error="ENOSPC"),
        QueuedRemoval(MIG2, since="t2", attempts=1, last_error="EACCES"),
    ]
    path = tmp_path / "state" / "cdi-removal-queue.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text())["version"] == 1
    queue.drop(MIG)
    assert queue.load()[0] == [QueuedRemoval(MIG2, "t2", 1, "EACCES")]
    queue.drop(MIG2)
    assert queue.load() == ([], [])


def test_dropping_an_unqueued_uuid_writes_nothing(tmp_path: Path) -> None:
    RemovalQueue(tmp_path / "state").drop(MIG)
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    "content",
    [
        "{",
        "[]",
        '{"version": 2, "removals": []}',
        '{"version": 1.0, "removals": []}',
        '{"version": 1, "removals": {}}',
        '{"version": 1, "removals": [{"migUUID": "MIG-x", "since": "t", "attempts": -1}]}',
    ],
)
def test_corrupt_queue_is_a_problem_and_is_never_overwritten(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cdi-removal-queue.json"
    path.write_text(content)
    queue = RemovalQueue(tmp_path)
    removals, problems = queue.load()
    assert removals == []
    assert [p.file for p in problems] == [str(path)]
    with pytest.raises(UnverifiableError):
        queue.add(MIG, "EIO", "t")
    assert path.read_text() == content


def test_symlinked_queue_is_a_problem(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text('{"version": 1, "removals": []}')
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "cdi-removal-queue.json").symlink_to(target)
    removals, problems = RemovalQueue(tmp_path / "state").load()
    assert removals == []
    assert "symbolic link" in problems[0].reason


def test_a_refused_queue_names_its_first_wrong_field_in_these_words(tmp_path: Path) -> None:
    """As the loader always checked a queued removal: its `lastError` first, then the rest."""
    removal = {"migUUID": 5, "since": "t", "attempts": 1, "lastError": 7}
    doc = {"version": 1, "removals": [removal]}
    tmp_path.joinpath("cdi-removal-queue.json").write_text(json.dumps(doc))
    assert [p.reason for p in RemovalQueue(tmp_path).load()[1]] == ["lastError must be a string"]
    removal["lastError"] = "e"
    tmp_path.joinpath("cdi-removal-queue.json").write_text(json.dumps(doc))
    reasons = [p.reason for p in RemovalQueue(tmp_path).load()[1]]
    assert reasons == ["migUUID must be a non-empty string"]
