"""Is the node name really this machine? Cross-checks of the pod source against the hardware.

A wrong node name makes this machine's pods look absent, so recovery would free their instances.
The checks (docs/design.md, "Trust model") run only when both sides are known: a node HAMi never
registered, or a machine without DMI, is not evidence of anything.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from hamimig.pods.annotation import show_value
from hamimig.pods.model import NodeIdentity, PodSnapshot, PodSourceError
from hamimig.vocabulary import Setting

NODE_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
PRODUCT_UUID_PATH = Path("/sys/class/dmi/id/product_uuid")

_NOTHING_CHANGED = "; nothing was changed"
_ID = re.compile(r"[^\s,:]+")
_PLAIN = re.compile(r"[\x21-\x7e]{1,100}")


class RegistrationError(ValueError):
    """The Node object, or HAMi's registration on it, cannot be read; the text says which part."""


def parse_registered_gpus(text: str) -> frozenset[str] | None:
    """The device IDs HAMi registered: a JSON array of `{id, ...}`, or older releases'
    `id,count,mem,cores,type,numa,health:` entries. Empty is None, not an empty set: it says
    nothing about which GPUs are here."""
    stripped = text.strip()
    if not stripped:
        return None
    ids: set[str] = set()
    if stripped.startswith("["):
        try:
            doc = json.loads(stripped)
        except (ValueError, RecursionError):
            raise RegistrationError("is neither valid JSON nor id,count,... entries") from None
        if not isinstance(doc, list):
            raise RegistrationError("is not a JSON array of devices")
        for i, entry in enumerate(doc):
            device_id = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(device_id, str) or _ID.fullmatch(device_id) is None:
                raise RegistrationError(f"entry {i} has no usable id")
            ids.add(device_id)
    else:
        for i, entry in enumerate(stripped.split(":")):
            if not entry.strip():
                continue  # the trailing separator, or an empty slot
            fields = entry.split(",")
            if len(fields) < 2 or _ID.fullmatch(fields[0].strip()) is None:
                raise RegistrationError(f"entry {i} is not id,count,...")
            ids.add(fields[0].strip())
    return frozenset(ids) if ids else None


def mapping(value: Any, what: str, error: type[ValueError] = RegistrationError) -> dict[str, Any]:
    """An object field of a manifest; absent is empty, anything else not an object is `error`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(f"{what} is not an object")
    return value


def node_identity_from(doc: Any, name: str) -> NodeIdentity:
    """The identity facts of a Node object as the API returns it (`GET /api/v1/nodes/NAME`)."""
    if not isinstance(doc, dict):
        raise RegistrationError("is not a Node object")
    kind = doc.get("kind")
    if kind is not None and kind != "Node":
        raise RegistrationError(f"has kind {_shown(kind)}, not Node")
    meta = mapping(doc.get("metadata"), "metadata")
    if meta.get("name") != name:
        raise RegistrationError(f"is named {_shown(meta.get('name'))}, not {_shown(name)}")
    raw = mapping(meta.get("annotations"), "metadata.annotations").get(NODE_REGISTER_ANNOTATION)
    registered: frozenset[str] | None = None
    if raw is not None:
        if not isinstance(raw, str):
            raise RegistrationError(f"annotation {NODE_REGISTER_ANNOTATION} is not a string")
        try:
            registered = parse_registered_gpus(raw)
        except RegistrationError as exc:
            raise RegistrationError(f"annotation {NODE_REGISTER_ANNOTATION} {exc}") from None
    info = mapping(mapping(doc.get("status"), "status").get("nodeInfo"), "status.nodeInfo")
    system_uuid = info.get("systemUUID")
    if system_uuid is not None and not isinstance(system_uuid, str):
        raise RegistrationError("status.nodeInfo.systemUUID is not a string")
    return NodeIdentity(
        name=name, registered_gpus=registered, system_uuid=(system_uuid or "").strip() or None
    )


def read_product_uuid(path: Path = PRODUCT_UUID_PATH) -> str | None:
    """This machine's DMI product UUID (the kubelet's systemUUID), or None: unreadable is normal
    (no DMI in some VMs, root-only on most kernels). The read is bounded and never blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            return os.read(fd, 4096).decode("ascii").strip() or None
        finally:
            os.close(fd)
    except (OSError, UnicodeDecodeError):
        return None


def verify_node(
    snapshot: PodSnapshot, gpu_uuids: Collection[str], product_uuid: str | None
) -> None:
    """Refuse (exit 5) when the snapshot shows that its node name is not this machine.
    UUIDs compare without regard to case: NVML, HAMi and the firmware do not agree on one."""
    ours = {uuid.casefold() for uuid in gpu_uuids}
    for pod in snapshot.elsewhere:
        for alloc in pod.allocations:
            if alloc.gpu_uuid.casefold() in ours:
                raise PodSourceError(
                    f"{snapshot.source}: pod {_shown(pod.key)} is bound to node "
                    f"{_shown(pod.node_name)} but its allocation names GPU {alloc.gpu_uuid} of "
                    f"this node: the node name is wrong, or the pod data is{_NOTHING_CHANGED}",
                    Setting.NODE_NAME,
                )
    identity = snapshot.node_identity
    if identity is None:
        return
    registered = identity.registered_gpus
    if registered is not None and ours and ours.isdisjoint(g.casefold() for g in registered):
        raise PodSourceError(
            f"{snapshot.source}: HAMi registered GPUs {_some(registered)} for node "
            f"{_shown(identity.name)} ({NODE_REGISTER_ANNOTATION}), and none of them is on this "
            f"machine ({_some(gpu_uuids)}): the node name is wrong{_NOTHING_CHANGED}",
            Setting.NODE_NAME,
        )
    system_uuid = identity.system_uuid
    if system_uuid and product_uuid and system_uuid.casefold() != product_uuid.casefold():
        raise PodSourceError(
            f"{snapshot.source}: node {_shown(identity.name)} has system UUID "
            f"{_shown(system_uuid)}, but this machine's is {_shown(product_uuid)} "
            f"({PRODUCT_UUID_PATH}): the node name is wrong{_NOTHING_CHANGED}",
            Setting.NODE_NAME,
        )


def _shown(value: Any) -> str:
    """A value from the cluster, safe to put in a one-line message however it was crafted."""
    if isinstance(value, str) and _PLAIN.fullmatch(value):
        return value
    return show_value(value if value is None or isinstance(value, str) else type(value).__name__)


def _some(ids: Iterable[str]) -> str:
    """A few IDs for a message: a node has at most a handful, but the annotation is not ours."""
    listed = sorted(ids)
    shown = ", ".join(_shown(i) for i in listed[:4])
    return shown + (f" and {len(listed) - 4} more" if len(listed) > 4 else "")
