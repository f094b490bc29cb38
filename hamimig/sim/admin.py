"""Operator actions on a simulated node: build it, change it behind hamimig's back, break it.

They act as "the world" (a technician, another controller, a failing driver), not as an NVML
client: they change the state directly, are never counted and never fire faults, yet obey the
geometry rules the simulated NVML enforces.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from hamimig.durations import format_duration, to_rfc3339
from hamimig.errors import ConflictError, HardwareError, UsageError
from hamimig.hw.types import FULL_CI_PROFILE_BY_SLICES, Placement, legal_placement, parse_placement
from hamimig.sim.models import MODELS
from hamimig.sim.ops import DRIVER_VERSION, MAX_SIM_GPUS, BusyKind
from hamimig.sim.state import (
    MAX_CLOCK_OFFSET,
    NodeState,
    SimCi,
    SimGi,
    SimGpu,
    SimNvmlFailure,
    SimStore,
    create_ci,
    create_gi,
    model_of,
    new_node,
    normalise_fault,
)


@dataclass(frozen=True)
class Change:
    """What an operator action did, in words, and what `sim create` made behind hamimig's back:
    the GPU, the GI and its first CI (None: `--no-ci`)."""

    store: SimStore
    message: str
    created: tuple[SimGpu, SimGi, SimCi | None] | None = None


_DRIVER_VERSION = re.compile(r"[0-9]{3}(?:\.[0-9]{1,3}){1,2}")


def find_gpu(state: NodeState, ref: str | int) -> SimGpu:
    """A GPU by NVML index or UUID; `UsageError` names what was asked for."""
    text = str(ref)
    for gpu in state.gpus:
        if text == gpu.uuid or (text.isdigit() and int(text) == gpu.index):
            return gpu
    raise UsageError(f"no GPU {text!r} on the simulated node (it has {len(state.gpus)} GPU(s))")


def find_mig(state: NodeState, mig_uuid: str) -> tuple[SimGpu, SimGi, SimCi]:
    pairs = ((gpu, gi, ci) for gpu in state.gpus for gi in gpu.gis for ci in gi.cis)
    found = next((pair for pair in pairs if pair[2].mig_uuid == mig_uuid), None)
    if found is not None:
        return found
    raise UsageError(f"no MIG instance {mig_uuid} on the simulated node")


def as_hardware_error(exc: SimNvmlFailure, what: str) -> HardwareError:
    """The simulated hardware refused an operator's change, as NVML would have."""
    return HardwareError(f"{what} failed: NVML {exc.error}: {exc.detail}")


def sim_init(path: Path, model: str, count: int, driver_version: str = DRIVER_VERSION) -> Change:
    store = SimStore(path)
    spec = MODELS.get(model)
    if spec is None:
        raise UsageError(f"unknown model {model!r}: use one of {', '.join(MODELS)}")
    if not 1 <= count <= MAX_SIM_GPUS:
        raise UsageError(f"a simulated node has 1 to {MAX_SIM_GPUS} GPUs, not {count}")
    if not _DRIVER_VERSION.fullmatch(driver_version):
        raise UsageError(
            f"the driver version {driver_version!r} is not one such as {DRIVER_VERSION}"
        )
    if path.is_dir() or (path.exists() and not path.is_file()):
        # A directory (another node's home, `<sim>.d`): refused before anything is made.
        inside = f" (such as {path / 'node.json'})" if path.is_dir() else ""
        what = "a directory" if path.is_dir() else "no regular file"
        raise UsageError(
            f"{path} is {what}, so it cannot be a simulated node's file: name the node's "
            f"JSON file{inside}"
        )
    node = new_node(spec, count, driver_version)
    store.create(node)
    old = ", MIG UUIDs in the pre-R470 form" if node.old_mig_uuids else ""
    return Change(store, f"simulated node with {count} x {model} at {path}, MIG enabled{old}")


def sim_show(path: Path) -> Change:
    return Change(SimStore(path), "")


def sim_create(
    path: Path,
    gpu_ref: str,
    profile: str,
    placement: str,
    no_ci: bool,
    ci_slices: int | None = None,
    ci_count: int = 1,
) -> Change:
    """`ci_slices`/`ci_count`: N CIs of K compute slices each in the GI (as `nvidia-smi mig
    -cci` with several CI profiles makes), instead of one CI spanning it."""
    store = SimStore(path)
    start, size = parse_placement(placement)
    with store.edit() as state:
        gpu = find_gpu(state, gpu_ref)
        model = model_of(gpu)
        spec = next((p for p in model.profiles if p.name == profile), None)
        if spec is None:
            names = ", ".join(p.name for p in model.profiles)
            raise UsageError(f"unknown profile {profile!r} for {model.key}; profiles: {names}")
        legal = tuple(Placement(s, spec.size) for s in spec.starts)
        where = legal_placement(spec.name, legal, start, size)
        what = f"creating {spec.name} at {where} on GPU {gpu.index}"
        try:
            gi = create_gi(gpu, spec.id, where.start)
        except SimNvmlFailure as exc:
            raise as_hardware_error(exc, what) from None
        slices = spec.slice_count if ci_slices is None else ci_slices
        try:
            # A CI of N compute slices needs a CI profile of N that this board offers.
            if slices not in {p.slice_count for p in model.profiles} or ci_count < 1:
                raise UsageError(
                    f"{slices} compute slices x {ci_count} compute instances: not a CI layout"
                )
            ci_profile = FULL_CI_PROFILE_BY_SLICES[slices]
            old = state.old_mig_uuids
            cis = [] if no_ci else [create_ci(gpu, gi, ci_profile, old) for _ in range(ci_count)]
        except (UsageError, SimNvmlFailure) as exc:
            gpu.gis.remove(gi)  # all or nothing
            raise exc if isinstance(exc, UsageError) else as_hardware_error(exc, what) from None
        store.publish_capability(gpu.minor, gi.id)
        for each in cis:
            store.publish_capability(gpu.minor, gi.id, each.id)
    made = cis[0].mig_uuid if cis else f"orphan GI {gi.id}"
    created = (gpu, gi, cis[0] if cis else None)
    return Change(store, f"created {spec.name} at {where} on GPU {gpu.index}: {made}", created)


