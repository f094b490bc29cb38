"""`MigHardware` over NVML: the one place that imports pynvml, taking a pynvml-like module so the
same code runs on NVIDIA's bindings and on the simulator (`hw/sim.py`). Each method notes its
`nvidia-smi` equivalent, for operators cross-checking us. NVML calls are budgeted
(docs/performance.md): handles, GPU facts and profiles are cached for one command; the live
layout never is.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from hamimig.errors import GpuInstanceUnreadable, NvmlError, NvmlUnavailableError, UsageError
from hamimig.hw.minors import DEFAULT_MIG_MINORS, MigMinors
from hamimig.hw.types import (
    FULL_CI_PROFILE_BY_SLICES,
    CapabilityMinors,
    ComputeInstance,
    GiProfile,
    Gpu,
    GpuInstance,
    MigDevice,
    MigMode,
    Placement,
)
from hamimig.vocabulary import Setting

_NO_DRIVER = (
    "NVML is not available ({why}): run hamimig on a GPU node with the NVIDIA driver, "
    "or use a simulated node"
)
_PLACEMENT_ARRAY = 16
# The process lists HAMi counts: compute, and the two that may be missing (see `_process_ids`).
_COMPUTE_PROCESSES = "nvmlDeviceGetComputeRunningProcesses"
_NOT_FOUND = "NVML_ERROR_FUNCTION_NOT_FOUND"
_OPTIONAL_PROCESS_LISTS = (
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
)
_ABSENT_PROCESS_LIST = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND")
# What NVML says of a UUID or index it does not know, and of a call the device does not offer.
_UNKNOWN = ("NOT_FOUND", "INVALID_ARGUMENT")
_NOT_HERE = ("NOT_SUPPORTED", "INVALID_ARGUMENT")


def bindings() -> ModuleType:
    """NVIDIA's `pynvml` module (importing it needs no driver; only `nvmlInit` loads one)."""
    import pynvml

    module: ModuleType = pynvml
    return module


