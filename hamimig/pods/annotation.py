"""The `hami.io/vgpu-mig-allocations` pod annotation: HAMi's record of which MIG devices a pod uses.

Recovery trusts this annotation alone, so it is decoded stricter than HAMi does: a MIG UUID
becomes part of a file name and a CDI device name, so `MIG-../../etc` must never get that far.
Every rejection names the entry and the field, so the operator can find the bad annotation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hamimig.hw.types import Placement
from hamimig.store._fields import MIG_UUID

ANNOTATION = "hami.io/vgpu-mig-allocations"

_HEX_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# fullmatch, not `$`: `$` also matches before a trailing newline, which would let "MIG-…\n" through.
_GPU_UUID = re.compile(f"GPU-{_HEX_UUID}")
_PROFILE = re.compile(r"[0-9]+g\.[0-9]+gb(\+me)?")

_RUNTIME_KEYS = ("migUUID", "gpuInstanceID", "computeInstanceID")

MAX_ALLOCATIONS = 64
"""More MIG devices than a pod can hold: eight MIG GPUs of seven instances each make 56.

A claim this long is not HAMi's; refusing it also bounds the work spent on one hostile pod.
"""


class AnnotationError(ValueError):
    """The annotation is present but cannot be trusted; the text says which entry and why."""


@dataclass(frozen=True)
class MigAllocation:
    """One MIG device of one container, as the scheduler planned it and the plugin completed it.

    The runtime identity (`mig_uuid` and the GI and CI IDs) is all present or all absent: the
    plugin adds it once the instance exists, so without it an allocation names no instance yet."""

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: Placement
    mig_uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None

    @property
    def has_runtime_identity(self) -> bool:
        return None not in (self.mig_uuid, self.gpu_instance_id, self.compute_instance_id)

    @property
    def slot(self) -> tuple[int, int]:
        """(containerIndex, deviceIndex): what makes an entry unique within one pod."""
        return (self.container_index, self.device_index)

    def to_json(self) -> dict[str, Any]:
        """The entry in HAMi's own spelling, so an encoded annotation reads back identically."""
        doc: dict[str, Any] = {
            "containerIndex": self.container_index,
            "deviceIndex": self.device_index,
            "gpuUUID": self.gpu_uuid,
            "profile": self.profile,
            "placement": {"start": self.placement.start, "size": self.placement.size},
        }
        runtime = (self.mig_uuid, self.gpu_instance_id, self.compute_instance_id)
        doc.update((k, v) for k, v in zip(_RUNTIME_KEYS, runtime, strict=True) if v is not None)
        return doc


def _uint(value: Any, where: str, least: int = 0) -> int:
    # bool is an int in Python but not in Go's decoder, and 1.0 is an error there too.
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise AnnotationError(
            f"{where} must be a {'positive' if least else 'non-negative'} integer"
        )
    return value


def _uuid(value: Any, pattern: re.Pattern[str], where: str, example: str) -> str:
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise AnnotationError(f"{where} must look like {example}, got {show_value(value)}")
    return value


def show_value(value: Any) -> str:
    """A short, one-line rendering of a rejected value: hostile input must not flood the log."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _placement(value: Any, where: str) -> Placement:
    if not isinstance(value, dict):
        raise AnnotationError(f"{where} must be an object with start and size")
    return Placement(
        _uint(value.get("start"), f"{where}.start"), _uint(value.get("size"), f"{where}.size", 1)
    )


def _entry(doc: Any, i: int) -> MigAllocation:
    where = f"entry {i}"
    if not isinstance(doc, dict):
        raise AnnotationError(f"{where} is not a JSON object")
    container_index = _uint(doc.get("containerIndex"), f"{where}: containerIndex")
    device_index = _uint(doc.get("deviceIndex"), f"{where}: deviceIndex")
    gpu_uuid = _uuid(doc.get("gpuUUID"), _GPU_UUID, f"{where}: gpuUUID", "GPU-<uuid>")
    profile = doc.get("profile")
    if not isinstance(profile, str) or not profile:
        raise AnnotationError(f"{where}: profile must be a non-empty string")
    if _PROFILE.fullmatch(profile) is None:
        raise AnnotationError(f"{where}: profile {show_value(profile)} is not a MIG profile name")
    placement = _placement(doc.get("placement"), f"{where}: placement")

    # An explicit null counts as absent: Go's decoder leaves a pointer field nil for both.
    present = [key for key in _RUNTIME_KEYS if doc.get(key) is not None]
    if not present:
        mig_uuid, gi_id, ci_id = None, None, None
    elif len(present) < len(_RUNTIME_KEYS):
        missing = ", ".join(key for key in _RUNTIME_KEYS if key not in present)
        raise AnnotationError(f"{where}: partial runtime identity (missing {missing})")
    else:
        mig_uuid = _uuid(
            doc["migUUID"], MIG_UUID, f"{where}: migUUID", "MIG-<uuid> or MIG-GPU-<uuid>/<gi>/<ci>"
        )
        gi_id = _uint(doc["gpuInstanceID"], f"{where}: gpuInstanceID")
        ci_id = _uint(doc["computeInstanceID"], f"{where}: computeInstanceID")
    return MigAllocation(
        container_index, device_index, gpu_uuid, profile, placement, mig_uuid, gi_id, ci_id
    )


def decode_allocations(text: str) -> tuple[MigAllocation, ...]:
    """Decode the whole annotation or nothing: one bad entry makes the pod's claim unverifiable."""
    try:
        doc = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, or a number too long to convert
        raise AnnotationError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise AnnotationError("nested too deeply") from None
    if not isinstance(doc, list):
        raise AnnotationError("must be a JSON array of allocation objects")
    if len(doc) > MAX_ALLOCATIONS:
        raise AnnotationError(f"has {len(doc)} entries, more than the {MAX_ALLOCATIONS} allowed")
    allocations: list[MigAllocation] = []
    seen: dict[tuple[int, int], int] = {}
    for i, item in enumerate(doc):
        alloc = _entry(item, i)
        first = seen.setdefault(alloc.slot, i)
        if first != i:
            raise AnnotationError(
                f"entry {i}: duplicate containerIndex {alloc.container_index}, "
                f"deviceIndex {alloc.device_index} (also entry {first})"
            )
        allocations.append(alloc)
    return tuple(allocations)


def encode_allocations(allocs: Iterable[MigAllocation]) -> str:
    """Compact JSON as HAMi writes it, for tests and for tools that compose pod manifests."""
    return json.dumps([a.to_json() for a in allocs], separators=(",", ":"))
