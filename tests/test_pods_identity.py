"""Verifying that --node/NODE_NAME is this machine: HAMi's registration, the kubelet's system UUID,
and other nodes' pods that name this machine's GPUs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hamimig.hw.types import Placement
from hamimig.pods.annotation import MigAllocation
from hamimig.pods.identity import (
    NODE_REGISTER_ANNOTATION,
    RegistrationError,
    node_identity_from,
    parse_registered_gpus,
    read_product_uuid,
    verify_node,
)
from hamimig.pods.model import NodeIdentity, Pod, PodSnapshot, PodSourceError

GPU0 = "GPU-5f0c3b8e-2a1d-4c9e-8b7a-0d1e2f3a4b5c"
GPU1 = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
GPU9 = "GPU-99999999-2a1d-4c9e-8b7a-0d1e2f3a4b5c"
MIG = "MIG-0b6c3f5a-9d2e-5f41-a8c7-3e2d1c0b9a88"
UUID = "4c4c4544-0042-3510-8052-b3c04f4e3332"


# --- HAMi's registration annotation ----------------------------------------------------------


def test_registration_json_form() -> None:
    text = (
        f'[{{"id":"{GPU0}","index":0,"count":10,"devmem":81920,"devcore":100,'
        f'"type":"NVIDIA-H100 80GB HBM3","numa":0,"mode":"hami-core","health":true}},'
        f'{{"id":"{GPU1}","count":10}}]'
    )
    assert parse_registered_gpus(text) == frozenset({GPU0, GPU1})


def test_registration_older_colon_form() -> None:
    text = (
        f"{GPU0},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
        f"{GPU1},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    )
    assert parse_registered_gpus(text) == frozenset({GPU0, GPU1})
    assert parse_registered_gpus(f"{GPU0},10") == frozenset({GPU0})


@pytest.mark.parametrize("text", ["", "  ", "[]", ":", "::"])
def test_empty_registration_says_nothing(text: str) -> None:
    assert parse_registered_gpus(text) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[", "neither valid JSON"),
        ('[{"id": 3}]', "entry 0 has no usable id"),
        ('[{"id": ""}]', "entry 0 has no usable id"),
        ('[{"id": "a b"}]', "entry 0 has no usable id"),
        ('["GPU-1"]', "entry 0 has no usable id"),
        ("[" * 100_000, "neither valid JSON"),
        (f"{GPU0},10:nonsense", "entry 1 is not id,count"),
        (",10,20:", "entry 0 is not id,count"),
    ],
)
def test_unreadable_registration(text: str, problem: str) -> None:
    with pytest.raises(RegistrationError, match=problem):
        parse_registered_gpus(text)


def node(annotations: Any = None, node_info: Any = None, name: str = "n1") -> Any:
    doc: dict[str, Any] = {"kind": "Node", "metadata": {"name": name}}
    if annotations is not None:
        doc["metadata"]["annotations"] = annotations
    if node_info is not None:
        doc["status"] = {"nodeInfo": node_info}
    return doc


def test_node_identity() -> None:
    doc = node({NODE_REGISTER_ANNOTATION: f"{GPU0},10:"}, {"systemUUID": f" {UUID}\n"})
    assert node_identity_from(doc, "n1") == NodeIdentity("n1", frozenset({GPU0}), UUID)
    assert node_identity_from(node(), "n1") == NodeIdentity("n1", None, None)
    assert node_identity_from(node({}, {"systemUUID": ""}), "n1").system_uuid is None


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ([], "is not a Node object"),
        ({"kind": "Pod", "metadata": {"name": "n1"}}, "has kind Pod, not Node"),
        (node(name="n2"), "is named n2, not n1"),
        (node(annotations=[]), "metadata.annotations is not an object"),
        (node({NODE_REGISTER_ANNOTATION: 7}), f"annotation {NODE_REGISTER_ANNOTATION} is not a"),
        (node({NODE_REGISTER_ANNOTATION: "x"}), f"annotation {NODE_REGISTER_ANNOTATION} entry 0"),
        (node(node_info={"systemUUID": 5}), "systemUUID is not a string"),
        (node(name="bad\nname"), r'is named "bad\\nname", not n1'),
    ],
)
def test_unusable_node_object(doc: Any, problem: str) -> None:
    with pytest.raises(RegistrationError, match=problem) as info:
        node_identity_from(doc, "n1")
    assert "\n" not in str(info.value)


# --- the machine's own UUID ------------------------------------------------------------------


def test_product_uuid(tmp_path: Path) -> None:
    path = tmp_path / "product_uuid"
    path.write_text(f"{UUID.upper()}\n", encoding="ascii")
    assert read_product_uuid(path) == UUID.upper()
    path.write_text(" \n", encoding="ascii")
    assert read_product_uuid(path) is None
    path.write_bytes(b"\xff\xfe")
    assert read_product_uuid(path) is None
    assert read_product_uuid(tmp_path / "absent") is None
    assert read_product_uuid(tmp_path) is None  # a directory cannot be read


def test_product_uuid_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_product_uuid(fifo) is None  # no writer: non-blocking open, empty read


def test_product_uuid_default_path() -> None:
    value = read_product_uuid()
    assert value is None or (value.strip() == value and value)


# --- verify_node -----------------------------------------------------------------------------


def pod(name: str, node: str | None, *gpus: str) -> Pod:
    allocations = tuple(
        MigAllocation(0, i, gpu, "1g.10gb", Placement(i, 1), None, None, None)
        for i, gpu in enumerate(gpus)
    )
    return Pod("ns", name, None, node, "Running", None, allocations, None)


def snapshot(elsewhere: tuple[Pod, ...] = (), identity: NodeIdentity | None = None) -> PodSnapshot:
    return PodSnapshot(
        pods=(pod("mine", "n1", GPU0),),
        source="file pods.json",
        elsewhere=elsewhere,
        node_identity=identity,
    )


def refused(snap: PodSnapshot, gpus: list[str], product: str | None) -> str:
    with pytest.raises(PodSourceError) as info:
        verify_node(snap, gpus, product)
    err = info.value
    assert (err.exit_code, err.code) == (5, "unverifiable")
    assert err.message.endswith("; nothing was changed")
    assert "\n" not in err.message
    return err.message


def test_nothing_to_check_passes() -> None:
    verify_node(snapshot(), [GPU0, GPU1], UUID)
    verify_node(snapshot(), [], None)
    verify_node(snapshot(identity=NodeIdentity("n1", None, None)), [GPU0], UUID)


def test_pod_elsewhere_naming_a_gpu_of_this_machine() -> None:
    there = pod("there", "n2", GPU9, GPU1.upper())
    message = refused(snapshot(elsewhere=(there,)), [GPU0, GPU1], None)
    assert message == (
        f"file pods.json: pod ns/there is bound to node n2 but its allocation names GPU "
        f"{GPU1.upper()} of this node: the node name is wrong, or the pod data is; "
        "nothing was changed"
    )
    verify_node(snapshot(elsewhere=(pod("there", "n2", GPU9),)), [GPU0, GPU1], None)


def test_registered_gpus_none_of_which_is_here() -> None:
    identity = NodeIdentity("n1", frozenset({GPU9}), None)
    message = refused(snapshot(identity=identity), [GPU0, GPU1], None)
    assert message == (
        f"file pods.json: HAMi registered GPUs {GPU9} for node n1 ({NODE_REGISTER_ANNOTATION}), "
        f"and none of them is on this machine ({GPU1}, {GPU0}): the node name is wrong; "
        "nothing was changed"
    )
    # One in common is enough (a GPU was swapped since the registration), case aside.
    both = NodeIdentity("n1", frozenset({GPU9, GPU0.upper()}), None)
    verify_node(snapshot(identity=both), [GPU0, GPU1], None)
    # No GPU seen here: nothing to compare.
    verify_node(snapshot(identity=identity), [], None)


def test_long_registration_lists_are_shortened() -> None:
    many = frozenset(f"GPU-{i:08x}-2a1d-4c9e-8b7a-0d1e2f3a4b5c" for i in range(40))
    message = refused(snapshot(identity=NodeIdentity("n1", many, None)), [GPU0], None)
    assert "and 36 more" in message
    assert len(message) < 400


def test_system_uuid_mismatch() -> None:
    identity = NodeIdentity("n1", None, UUID)
    other = "ec2b1f0e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
    message = refused(snapshot(identity=identity), [GPU0], other)
    assert message == (
        f"file pods.json: node n1 has system UUID {UUID}, but this machine's is {other} "
        "(/sys/class/dmi/id/product_uuid): the node name is wrong; nothing was changed"
    )
    verify_node(snapshot(identity=identity), [GPU0], UUID.upper())
    verify_node(snapshot(identity=identity), [GPU0], None)
    verify_node(snapshot(identity=NodeIdentity("n1", None, None)), [GPU0], other)


def test_elsewhere_is_checked_first_and_only_gpu_uuids_count() -> None:
    """A pod elsewhere whose allocation names a GPU here is refused even with a matching
    registration and system UUID: the pod data and the node name cannot both be right.
    """
    identity = NodeIdentity("n1", frozenset({GPU0}), UUID)
    there = pod("there", "n2", GPU0)
    assert "pod ns/there is bound to node n2" in refused(
        snapshot(elsewhere=(there,), identity=identity), [GPU0], UUID
    )