def sim_busy(
    path: Path, mig_uuid: str, gi_only: bool, clear: bool, kind: BusyKind | None = None
) -> Change:
    """Mark processes of `kind` (compute unless given) on an instance, or a client holding its
    GI (`gi_only`); `clear` removes the mark of `kind`, or every mark when no kind is given."""
    store = SimStore(path)
    with store.edit() as state:
        if clear:
            message = _clear_busy(state, mig_uuid, kind)
        else:
            _, gi, ci = find_mig(state, mig_uuid)
            if gi_only:
                gi.held = True
                gi.held_for = mig_uuid
                message = (
                    f"a client holds the GI of {mig_uuid}: destroying the GI fails with IN_USE"
                )
            else:
                kind = kind or BusyKind.COMPUTE
                ci.busy.add(kind)
                message = f"{_KIND_NAMES[kind]} run on {mig_uuid}: destroying it fails with IN_USE"
    return Change(store, message)


def mig_uuids(path: Path) -> set[str]:
    """Every MIG UUID `sim busy` can name: the live MIG devices, and those a GI is held for
    (the hold can outlive its CI)."""
    state = SimStore(path).read()
    known = {ci.mig_uuid for gpu in state.gpus for gi in gpu.gis for ci in gi.cis}
    known |= {gi.held_for for gpu in state.gpus for gi in gpu.gis if gi.held_for}
    return known


_KIND_NAMES = {
    BusyKind.COMPUTE: "compute processes",
    BusyKind.GRAPHICS: "graphics processes",
    BusyKind.MPS: "MPS compute processes",
}


def _clear_busy(state: NodeState, mig_uuid: str, kind: BusyKind | None) -> str:
    """Clear one kind's mark, or (no kind) every mark; the GI hold can outlive the CI (a
    monitoring client on the GI)."""
    if kind is not None:
        _, _, ci = find_mig(state, mig_uuid)
        ci.busy.discard(kind)
        return f"no {_KIND_NAMES[kind]} run on {mig_uuid}"
    # The GI a client holds on behalf of `mig_uuid` (`sim busy --gi-only`), CI or not.
    held = next((gi for gpu in state.gpus for gi in gpu.gis if gi.held_for == mig_uuid), None)
    if held is not None:
        held.held = False
        held.held_for = None
    try:
        _, gi, ci = find_mig(state, mig_uuid)
    except UsageError:
        if held is None:
            raise
        return f"the GI of {mig_uuid} is no longer held"
    ci.busy.clear()
    gi.held = False
    gi.held_for = None
    return f"{mig_uuid} is no longer busy"


def sim_reset(path: Path, gpu_ref: str) -> Change:
    store = SimStore(path)
    with store.edit() as state:
        gpu = find_gpu(state, gpu_ref)
        gone = len(gpu.gis)
        gpu.gis = []
        gpu.mig_current = gpu.mig_pending
    return Change(store, f"GPU {gpu.index} reset: {gone} GPU instance(s) vanished")


def sim_mig_mode(path: Path, gpu_ref: str, enable: bool, pending_only: bool) -> Change:
    store = SimStore(path)
    value = 1 if enable else 0
    with store.edit() as state:
        gpu = find_gpu(state, gpu_ref)
        if not enable and gpu.gis and not pending_only:
            raise ConflictError(
                f"GPU {gpu.index} still has {len(gpu.gis)} GPU instance(s): "
                "destroy them or 'sim reset' it before disabling MIG"
            )
        gpu.mig_pending = value
        if not pending_only:
            gpu.mig_current = value
    word = "enabled" if enable else "disabled"
    suffix = " (pending a GPU reset)" if pending_only else ""
    return Change(store, f"MIG {word} on GPU {gpu.index}{suffix}")


def sim_fault_add(
    path: Path, op: str, error: str | None, action: str, times: int, skip: int, gpu_ref: str | None
) -> Change:
    store = SimStore(path)
    with store.edit() as state:
        gpu = None if gpu_ref is None else find_gpu(state, gpu_ref).index
        fault = normalise_fault(op, error, action, times, skip, gpu)
        state.faults.append(fault)
    return Change(store, f"fault added: {fault.action} {fault.op} ({fault.error})")


def sim_fault_clear(path: Path) -> Change:
    store = SimStore(path)
    with store.edit() as state:
        count = len(state.faults)
        state.faults = []
    return Change(store, f"{count} fault(s) cleared")


def sim_clock(path: Path, advance: int | None, set_to: float | None) -> Change:
    """Move the node's clock (never back past the host's by more than a century): `advance`
    seconds forward, or to the instant `set_to`; neither only reads it."""
    store = SimStore(path)
    with store.edit() as state:
        offset = state.clock_offset
        if advance is not None:
            offset += advance
        elif set_to is not None:
            offset = set_to - time.time()
        if abs(offset) > MAX_CLOCK_OFFSET:
            raise UsageError("the simulated clock cannot be more than a century from this host's")
        state.clock_offset = offset
    now = to_rfc3339(time.time() + offset)
    ahead = "ahead of" if offset >= 0 else "behind"
    return Change(store, f"simulated time {now} ({format_duration(abs(offset))} {ahead} this host)")
