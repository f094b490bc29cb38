"""The `hami.io/vgpu-mig-allocations` codec: HAMi's rules plus UUIDs that cannot become paths."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hamimig.hw.types import Placement
from hamimig.pods.annotation import (
    ANNOTATION,
    MAX_ALLOCATIONS,
    AnnotationError,
    MigAllocation,
    decode_allocations,
    encode_allocations,
)

GPU = "GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c"
MIG = "MIG-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a88"


def entry(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": GPU,
        "profile": "2g.20gb",
        "placement": {"start": 2, "size": 2},
        "migUUID": MIG,
        "gpuInstanceID": 5,
        "computeInstanceID": 0,
    }
    for key, value in overrides.items():
        if value is ...:
            del doc[key]
        else:
            doc[key] = value
    return doc


def decode(*entries: Any) -> tuple[MigAllocation, ...]:
    return decode_allocations(json.dumps(list(entries)))


def reject(text_or_entries: str | list[Any], match: str) -> None:
    text = text_or_entries if isinstance(text_or_entries, str) else json.dumps(text_or_entries)
    with pytest.raises(AnnotationError, match=match) as info:
        decode_allocations(text)
    assert "\n" not in str(info.value)


def test_annotation_name() -> None:
    assert ANNOTATION == "hami.io/vgpu-mig-allocations"


def test_full_entry() -> None:
    (a,) = decode(entry())
    assert a == MigAllocation(0, 0, GPU, "2g.20gb", Placement(2, 2), MIG, 5, 0)
    assert a.has_runtime_identity
    assert a.slot == (0, 0)


def test_planned_entry_without_runtime_identity() -> None:
    (a,) = decode(entry(migUUID=..., gpuInstanceID=..., computeInstanceID=...))
    assert (a.mig_uuid, a.gpu_instance_id, a.compute_instance_id) == (None, None, None)
    assert not a.has_runtime_identity


def test_null_runtime_fields_count_as_absent() -> None:
    (a,) = decode(entry(migUUID=None, gpuInstanceID=None, computeInstanceID=None))
    assert not a.has_runtime_identity


def test_several_entries_and_unknown_keys() -> None:
    allocs = decode(
        entry(),
        entry(deviceIndex=1, profile="1g.10gb+me", placement={"start": 6, "size": 1}, extra=[1]),
        entry(containerIndex=1, migUUID=..., gpuInstanceID=..., computeInstanceID=...),
    )
    assert [a.slot for a in allocs] == [(0, 0), (0, 1), (1, 0)]
    assert allocs[1].profile == "1g.10gb+me"


def test_empty_array() -> None:
    assert decode_allocations("[]") == ()


@pytest.mark.parametrize(
    ("gpu", "mig"),
    [
        (GPU.upper(), MIG.upper()),
        ("GPU-aBcDeF01-2345-6789-AbCd-ef0123456789", "MIG-FfFfFfFf-0000-1111-2222-333333333333"),
        (GPU, f"MIG-{GPU}/1/0"),  # drivers before R470
        (GPU, f"MIG-{GPU.upper()}/13/7"),
    ],
)
def test_hex_case_is_free(gpu: str, mig: str) -> None:
    (a,) = decode(entry(gpuUUID=gpu, migUUID=mig))
    assert (a.gpu_uuid, a.mig_uuid) == (gpu, mig)


@pytest.mark.parametrize("missing", [("migUUID",), ("gpuInstanceID",), ("computeInstanceID",)])
def test_partial_identity_two_of_three(missing: tuple[str, ...]) -> None:
    reject([entry(**dict.fromkeys(missing, ...))], "entry 0: partial runtime identity")


@pytest.mark.parametrize("present", [("migUUID",), ("gpuInstanceID",), ("computeInstanceID",)])
def test_partial_identity_one_of_three(present: tuple[str, ...]) -> None:
    absent = [k for k in ("migUUID", "gpuInstanceID", "computeInstanceID") if k not in present]
    reject([entry(**dict.fromkeys(absent, ...))], "partial runtime identity")


def test_partial_identity_with_a_null() -> None:
    reject(
        [entry(computeInstanceID=None)], r"partial runtime identity \(missing computeInstanceID\)"
    )


def test_duplicate_slot() -> None:
    reject(
        [entry(), entry(migUUID=..., gpuInstanceID=..., computeInstanceID=...)],
        r"entry 1: duplicate containerIndex 0, deviceIndex 0 \(also entry 0\)",
    )


@pytest.mark.parametrize(
    "mig",
    [
        "MIG-../../etc",
        "MIG-../../etc/passwd",
        "MIG-x/y",
        "MIG-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a88/..",
        "MIG-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a88\n",
        "MIG-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a88\x00",
        "MIG-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a8 ",
        " MIG-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a88",
        "MIG-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a8g",
        "MIG-0b6c3f5a9d2e5f41a8c73e2d1c0b9a88",
        "MIG-GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c/1",  # the pre-R470 form, cut short
        "MIG-GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c/1/0/..",
        "MIG-GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c/1/0\n",
        "MIG-GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c/1/\u0660",  # a non-ASCII digit
        "MIG-GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c/1000/0",
        "MIG-GPU-../1/0",
        "mig-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a88",
        "MIG-\u0660b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a88",  # a non-ASCII digit
        GPU,
        "",
        7,
        ["MIG-x"],
    ],
)
def test_hostile_or_malformed_mig_uuid(mig: Any) -> None:
    reject([entry(migUUID=mig)], "entry 0: migUUID must look like MIG-<uuid>")


@pytest.mark.parametrize(
    "gpu",
    [
        "GPU-../x",
        "GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c\n",
        "GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5",
        MIG,
        "",
        None,
        1,
    ],
)
def test_malformed_gpu_uuid(gpu: Any) -> None:
    reject([entry(gpuUUID=gpu)], "entry 0: gpuUUID must look like GPU-<uuid>")


def test_gpu_uuid_missing() -> None:
    reject([entry(gpuUUID=...)], "gpuUUID must look like GPU-<uuid>, got null")


@pytest.mark.parametrize(
    "field", ["containerIndex", "deviceIndex", "gpuInstanceID", "computeInstanceID"]
)
@pytest.mark.parametrize("value", [True, False, -1, 1.0, "0", None])
def test_indexes_and_ids_are_non_negative_ints(field: str, value: Any) -> None:
    match = f"{field} must be a non-negative integer"
    if value is None and field in ("gpuInstanceID", "computeInstanceID"):
        match = "partial runtime identity"
    reject([entry(**{field: value})], match)


@pytest.mark.parametrize("field", ["containerIndex", "deviceIndex"])
def test_indexes_are_required(field: str) -> None:
    reject([entry(**{field: ...})], f"{field} must be a non-negative integer")


@pytest.mark.parametrize(
    ("profile", "match"),
    [
        ("", "must be a non-empty string"),
        (None, "must be a non-empty string"),
        (3, "must be a non-empty string"),
        ("2g.20GB", "is not a MIG profile name"),
        ("MIG 2g.20gb", "is not a MIG profile name"),
        ("2g.20gb\n", "is not a MIG profile name"),
        ("2g.20gb+me/..", "is not a MIG profile name"),
        ("1c.2g.20gb", "is not a MIG profile name"),
        ("g.20gb", "is not a MIG profile name"),
    ],
)
def test_malformed_profile(profile: Any, match: str) -> None:
    reject([entry(profile=profile)], f"entry 0: profile.*{match}")


@pytest.mark.parametrize(
    ("placement", "match"),
    [
        (None, "placement must be an object"),
        ([2, 2], "placement must be an object"),
        ({"size": 1}, r"placement\.start must be a non-negative integer"),
        ({"start": -1, "size": 1}, r"placement\.start must be a non-negative integer"),
        ({"start": True, "size": 1}, r"placement\.start must be a non-negative integer"),
        ({"start": 0}, r"placement\.size must be a positive integer"),
        ({"start": 0, "size": 0}, r"placement\.size must be a positive integer"),
        ({"start": 0, "size": True}, r"placement\.size must be a positive integer"),
        ({"start": 0, "size": 1.5}, r"placement\.size must be a positive integer"),
    ],
)
def test_malformed_placement(placement: Any, match: str) -> None:
    reject([entry(placement=placement)], match)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "not valid JSON"),
        ("[{", "not valid JSON"),
        ("{}", "must be a JSON array"),
        ('"x"', "must be a JSON array"),
        ("null", "must be a JSON array"),
        ("[1]", "entry 0 is not a JSON object"),
        ("[[]]", "entry 0 is not a JSON object"),
        ("[" * 100_000, "nested too deeply|not valid JSON"),
        ("[" + "1" * 5000 + "]", "not valid JSON: Exceeds the limit"),
    ],
)
def test_not_an_array_of_objects(text: str, match: str) -> None:
    reject(text, match)


def test_later_entry_is_named() -> None:
    reject([entry(), entry(deviceIndex=1, migUUID="MIG-x/y")], "entry 1: migUUID")


def test_long_hostile_value_is_shortened() -> None:
    with pytest.raises(AnnotationError) as info:
        decode(entry(migUUID="MIG-" + "/" * 10_000))
    assert len(str(info.value)) < 150


def test_round_trip() -> None:
    allocs = (
        MigAllocation(0, 0, GPU, "2g.20gb", Placement(2, 2), MIG, 5, 0),
        MigAllocation(0, 1, GPU, "1g.10gb+me", Placement(6, 1), None, None, None),
        MigAllocation(2, 0, GPU.upper(), "7g.80gb", Placement(0, 8), MIG.upper(), 0, 0),
    )
    text = encode_allocations(allocs)
    assert decode_allocations(text) == allocs
    assert encode_allocations(decode_allocations(text)) == text


def test_encoding_uses_hamis_spelling() -> None:
    full = MigAllocation(1, 2, GPU, "2g.20gb", Placement(2, 2), MIG, 5, 0)
    planned = MigAllocation(0, 0, GPU, "1g.10gb", Placement(0, 1), None, None, None)
    assert json.loads(encode_allocations([full, planned])) == [
        {
            "containerIndex": 1,
            "deviceIndex": 2,
            "gpuUUID": GPU,
            "profile": "2g.20gb",
            "placement": {"start": 2, "size": 2},
            "migUUID": MIG,
            "gpuInstanceID": 5,
            "computeInstanceID": 0,
        },
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": GPU,
            "profile": "1g.10gb",
            "placement": {"start": 0, "size": 1},
        },
    ]
    assert " " not in encode_allocations([full])


def test_at_most_64_entries() -> None:
    """No pod holds more: eight MIG GPUs of seven instances each make 56."""
    planned = {"migUUID": ..., "gpuInstanceID": ..., "computeInstanceID": ...}
    entries = [entry(deviceIndex=i, **planned) for i in range(65)]
    assert len(decode(*entries[:64])) == MAX_ALLOCATIONS == 64
    reject(entries, r"^has 65 entries, more than the 64 allowed$")


def test_a_pod_with_too_many_entries_is_kept_as_unreadable() -> None:
    """The engine then names the pod and fails closed (exit 5), as for any malformed claim."""
    from hamimig.pods.sources import read_pods_text

    planned = {"migUUID": ..., "gpuInstanceID": ..., "computeInstanceID": ...}
    claim = json.dumps([entry(deviceIndex=i, **planned) for i in range(65)])
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "annotations": {ANNOTATION: claim}},
        "spec": {"nodeName": "n"},
    }
    (read,) = read_pods_text(json.dumps({"kind": "List", "items": [pod]}), "x", "n").pods
    assert (read.allocations, read.annotation_error) == (
        (),
        "has 65 entries, more than the 64 allowed",
    )
