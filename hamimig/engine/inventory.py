"""Read-only views of the node: the live layout joined with what hamimig knows, and profiles.

Nothing here mutates hardware or files, so none of it takes the node lock.
"""

from __future__ import annotations

from hamimig.engine.node import resolve_gpu
from hamimig.engine.views import (
    GpuProfiles,
    GpuView,
    InstanceList,
    InstanceView,
    ProfileList,
    ProfileView,
    State,
)
from hamimig.errors import UsageError
from hamimig.hw.types import Gpu, MigHardware, MigMode

_DEFAULT_MEMORY_SLICES = 8


def _gpus(hw: MigHardware, gpu_ref: str | None) -> list[Gpu]:
    if gpu_ref is not None:
        return [resolve_gpu(hw, gpu_ref)]
    return [hw.gpu(i) for i in range(hw.gpu_count())]


def _memory_slices(hw: MigHardware, gpu: Gpu) -> int:
    ends = [p.end for prof in hw.profiles(gpu.index) for p in prof.placements]
    return max(ends, default=_DEFAULT_MEMORY_SLICES)


def live_instances(hw: MigHardware, gpu: Gpu) -> list[InstanceView]:
    """Every live GI/CI pair and orphan GI on one GPU, as hamimig would show them unmanaged."""
    if gpu.mig_mode is not MigMode.ENABLED:
        return []
    names = {p.id: p.name for p in hw.profiles(gpu.index)}
    out: list[InstanceView] = []
    for gi in hw.layout(gpu.index):
        profile = names.get(gi.profile_id, f"profile-{gi.profile_id}")
        if not gi.compute_instances:
            out.append(
                InstanceView(
                    mig_uuid=None,
                    gpu_uuid=gpu.uuid,
                    gpu_index=gpu.index,
                    profile=profile,
                    placement=gi.placement,
                    gpu_instance_id=gi.id,
                    compute_instance_id=None,
                    state=State.ORPHAN_GI,
                )
            )
        for ci in gi.compute_instances:
            out.append(
                InstanceView(
                    mig_uuid=ci.mig_uuid,
                    gpu_uuid=gpu.uuid,
                    gpu_index=gpu.index,
                    profile=profile,
                    placement=gi.placement,
                    gpu_instance_id=gi.id,
                    compute_instance_id=ci.id,
                    state=State.UNMANAGED,
                )
            )
    return out


def list_instances(
    hw: MigHardware, gpu_ref: str | None = None, state: str | None = None
) -> InstanceList:
    wanted: State | None = None
    if state is not None:
        lookup = {s.value.lower(): s for s in State}
        wanted = lookup.get(state.lower())
        if wanted is None:
            raise UsageError(
                f"unknown state {state!r}: use one of {', '.join(s.value for s in State)}"
            )
    gpus = _gpus(hw, gpu_ref)
    instances: list[InstanceView] = []
    views: list[GpuView] = []
    for gpu in gpus:
        views.append(
            GpuView(
                index=gpu.index,
                uuid=gpu.uuid,
                model=gpu.model,
                mig_mode=gpu.mig_mode,
                memory_slices=_memory_slices(hw, gpu)
                if gpu.mig_mode is not MigMode.UNSUPPORTED
                else 0,
            )
        )
        instances.extend(live_instances(hw, gpu))
    if wanted is not None:
        instances = [i for i in instances if i.state is wanted]
    return InstanceList(instances=tuple(instances), gpus=tuple(views))


def list_profiles(hw: MigHardware, gpu_ref: str | None = None) -> ProfileList:
    out: list[GpuProfiles] = []
    for gpu in _gpus(hw, gpu_ref):
        profiles = () if gpu.mig_mode is MigMode.UNSUPPORTED else hw.profiles(gpu.index)
        out.append(
            GpuProfiles(
                index=gpu.index,
                uuid=gpu.uuid,
                model=gpu.model,
                profiles=tuple(
                    ProfileView(
                        name=p.name,
                        id=p.id,
                        slice_count=p.slice_count,
                        memory_mb=p.memory_mb,
                        max_instances=p.max_instances,
                        placements=p.placements,
                    )
                    for p in profiles
                ),
            )
        )
    return ProfileList(gpus=tuple(out))
