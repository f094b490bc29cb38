"""Applying lifecycle steps to hardware and disk in a crash-safe order.

The rule (docs/design.md "Crash safety"): before every hardware mutation the durable state already
says what is about to happen. Creation journals an intent before the GI, updates it before the
CI and again before the CDI spec; destruction marks the record Reclaiming before the CI and GI
go. CDI specs are removed only after the hardware is gone, and a failed removal is queued.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from functools import partial

from hamimig.engine.facts import LiveCheck, Liveness
from hamimig.engine.metrics import FAILED_ALLOCATE, FAILED_DESTROY, FAILURES, RECLAIMS, count
from hamimig.engine.node import Node
from hamimig.engine.states import Creating, StateName, check_transition
from hamimig.errors import ConflictError, HamimigError, HardwareError, NvmlError, UsageError
from hamimig.hw.devnodes import capability_nodes
from hamimig.hw.types import GiProfile, Gpu, Placement
from hamimig.store.cdi import CdiDevice, CdiStore
from hamimig.store.intents import Intent, new_intent_id
from hamimig.store.records import Owner, Record, RecordState


def set_state(node: Node, record: Record, target: RecordState, **changes: object) -> Record:
    """Write `record` in state `target`, if the transition table allows the move."""
    current: StateName = record.state
    check_transition(current, target, record.mig_uuid)
    updated = dataclasses.replace(
        record,
        state=target,
        managed=True,
        updated_at=node.clock(),
        **changes,  # type: ignore[arg-type]
    )
    node.records().write(updated)
    return updated


def cdi_device_for(
    node: Node,
    mig_uuid: str,
    gpu_uuid: str,
    gpu_minor: int,
    gi: int,
    ci: int,
    composes: bool | None = None,
) -> CdiDevice:
    """What the instance's spec is made of. The capability nodes' major and modes are read
    only where a spec is composed from the NVIDIA base (`composes`; by default as the
    node's config says): the device-nodes-only form lists paths alone."""
    minors = node.hardware().capability_minors(gpu_minor, gi, ci)
    dev = CdiDevice(
        mig_uuid=mig_uuid,
        gpu_minor=gpu_minor,
        gi_cap_minor=minors.gi_access,
        ci_cap_minor=minors.ci_access,
        gpu_uuid=gpu_uuid,
        gi_id=gi,
        ci_id=ci,
    )
    if not (node.cdi_base().composes if composes is None else composes):
        return dev
    files = node.files()
    try:
        nodes = capability_nodes(files.proc_devices, files.capabilities, gpu_minor, gi, ci)
    except HardwareError as exc:  # composing then fails; an existing spec is kept
        return dataclasses.replace(dev, caps_problem=exc.message)
    return dataclasses.replace(
        dev, caps_major=nodes.major, gi_cap_mode=nodes.gi_mode, ci_cap_mode=nodes.ci_mode
    )


def refresh_spec(cdi: CdiStore, dev: CdiDevice) -> str | None:
    """Make an existing instance's spec what it needs (rewritten only when its content
    differs). When no spec can be composed (no or a bad NVIDIA base spec, or the base lacks the
    GPU), a spec that runtimes load is kept as it is and the reason is returned for a warning:
    an instance that works must not stop working for it. Without one, `UsageError` says why.
    """
    try:
        if not cdi.matches(dev):
            cdi.write(dev)
        return None
    except UsageError as exc:
        if cdi.usable(dev.mig_uuid):
            return f"kept as it is, not compared with the NVIDIA CDI spec: {exc.message}"
        raise


class DestroyFailed(HardwareError):
    """The hardware refused to destroy an instance; its record is now Error."""

    def __init__(self, message: str, record: Record) -> None:
        super().__init__(message)
        self.record = record


def destroy_managed(node: Node, record: Record, live: LiveCheck, gpu_index: int) -> list[str]:
    """Destroy a managed instance: Reclaiming, CI, GI, then CDI spec (queued on failure), then
    the record. Returns notes on anything deferred (a queued CDI removal).

    Raises `DestroyFailed` (record left in Error with the NVML error) when the hardware refuses.
    """
    hw = node.hardware()
    notes: list[str] = []
    if record.state is not RecordState.RECLAIMING:
        record = set_state(node, record, RecordState.RECLAIMING, error=None)
    try:
        if live.status is Liveness.COMPLETE:
            hw.destroy_compute_instance(
                gpu_index, record.gpu_instance_id, record.compute_instance_id
            )
        if live.status in (Liveness.COMPLETE, Liveness.GI_ONLY):
            hw.destroy_gpu_instance(gpu_index, record.gpu_instance_id)
    except NvmlError as exc:
        count(node, FAILURES, FAILED_DESTROY)
        failed = set_state(node, record, RecordState.ERROR, error=exc.message)
        raise DestroyFailed(
            f"could not destroy {record.mig_uuid} ({record.profile} at {record.placement} on "
            f"GPU {gpu_index}): {exc.message}; it is kept in state Error and not reused",
            failed,
        ) from None
    note = remove_cdi_after_destroy(node, record.mig_uuid)
    if note:
        notes.append(note)
    check_transition(RecordState.RECLAIMING, None, record.mig_uuid)
    node.records().remove(record.mig_uuid)
    count(node, RECLAIMS)
    return notes


def remove_cdi_after_destroy(node: Node, mig_uuid: str) -> str | None:
    """Remove an instance's CDI spec (its hardware is gone); queue the removal if it fails."""
    cdi = node.cdi()
    if cdi is None or not cdi.exists(mig_uuid):
        return None
    try:
        cdi.remove(mig_uuid)
    except OSError as exc:
        node.queue().add(mig_uuid, f"{exc.strerror or exc}", node.clock())
        return f"CDI spec of {mig_uuid} could not be removed ({exc.strerror or exc}); queued"
    return None


def create_instance(
    node: Node, gpu: Gpu, profile: GiProfile, placement: Placement, owner: Owner
) -> Record:
    """Create GI, CI, CDI spec and an Active record under an intent; undo everything this
    request created if any step fails (a failed allocation never caches partial work)."""
    hw = node.hardware()
    intents = node.intents()
    intent = Intent(
        id=new_intent_id(),
        op="allocate",
        gpu_uuid=gpu.uuid,
        gpu_index=gpu.index,
        profile=profile.name,
        profile_id=profile.id,
        placement=placement,
        owner=owner,
        created_at=node.clock(),
    )
    check_transition(None, Creating, f"{profile.name} at {placement}")
    try:
        intents.write(intent)
    except OSError as exc:
        raise HardwareError(f"cannot write the intent journal: {exc.strerror or exc}") from None
    try:
        gi_id = hw.create_gpu_instance(gpu.index, profile.id, placement)
    except NvmlError as exc:
        if exc.call != "nvmlDeviceCreateGpuInstanceWithPlacement":
            # The GI was created and reading it back failed: undo it like any partial work.
            _rollback_unread_gi(node, intent, exc)
        _drop_intent(node, intent)
        if exc.name == "INSUFFICIENT_RESOURCES":
            raise ConflictError(
                f"GPU {gpu.index} refused {profile.name} at {placement}: the placement is "
                f"occupied ({exc.message})"
            ) from None
        raise
    try:
        intent = dataclasses.replace(intent, gpu_instance_id=gi_id)
        intents.write(intent)
        ci = hw.create_compute_instance(gpu.index, gi_id)
        intent = dataclasses.replace(intent, compute_instance_id=ci.id, mig_uuid=ci.mig_uuid)
        intents.write(intent)
        cdi = node.cdi()
        cdi_name: str | None = None
        if cdi is not None:
            dev = cdi_device_for(node, ci.mig_uuid, gpu.uuid, gpu.minor, gi_id, ci.id)
            cdi_name = cdi.write(dev)
        now = node.clock()
        record = Record(
            mig_uuid=ci.mig_uuid,
            gpu_uuid=gpu.uuid,
            profile=profile.name,
            placement=placement,
            gpu_instance_id=gi_id,
            compute_instance_id=ci.id,
            state=RecordState.ACTIVE,
            owner=owner,
            cdi_device=cdi_name,
            created_at=now,
            updated_at=now,
            gpu_index=gpu.index,
        )
        check_transition(Creating, RecordState.ACTIVE, ci.mig_uuid)
        node.records().write(record)
    except (HamimigError, OSError) as exc:
        reason = exc.message if isinstance(exc, HamimigError) else f"I/O error: {exc}"
        count(node, FAILURES, FAILED_ALLOCATE)
        rollback_intent(node, intent, record_written=False)
        raise HardwareError(
            f"allocation of {profile.name} at {placement} on GPU {gpu.index} failed and was "
            f"rolled back: {reason}"
        ) from None
    # The allocation is complete (its record is written): a leftover intent naming a recorded
    # MIG UUID is a finished one, which allocate skips and recover clears.
    with contextlib.suppress(OSError):
        node.intents().remove(intent.id)
    return record


def _rollback_unread_gi(node: Node, intent: Intent, exc: NvmlError) -> None:
    """Find and destroy the GI this request created but could not read back."""
    hw = node.hardware()
    try:
        for gi in hw.layout(intent.gpu_index):
            if gi.placement == intent.placement and gi.profile_id == intent.profile_id:
                rollback_intent(node, dataclasses.replace(intent, gpu_instance_id=gi.id), False)
                return
    except (HamimigError, OSError) as failed:
        reason = failed.message if isinstance(failed, HamimigError) else str(failed)
        raise HardwareError(
            f"{exc.message}; the GPU instance it created could not be rolled back ({reason}): "
            f"intent {intent.id} is kept, run 'hamimig recover'"
        ) from None


def _drop_intent(node: Node, intent: Intent) -> None:
    try:
        node.intents().remove(intent.id)
    except OSError as exc:
        raise HardwareError(
            f"cannot remove intent {intent.id} ({exc.strerror or exc}); run 'hamimig recover'"
        ) from None


def rollback_intent(node: Node, intent: Intent, record_written: bool) -> None:
    """Destroy what an allocation created (CI, GI), then its CDI spec, then the intent.

    If the hardware refuses, the intent stays so that recovery can finish the job, and the
    error says so.
    """
    hw = node.hardware()
    gi_id = intent.gpu_instance_id
    try:
        if gi_id is not None:
            ci_ids: set[int] = set()
            if intent.compute_instance_id is not None:
                ci_ids.add(intent.compute_instance_id)
            if intent.mig_uuid is None:
                # A CI may exist that the intent never learned of (its read-back failed, or a
                # crash came first): the GI is this request's, so every CI in it is too.
                ci_ids |= {
                    ci.id
                    for gi in hw.layout(intent.gpu_index)
                    if gi.id == gi_id and gi.placement == intent.placement
                    for ci in gi.compute_instances
                }
            for ci_id in sorted(ci_ids):
                _ignore_not_found(
                    partial(hw.destroy_compute_instance, intent.gpu_index, gi_id, ci_id)
                )
            _ignore_not_found(partial(hw.destroy_gpu_instance, intent.gpu_index, gi_id))
    except NvmlError as exc:
        raise HardwareError(
            f"rollback of intent {intent.id} failed: {exc.message}; the intent is kept, run "
            "'hamimig recover'"
        ) from None
    if intent.mig_uuid is not None:
        remove_cdi_after_destroy(node, intent.mig_uuid)
        if record_written:
            node.records().remove(intent.mig_uuid)
    check_transition(Creating, None, intent.id)
    _drop_intent(node, intent)


def _ignore_not_found(action: Callable[[], None]) -> None:
    """Undoing a step that never happened (or was already undone) is not a failure."""
    try:
        action()
    except NvmlError as exc:
        if exc.name != "NOT_FOUND":
            raise
