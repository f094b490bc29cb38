"""Ownership records: HAMi's v1 format and loader rules, plus hamimig's `"hamimig"` key.

Expected field names and rules are written out from docs/formats.md "Ownership records" (HAMi's
format and loader), not derived from the implementation, so a drift from what HAMi reads fails
here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from hamimig.hw.types import Placement
from hamimig.store._fields import validated
from hamimig.store.records import (
    SCHEMA_VERSION,
    Owner,
    Record,
    RecordError,
    RecordStore,
    decode_record,
    encode_record,
    record_name,
)
from hamimig.vocabulary import State
from tests.support.records import GPU, MIG, MIG2


def hami_doc(mig_uuid: str = MIG, **changes: Any) -> dict[str, Any]:
    """A record exactly as HAMi writes it (docs/formats.md "Ownership records")."""
    doc: dict[str, Any] = {
        "version": 1,
        "migUUID": mig_uuid,
        "parentGPUUUID": GPU,
        "profile": "1g.10gb",
        "placement": {"start": 2, "size": 1},
        "gpuInstanceID": 9,
        "computeInstanceID": 0,
    }
    doc.update(changes)
    return doc


def write_raw(directory: Path, name: str, doc: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def full_record(**changes: Any) -> Record:
    record = Record(
        mig_uuid=MIG,
        gpu_uuid=GPU,
        profile="1g.10gb",
        placement=Placement(2, 1),
        gpu_instance_id=9,
        compute_instance_id=0,
        state=State.ACTIVE,
        owner=Owner("ns", "pod", "uid-1", 1, 2),
        cdi_device="k8s.device-plugin.nvidia.com/dynamic-mig=mig-x",
        error=None,
        created_at="2024-05-01T10:00:00Z",
        updated_at="2024-05-01T10:00:01Z",
        gpu_index=3,
    )
    return dataclasses.replace(record, **changes)


def test_record_name_is_hamis() -> None:
    digest = hashlib.sha256(MIG.encode()).hexdigest()
    assert record_name(MIG) == f"hami-owned-mig-{digest}.json"


def test_round_trip() -> None:
    for record in (
        full_record(),
        full_record(state=State.IDLE, owner=None, cdi_device=None),
        full_record(state=State.ERROR, owner=None, error="NVML IN_USE"),
        full_record(state=State.RECLAIMING, owner=Owner("a", "b")),
        full_record(gpu_index=None),
    ):
        assert decode_record(record_name(MIG), encode_record(record)) == record


def test_encoded_fields_are_exactly_hamis_plus_one_key() -> None:
    data = encode_record(full_record())
    assert data.endswith(b"\n")
    doc = json.loads(data)
    assert list(doc) == [
        "version",
        "migUUID",
        "parentGPUUUID",
        "profile",
        "placement",
        "gpuInstanceID",
        "computeInstanceID",
        "hamimig",
    ]
    assert {k: v for k, v in doc.items() if k != "hamimig"} == hami_doc()
    assert doc["hamimig"] == {
        "schemaVersion": SCHEMA_VERSION,
        "state": "Active",
        "owner": {
            "namespace": "ns",
            "name": "pod",
            "uid": "uid-1",
            "containerIndex": 1,
            "deviceIndex": 2,
        },
        "cdiDevice": "k8s.device-plugin.nvidia.com/dynamic-mig=mig-x",
        "error": None,
        "createdAt": "2024-05-01T10:00:00Z",
        "updatedAt": "2024-05-01T10:00:01Z",
        "gpuIndex": 3,
    }


def test_a_record_written_by_hami_loads_as_unmanaged_idle(tmp_path: Path) -> None:
    write_raw(tmp_path, record_name(MIG), hami_doc(someFutureHamiField=True))
    records, problems = RecordStore(tmp_path).load()
    assert problems == []
    record = records[MIG]
    assert record.state is State.IDLE
    assert record.managed is False
    assert record.owner is None
    assert (record.gpu_uuid, record.profile, record.placement) == (GPU, "1g.10gb", Placement(2, 1))
    assert (record.gpu_instance_id, record.compute_instance_id) == (9, 0)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"version": 2}, "version"),
        ({"version": 0}, "version"),
        ({"version": True}, "version"),
        ({"version": 1.0}, "version"),
        ({"migUUID": "GPU-not-a-mig"}, "MIG-"),
        ({"migUUID": 5}, "MIG-"),
        ({"parentGPUUUID": ""}, "parentGPUUUID"),
        ({"profile": ""}, "profile"),
        ({"placement": {"start": 0, "size": 0}}, "size"),
        ({"placement": {"start": -1, "size": 1}}, "start"),
        ({"placement": None}, "placement"),
        ({"gpuInstanceID": -1}, "gpuInstanceID"),
        ({"gpuInstanceID": 1.5}, "gpuInstanceID"),
        ({"computeInstanceID": "0"}, "computeInstanceID"),
        ({"hamimig": None}, "hamimig"),
        ({"hamimig": {"schemaVersion": 1, "state": "Creating"}}, "state"),
        ({"hamimig": {"schemaVersion": 1, "state": "Idle", "owner": "x"}}, "owner"),
        ({"hamimig": {"schemaVersion": 1, "state": "Idle", "error": 5}}, "error"),
        ({"hamimig": {"state": "Idle"}}, "schemaVersion"),
    ],
)
def test_invalid_records_are_rejected(changes: dict[str, Any], reason: str) -> None:
    doc = hami_doc(**changes)
    with pytest.raises(RecordError, match=reason):
        decode_record(record_name(MIG), json.dumps(doc).encode())


def test_missing_field_is_rejected() -> None:
    doc = hami_doc()
    del doc["computeInstanceID"]
    with pytest.raises(RecordError, match="computeInstanceID"):
        decode_record(record_name(MIG), json.dumps(doc).encode())


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1]", b"\xff\xfe"])
def test_undecodable_records_are_rejected(raw: bytes) -> None:
    with pytest.raises(RecordError):
        decode_record(record_name(MIG), raw)


def test_filename_must_match_the_uuid(tmp_path: Path) -> None:
    write_raw(tmp_path, record_name(MIG2), hami_doc(MIG))
    records, problems = RecordStore(tmp_path).load()
    assert records == {}
    assert [p.file for p in problems] == [str(tmp_path / record_name(MIG2))]
    assert "does not match" in problems[0].reason


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    doc = hami_doc(hamimig={"schemaVersion": SCHEMA_VERSION + 1, "state": "Idle"})
    write_raw(tmp_path, record_name(MIG), doc)
    records, problems = RecordStore(tmp_path).load()
    assert records == {}
    assert len(problems) == 1
    assert f"written by a newer hamimig (schema {SCHEMA_VERSION + 1})" in problems[0].reason


def test_duplicates_are_both_rejected(tmp_path: Path) -> None:
    good = write_raw(tmp_path, record_name(MIG), hami_doc(MIG))
    other = write_raw(tmp_path, "hami-owned-mig-copy.json", hami_doc(MIG))
    records, problems = RecordStore(tmp_path).load()
    assert records == {}
    assert sorted(p.file for p in problems) == sorted([str(good), str(other)])
    assert all("duplicate" in p.reason for p in problems)


def test_one_bad_record_does_not_hide_the_others(tmp_path: Path) -> None:
    write_raw(tmp_path, record_name(MIG), hami_doc(MIG))
    write_raw(tmp_path, record_name(MIG2), "{truncated")
    records, problems = RecordStore(tmp_path).load()
    assert list(records) == [MIG]
    assert [p.file for p in problems] == [str(tmp_path / record_name(MIG2))]


def test_symlinked_record_is_a_problem_and_its_target_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    target = tmp_path / "target.json"
    target.write_text(json.dumps(hami_doc(MIG)))  # a valid record: following the link would load it
    (state / record_name(MIG)).symlink_to(target)
    opened: list[str] = []
    real_open = os.open

    def spy(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    records, problems = RecordStore(state).load()
    monkeypatch.undo()
    assert records == {}
    assert len(problems) == 1
    assert problems[0].file == str(state / record_name(MIG))
    assert "symbolic link" in problems[0].reason
    assert str(state) in opened  # the spy saw the loader's opens
    assert not any(p.endswith((record_name(MIG), "target.json")) for p in opened), opened


def test_directory_and_fifo_entries_are_problems(tmp_path: Path) -> None:
    tmp_path.joinpath(record_name(MIG)).mkdir()
    os.mkfifo(tmp_path / record_name(MIG2))  # must not hang the loader
    records, problems = RecordStore(tmp_path).load()
    assert records == {}
    reasons = {Path(p.file).name: p.reason for p in problems}
    assert "directory" in reasons[record_name(MIG)]
    assert "FIFO" in reasons[record_name(MIG2)]


def test_unrelated_files_are_ignored(tmp_path: Path) -> None:
    write_raw(tmp_path, "intent-x.json", "garbage")
    write_raw(tmp_path, ".hamimig-tmp-hami-owned-mig-abc.json-123", "garbage")
    write_raw(tmp_path, "cdi-removal-queue.json", "garbage")
    write_raw(tmp_path, "hami-owned-mig-x.yaml", "garbage")
    (tmp_path / "hamimig.lock").write_bytes(b"")
    assert RecordStore(tmp_path).load() == ({}, [])


def test_missing_directory_means_no_records(tmp_path: Path) -> None:
    assert RecordStore(tmp_path / "absent").load() == ({}, [])


def test_write_modes_and_no_leftovers(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        state = tmp_path / "run" / "state"
        store = RecordStore(state)
        store.write(full_record())
        store.write(full_record(state=State.IDLE, owner=None))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o750
    assert stat.S_IMODE(os.stat(store.path_of(MIG)).st_mode) == 0o600
    assert os.listdir(state) == [record_name(MIG)]
    records, problems = store.load()
    assert problems == []
    assert records[MIG].state is State.IDLE


def test_remove_is_idempotent(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    store.write(full_record())
    store.remove(MIG)
    store.remove(MIG)
    assert os.listdir(tmp_path) == []


def test_encode_refuses_what_hami_would_not_load() -> None:
    with pytest.raises(RecordError):
        encode_record(full_record(mig_uuid="not-a-mig-uuid"))
    with pytest.raises(RecordError):
        encode_record(full_record(placement=Placement(0, 0)))


def test_owner_from_json_validates() -> None:
    assert validated(Owner, {"namespace": "a", "name": "b"}) == Owner("a", "b")
    bad: Any
    for bad in (
        {"namespace": "", "name": "b"},
        {"namespace": "a", "name": "b", "containerIndex": -1},
        {"namespace": "a", "name": "b", "deviceIndex": "0"},
        {"namespace": "a", "name": "b", "uid": 3},
        [],
    ):
        with pytest.raises(ValueError):
            validated(Owner, bad)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("where", ["top", "hamimig", "unknown key"])
def test_non_json_numbers_make_a_record_unreadable(
    tmp_path: Path, constant: str, where: str
) -> None:
    """Python reads NaN and Infinity; HAMi's Go decoder refuses the whole file, so must we."""
    doc = hami_doc(MIG, hamimig={"schemaVersion": SCHEMA_VERSION, "state": "Idle"})
    marker = '"__constant__"'
    if where == "top":
        doc["gpuInstanceID"] = "__constant__"
    elif where == "hamimig":
        doc["hamimig"]["gpuIndex"] = "__constant__"
    else:
        doc["extra"] = {"deep": ["__constant__"]}
    write_raw(tmp_path, record_name(MIG), json.dumps(doc).replace(marker, constant))
    good = write_raw(tmp_path, record_name(MIG2), hami_doc(MIG2))
    records, problems = RecordStore(tmp_path).load()
    assert list(records) == [MIG2] and good.exists()
    assert [p.file for p in problems] == [str(tmp_path / record_name(MIG))]
    assert problems[0].reason == (
        f"record is not valid JSON: it contains {constant}, which JSON does not allow"
    )


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"gpuInstanceID": True}, "gpuInstanceID must be an integer"),
        ({"gpuInstanceID": 1.0}, "gpuInstanceID must be an integer"),
        ({"gpuInstanceID": "1"}, "gpuInstanceID must be an integer"),
        ({"gpuInstanceID": None}, "gpuInstanceID must be an integer"),
        ({"computeInstanceID": -1}, "computeInstanceID must not be negative"),
        ({"profile": None}, "profile must be a non-empty string"),
        ({"placement": {"size": 1}}, "placement.start must be an integer"),
        ({"placement": {"start": 0, "size": 0}}, "placement.size must be greater than 0"),
        (
            {"migUUID": "MIG-x"},
            "migUUID 'MIG-x' is not a MIG UUID (MIG-<uuid>, or MIG-GPU-<uuid>/<gi>/<ci>)",
        ),
        ({"hamimig": []}, "the 'hamimig' key must be an object"),
        ({"hamimig": {"schemaVersion": 1}}, "hamimig.state None is not one of"),
        (
            {"gpuInstanceID": -1, "hamimig": {"schemaVersion": 2, "state": "New"}},
            "gpuInstanceID must not be negative",
        ),
        (
            {"hamimig": {"schemaVersion": 2, "state": "New"}},
            "written by a newer hamimig (schema 2); this hamimig reads schema 1: upgrade hamimig",
        ),
        (
            {"hamimig": {"schemaVersion": 1, "state": "Idle", "owner": {"namespace": "A"}}},
            "owner.namespace 'A' is not a Kubernetes namespace",
        ),
        (
            {"hamimig": {"schemaVersion": 1, "state": "Idle", "owner": {"namespace": "a"}}},
            "owner.name must be a non-empty string",
        ),
        (
            {"hamimig": {"schemaVersion": 1, "state": "Idle", "lastOwner": 5}},
            "hamimig.lastOwner must be an object",
        ),
        (
            {"hamimig": {"schemaVersion": 1, "state": "Idle", "gpuIndex": False}},
            "hamimig.gpuIndex must be an integer",
        ),
        (  # the owners are checked before the other fields under "hamimig"
            {"hamimig": {"schemaVersion": 1, "state": "Idle", "cdiDevice": 3, "lastOwner": 5}},
            "hamimig.lastOwner must be an object",
        ),
        (
            {"hamimig": {"schemaVersion": 1, "state": "Idle", "idleSince": "yesterday"}},
            "hamimig.idleSince 'yesterday' is not an RFC 3339 time with an offset",
        ),
    ],
)
def test_a_refused_record_names_its_first_wrong_field_in_these_words(
    changes: dict[str, Any], reason: str
) -> None:
    """The reasons doctor and list print are an interface: they name the JSON field, and the
    first wrong one in the file's order, whatever reads the file."""
    doc = hami_doc(**changes)
    with pytest.raises(RecordError) as raised:
        decode_record(record_name(MIG), json.dumps(doc).encode())
    assert str(raised.value).startswith(reason)