class NvmlHardware:
    """The real adapter: `open` initialises NVML, `close` shuts it down."""

    def __init__(self, nv: Any, mig_minors: Path = DEFAULT_MIG_MINORS) -> None:
        self._nv = nv
        self._minors = MigMinors(mig_minors)
        self._error_names = {
            getattr(nv, a): a.removeprefix("NVML_ERROR_")
            for a in dir(nv)
            if a.startswith("NVML_ERROR_")
        }
        self._handles: dict[int, Any] = {}
        # MIG device handles read back by `mig_device`, so that asking whether processes run
        # on the instance just verified costs one call. Dropped when a CI is destroyed.
        self._mig_handles: dict[str, Any] = {}
        self._gpus: dict[int, Gpu] = {}
        self._profile_infos: dict[int, list[tuple[int, Any]]] = {}
        self._profiles: dict[int, tuple[GiProfile, ...]] = {}
        self._new_gis: dict[tuple[int, int], tuple[Any, int]] = {}
        self._max_mig: dict[int, int] = {}
        self._walks: dict[int, dict[int, tuple[int, int]]] = {}
        self._open = False

    # --- session -----------------------------------------------------------------------------

    def open(self) -> None:
        try:
            self._nv.nvmlInit()
        except self._nv.NVMLError as exc:
            name = self._name_of(exc)
            if name in ("LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "LIB_RM_VERSION_MISMATCH"):
                raise NvmlUnavailableError(
                    _NO_DRIVER.format(why=name), Setting.SIMULATED_NODE
                ) from None
            raise self._wrap("nvmlInit", exc) from None
        self._open = True

    def close(self) -> None:
        self._mig_handles.clear()
        if self._open:
            self._open = False
            # Nothing useful can be done about a failed shutdown at exit.
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlShutdown()

    # --- plumbing ----------------------------------------------------------------------------

    def _name_of(self, exc: Any) -> str:
        value = getattr(exc, "value", None)
        return self._error_names.get(value, type(exc).__name__.removeprefix("NVMLError_"))

    def _wrap(self, call: str, exc: Any) -> NvmlError:
        return NvmlError(call, self._name_of(exc), int(getattr(exc, "value", -1)))

    def _c(self, call: str, *args: Any, absent: tuple[str, ...] = ()) -> Any:
        """`call(*args)`; the NVML errors named in `absent` mean "nothing there" (None)."""
        fn: Callable[..., Any] = getattr(self._nv, call)
        try:
            return fn(*args)
        except self._nv.NVMLError as exc:
            if self._name_of(exc) in absent:
                return None
            raise self._wrap(call, exc) from None

    @staticmethod
    def _text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def _name(self, info: Any) -> str:
        """A profile's name without NVML's `MIG ` prefix."""
        return self._text(info.name).removeprefix("MIG ")

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            handle = self._c("nvmlDeviceGetHandleByIndex", index, absent=_UNKNOWN)
            if handle is None:
                raise UsageError(f"no GPU {index} on this node")
            self._handles[index] = handle
        return self._handles[index]

    def _mig_at(self, handle: Any, index: int) -> Any:
        """The MIG device handle at `index` of a GPU; None where the index is empty."""
        return self._c("nvmlDeviceGetMigDeviceHandleByIndex", handle, index, absent=("NOT_FOUND",))

    # --- GPUs ----------------------------------------------------------------------------------

    def driver_version(self) -> str:
        """`nvidia-smi --query-gpu=driver_version --format=csv`"""
        return self._text(self._c("nvmlSystemGetDriverVersion"))

    def gpu_count(self) -> int:
        """`nvidia-smi -L | wc -l`"""
        return int(self._c("nvmlDeviceGetCount"))

    def gpu(self, index: int) -> Gpu:
        """`nvidia-smi -i INDEX --query-gpu=uuid,name,mig.mode.current,mig.mode.pending`"""
        if index in self._gpus:
            return self._gpus[index]
        handle = self._handle(index)
        current, pending = self._modes(handle)
        gpu = Gpu(
            index=index,
            uuid=self._text(self._c("nvmlDeviceGetUUID", handle)),
            model=self._text(self._c("nvmlDeviceGetName", handle)),
            minor=int(self._c("nvmlDeviceGetMinorNumber", handle)),
            mig_mode=current,
            mig_pending=pending,
        )
        self._gpus[index] = gpu
        return gpu

    def mig_modes(self, gpu: int) -> tuple[MigMode, MigMode]:
        """`nvidia-smi -i GPU --query-gpu=mig.mode.current,mig.mode.pending`: one call, none
        when the GPU's facts were read already."""
        if gpu in self._gpus:
            return self._gpus[gpu].mig_mode, self._gpus[gpu].mig_pending
        return self._modes(self._handle(gpu))

    def _modes(self, handle: Any) -> tuple[MigMode, MigMode]:
        modes = self._c("nvmlDeviceGetMigMode", handle, absent=("NOT_SUPPORTED",))
        if modes is None:
            return MigMode.UNSUPPORTED, MigMode.UNSUPPORTED
        current, pending = modes
        return self._mode(current), self._mode(pending)

    def _mode(self, value: int) -> MigMode:
        return MigMode.ENABLED if value == self._nv.NVML_DEVICE_MIG_ENABLE else MigMode.DISABLED

    def gpu_by_uuid(self, uuid: str) -> Gpu:
        """`nvidia-smi -i GPU-UUID -L`"""
        for gpu in self._gpus.values():
            if gpu.uuid == uuid:
                return gpu
        handle = self._c("nvmlDeviceGetHandleByUUID", uuid, absent=_UNKNOWN)
        is_mig = handle is not None and self._c("nvmlDeviceIsMigDeviceHandle", handle)
        if handle is None or getattr(is_mig, "value", is_mig):
            raise UsageError(f"no GPU {uuid} on this node")
        index = int(self._c("nvmlDeviceGetIndex", handle))
        self._handles[index] = handle
        return self.gpu(index)

    # --- profiles ------------------------------------------------------------------------------

    def _infos(self, gpu: int) -> Iterator[tuple[int, Any]]:
        """GI profile infos by index, fetched lazily and cached (the table has 18 indexes)."""
        cache = self._profile_infos.setdefault(gpu, [])
        yield from cache
        handle = self._handle(gpu)
        first = cache[-1][0] + 1 if cache else 0
        for index in range(first, int(self._nv.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            info = self._c(
                "nvmlDeviceGetGpuInstanceProfileInfo", handle, index, 2, absent=_NOT_HERE
            )
            cache.append((index, info))
            yield index, info

    def _array(self, call: str, ctype: Any, size: int, *args: Any) -> list[Any]:
        """An NVML array call, its array sized for today's boards and grown on
        INSUFFICIENT_SIZE rather than spending a call on the count."""
        while True:
            array = (ctype * size)()
            count = ctypes.c_uint(size)
            try:
                getattr(self._nv, call)(*args, array, ctypes.byref(count))
            except self._nv.NVMLError as exc:
                if self._name_of(exc) == "INSUFFICIENT_SIZE" and count.value > size:
                    size = count.value
                    continue
                raise self._wrap(call, exc) from None
            return [array[i] for i in range(count.value)]

    def _profile(self, gpu: int, index: int, info: Any) -> GiProfile:
        placements = self._array(
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            self._nv.c_nvmlGpuInstancePlacement_t,
            _PLACEMENT_ARRAY,
            self._handle(gpu),
            int(info.id),
        )
        return GiProfile(
            name=self._name(info),
            id=int(info.id),
            index=index,
            slice_count=int(info.sliceCount),
            memory_mb=int(info.memorySizeMB),
            max_instances=int(info.instanceCount),
            placements=tuple(Placement(p.start, p.size) for p in placements),
        )

    def profiles(self, gpu: int) -> tuple[GiProfile, ...]:
        """`nvidia-smi mig -i GPU -lgip` and `-lgipp`"""
        if gpu not in self._profiles:
            infos = self._infos(gpu)
            self._profiles[gpu] = tuple(self._profile(gpu, i, info) for i, info in infos if info)
        return self._profiles[gpu]

    def remaining_capacity(self, gpu: int, profile_id: int) -> int:
        """`nvidia-smi mig -i GPU -lgip`'s Free: how many more GIs of the profile fit beside
        the live ones (MIG enabled only)."""
        handle = self._handle(gpu)
        return int(self._c("nvmlDeviceGetGpuInstanceRemainingCapacity", handle, profile_id))

    def find_profile(self, gpu: int, name: str) -> GiProfile | None:
        """One profile by name, reading profile infos only until it is found."""
        if gpu in self._profiles:
            return next((p for p in self._profiles[gpu] if p.name == name), None)
        for index, info in self._infos(gpu):
            if info is not None and self._name(info) == name:
                return self._profile(gpu, index, info)
        return None

    # --- the live layout ---------------------------------------------------------------------

    def layout(self, gpu: int) -> tuple[GpuInstance, ...]:
        """`nvidia-smi mig -i GPU -lgi` and `-lci`, with MIG UUIDs as `nvidia-smi -L` shows them.
        GIs are enumerated per profile, so GIs without a CI are seen too: MIG device handles
        exist only for GI/CI pairs."""
        info = self.gpu(gpu)
        if info.mig_mode is not MigMode.ENABLED:
            return ()
        handle = self._handle(gpu)
        gis: list[tuple[int, int, Placement]] = []
        for profile_id in [int(i.id) for _, i in self._infos(gpu) if i is not None]:
            # GI handles of one profile (at most 7 per profile on today's boards).
            args = (self._nv.c_nvmlGpuInstance_t, 8, handle, profile_id)
            for gi_handle in self._array("nvmlDeviceGetGpuInstances", *args):
                gi_info = self._c("nvmlGpuInstanceGetInfo", gi_handle)
                gis.append((int(gi_info.id), int(gi_info.profileId), _placement(gi_info)))
        cis: dict[int, list[ComputeInstance]] = {}
        walked: dict[int, tuple[int, int]] = {}
        # Every MIG device, four calls each; empty indexes are skipped.
        for index in range(self._max_mig_devices(handle)):
            mig = self._mig_at(handle, index)
            if mig is None:
                continue
            gi_id = int(self._c("nvmlDeviceGetGpuInstanceId", mig))
            ci_id = int(self._c("nvmlDeviceGetComputeInstanceId", mig))
            mig_uuid = self._text(self._c("nvmlDeviceGetUUID", mig))
            ci = ComputeInstance(id=ci_id, mig_uuid=mig_uuid, spans_gi=self._spans_gi(mig))
            cis.setdefault(gi_id, []).append(ci)
            walked[index] = (gi_id, ci_id)
        self._walks[gpu] = walked
        return tuple(
            GpuInstance(
                gpu_index=gpu,
                gpu_uuid=info.uuid,
                id=gi_id,
                profile_id=profile_id,
                placement=placement,
                compute_instances=tuple(sorted(cis.get(gi_id, []), key=lambda c: c.id)),
            )
            for gi_id, profile_id, placement in sorted(gis, key=lambda g: (g[2].start, g[0]))
        )

    def _spans_gi(self, mig: Any) -> bool:
        """One call: a CI with fewer compute slices than its GI leaves room for another's."""
        attrs = self._c("nvmlDeviceGetAttributes", mig)
        return int(attrs.computeInstanceSliceCount) >= int(attrs.gpuInstanceSliceCount)

    def mig_device(self, mig_uuid: str) -> MigDevice | None:
        """`nvidia-smi -i MIG-UUID -L`: one instance read back directly, no scan of the node, in
        ten calls of a reuse's budget (docs/performance.md); the handle is kept for
        `instance_process_count`."""
        mig = self._c("nvmlDeviceGetHandleByUUID", mig_uuid, absent=_UNKNOWN)
        if mig is None:
            return None
        # A GPU UUID passed by mistake is not a MIG device: these calls refuse it.
        gi_id = self._c("nvmlDeviceGetGpuInstanceId", mig, absent=_NOT_HERE)
        if gi_id is None:
            return None
        ci_id = int(self._c("nvmlDeviceGetComputeInstanceId", mig))
        spans = self._spans_gi(mig)
        self._mig_handles[mig_uuid] = mig
        parent = self._c("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig)
        gpu_uuid = self._text(self._c("nvmlDeviceGetUUID", parent))
        gpu_index = int(self._c("nvmlDeviceGetIndex", parent))
        gpu_minor = int(self._c("nvmlDeviceGetMinorNumber", parent))
        self._handles.setdefault(gpu_index, parent)
        gi_handle = self._c("nvmlDeviceGetGpuInstanceById", parent, int(gi_id))
        gi_info = self._c("nvmlGpuInstanceGetInfo", gi_handle)
        return MigDevice(
            mig_uuid=mig_uuid,
            gpu_uuid=gpu_uuid,
            gpu_index=gpu_index,
            gpu_minor=gpu_minor,
            gpu_instance_id=int(gi_id),
            compute_instance_id=ci_id,
            profile_id=int(gi_info.profileId),
            placement=_placement(gi_info),
            spans_gi=spans,
        )

    def profile_name(self, gpu: int, profile_id: int) -> str | None:
        """The name of a profile ID in one call where the driver offers the by-ID lookup."""
        info = _with_id(self._profile_infos.get(gpu, []), profile_id)  # read by a scan
        if info is not None:
            return self._name(info)
        if hasattr(self._nv, "nvmlDeviceGetGpuInstanceProfileInfoById"):
            info = self._c(
                "nvmlDeviceGetGpuInstanceProfileInfoById",
                self._handle(gpu),
                profile_id,
                absent=("FUNCTION_NOT_FOUND", "NOT_SUPPORTED", "INVALID_ARGUMENT"),
            )
            if info is not None:
                return self._name(info)
        info = _with_id(self._infos(gpu), profile_id)  # older drivers: walk the profile indexes
        return None if info is None else self._name(info)

    # --- mutations -----------------------------------------------------------------------------

    def create_gpu_instance(self, gpu: int, profile_id: int, placement: Placement) -> int:
        """`nvidia-smi mig -i GPU -cgi PROFILE:START`; returns the new GI's ID."""
        handle = self._handle(gpu)
        wanted = self._nv.c_nvmlGpuInstancePlacement_t()
        wanted.start, wanted.size = placement.start, placement.size
        gi_handle = self._c(
            "nvmlDeviceCreateGpuInstanceWithPlacement", handle, profile_id, ctypes.byref(wanted)
        )
        try:
            gi_id = int(self._c("nvmlGpuInstanceGetInfo", gi_handle).id)
        except NvmlError as exc:
            raise GpuInstanceUnreadable(exc.call, exc.name, exc.value) from None
        self._new_gis[(gpu, gi_id)] = (gi_handle, profile_id)
        return gi_id

    def create_compute_instance(self, gpu: int, gi_id: int) -> ComputeInstance:
        """`nvidia-smi mig -i GPU -gi GI -cci` (the default CI spanning the whole GI)."""
        handle = self._handle(gpu)
        known = self._new_gis.pop((gpu, gi_id), None)
        if known is None:
            gi_handle = self._c("nvmlDeviceGetGpuInstanceById", handle, gi_id)
            profile_id = int(self._c("nvmlGpuInstanceGetInfo", gi_handle).profileId)
        else:
            gi_handle, profile_id = known
        info = _with_id(self._infos(gpu), profile_id)
        if info is None:
            raise UsageError(f"GPU {gpu} has no GPU instance profile with ID {profile_id}")
        ci_info = self._c(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            gi_handle,
            FULL_CI_PROFILE_BY_SLICES[int(info.sliceCount)],
            self._nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            2,
        )
        ci_handle = self._c("nvmlGpuInstanceCreateComputeInstance", gi_handle, int(ci_info.id))
        ci_id = int(self._c("nvmlComputeInstanceGetInfo", ci_handle).id)
        mig_uuid = self._find_mig_uuid(gpu, handle, gi_id, ci_id)
        if mig_uuid is None:
            raise NvmlError(
                "nvmlDeviceGetMigDeviceHandleByIndex",
                "NOT_FOUND",
                int(self._nv.NVML_ERROR_NOT_FOUND),
                f"new compute instance {gi_id}/{ci_id} has no MIG device",
            )
        return ComputeInstance(id=ci_id, mig_uuid=mig_uuid)

    def _find_mig_uuid(self, gpu: int, handle: Any, gi_id: int, ci_id: int) -> str | None:
        """The MIG UUID of one GI/CI pair. NVML has no direct lookup, so walk the MIG devices,
        likeliest index first (drivers list them in GI order, so where the new pair sorts among
        the last scan's, then the empty ones), reading CI ID and UUID only on a GI ID match."""
        total = self._max_mig_devices(handle)
        order = list(range(total))
        seen = self._walks.pop(gpu, None)
        if seen is not None:
            predicted = sum(1 for pair in seen.values() if pair < (gi_id, ci_id))
            empty = [i for i in order if i not in seen]
            first = [predicted] + [i for i in empty if i != predicted]
            order = [i for i in first if i < total] + [i for i in order if i not in first]
        for index in order:
            mig = self._mig_at(handle, index)
            if mig is None or int(self._c("nvmlDeviceGetGpuInstanceId", mig)) != gi_id:
                continue
            if int(self._c("nvmlDeviceGetComputeInstanceId", mig)) == ci_id:
                return self._text(self._c("nvmlDeviceGetUUID", mig))
        return None

    def _max_mig_devices(self, handle: Any) -> int:
        key = ctypes.cast(handle, ctypes.c_void_p).value or 0
        if key not in self._max_mig:
            self._max_mig[key] = int(self._c("nvmlDeviceGetMaxMigDeviceCount", handle))
        return self._max_mig[key]

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        """`nvidia-smi mig -i GPU -gi GI -ci CI -dci`"""
        gi_handle = self._c("nvmlDeviceGetGpuInstanceById", self._handle(gpu), gi_id)
        ci_handle = self._c("nvmlGpuInstanceGetComputeInstanceById", gi_handle, ci_id)
        self._mig_handles.clear()  # a destroyed CI's UUID handle must never be asked again
        self._c("nvmlComputeInstanceDestroy", ci_handle)

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        """`nvidia-smi mig -i GPU -gi GI -dgi` (its CIs must be gone first)."""
        # The handle kept by create_gpu_instance dies with the GI; its ID may come back as
        # another profile's GI.
        self._new_gis.pop((gpu, gi_id), None)
        gi_handle = self._c("nvmlDeviceGetGpuInstanceById", self._handle(gpu), gi_id)
        self._c("nvmlGpuInstanceDestroy", gi_handle)

    # --- processes and device nodes ----------------------------------------------------------

    def gpu_has_processes(self, gpu: int) -> bool:
        """`nvidia-smi -i GPU --query-compute-apps=pid --format=csv` (and graphics processes:
        the `C`, `G` and `M+C` rows of `nvidia-smi -i GPU`)"""
        return bool(self._process_ids(self._handle(gpu)))

    def instance_process_count(self, mig_uuid: str) -> int:
        """The processes on a MIG device, as HAMi counts them: compute, graphics and MPS compute
        processes (`nvidia-smi -i MIG-UUID`'s rows), each PID once; three calls after
        `mig_device` (its handle is kept), 0 for an instance that is gone."""
        mig = self._mig_handles.get(mig_uuid)
        if mig is None:
            mig = self._c("nvmlDeviceGetHandleByUUID", mig_uuid, absent=("NOT_FOUND",))
        if mig is None:
            return 0
        return len(self._process_ids(mig))

    def _process_ids(self, handle: Any) -> set[int]:
        """The PIDs of every process on a GPU or MIG device. Graphics and MPS lists may be absent
        (NOT_SUPPORTED, FUNCTION_NOT_FOUND: no such process); any other error raises, so the
        device counts busy. A missing binding and pynvml's `NVMLLibraryMismatchError` (a driver
        without the `_v3` symbol) count as FUNCTION_NOT_FOUND."""
        pids: set[int] = set()
        mismatch = getattr(self._nv, "NVMLLibraryMismatchError", ())
        for call in (_COMPUTE_PROCESSES, *_OPTIONAL_PROCESS_LISTS):
            absent = () if call == _COMPUTE_PROCESSES else _ABSENT_PROCESS_LIST
            try:
                found = self._c(call, handle, absent=absent) if hasattr(self._nv, call) else None
            except mismatch:
                found = None
            if found is None and not absent:
                code = int(getattr(self._nv, _NOT_FOUND, 13))
                raise NvmlError(call, "FUNCTION_NOT_FOUND", code)
            pids.update(int(p.pid) for p in found or ())
        return pids

    def capability_minors(self, gpu_minor: int, gi_id: int, ci_id: int) -> CapabilityMinors:
        """`grep gpu<minor>/gi<gi> /proc/driver/nvidia-caps/mig-minors`"""
        return self._minors.lookup(gpu_minor, gi_id, ci_id)


def _placement(gi_info: Any) -> Placement:
    return Placement(int(gi_info.placement.start), int(gi_info.placement.size))


def _with_id(infos: Iterable[tuple[int, Any]], profile_id: int) -> Any | None:
    """The first profile info of `infos` (index, info or None) with this profile ID."""
    return next((i for _, i in infos if i is not None and int(i.id) == profile_id), None)
