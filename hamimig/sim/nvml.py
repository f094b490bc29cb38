"""A simulated pynvml module over a simulated node's state: NVIDIA's names, signatures and return
types for all `hw/nvml.py` calls, on pynvml's own structs, handles and `NVMLError` classes (reached
through `hw/nvml.py`), so every test runs the code that will talk to real GPUs. Each call is
counted, may be faulted, and is one locked read-modify-write of the node's state.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import types
from collections.abc import Callable
from typing import Any, TypeVar

from hamimig.hw.nvml import bindings
from hamimig.sim.models import ProfileSpec
from hamimig.sim.ops import BusyKind
from hamimig.sim.state import (
    NVML_ERROR_CODES,
    NodeState,
    SimCi,
    SimGi,
    SimGpu,
    SimNvmlFailure,
    SimStore,
    ci_profiles_of,
    crash,
    create_ci,
    create_gi,
    destroy_ci,
    destroy_gi,
    fault_armed,
    fire,
    mig_devices,
    model_of,
    profile_of,
    require_mig,
)

T = TypeVar("T")

_DEVICE, _GI, _CI, _MIG = 1, 2, 3, 4
_MAX_MIG_DEVICES = 7
_PROCESS_PID_BASE = 40000
# pynvml helpers that are plain Python and never touch the driver.
_PURE_HELPERS = frozenset(
    {
        "nvmlFriendlyObject",
        "nvmlStructToFriendlyObject",
        "nvmlFriendlyObjectToStruct",
        "nvmlExceptionClass",
    }
)
# The calls that change the node (and `nvmlShutdown`, which publishes the session's counts).
WRITES = frozenset(
    {
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceDestroy",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlComputeInstanceDestroy",
        "nvmlShutdown",
    }
)


def _encode(kind: int, gpu: int, gi: int = 0, ci: int = 0) -> int:
    return (kind << 40) | ((gpu + 1) << 24) | ((gi + 1) << 12) | (ci + 1)


def _decode(handle: Any) -> tuple[int, int, int, int]:
    value = ctypes.cast(handle, ctypes.c_void_p).value if handle is not None else None
    if not value:
        raise SimNvmlFailure("INVALID_ARGUMENT", "null handle")
    kind = value >> 40
    gpu = ((value >> 24) & 0xFFFF) - 1
    gi = ((value >> 12) & 0xFFF) - 1
    ci = (value & 0xFFF) - 1
    return kind, gpu, gi, ci


def _nvml(fn: Callable[..., T]) -> Callable[..., T]:
    """A simulated NVML function named as `fn` is: `fn(self, state, *args)` runs as one call
    (`SimNvml._call`: counted, under the node's faults, on the locked state). The GPU a fault may
    name is the first argument's: an index, or the GPU of a handle."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(self: SimNvml, *args: Any) -> T:
        first = args[0] if args else None
        gpu = first if isinstance(first, int) else self._gpu_of(first)
        return self._call(name, gpu, lambda state: fn(self, state, *args))

    return call


def _deref(ref: Any) -> Any:
    """The object behind `byref(x)` (a CArgObject), or `x` itself."""
    return getattr(ref, "_obj", ref)


class SimNvml:
    """The stand-in for `import pynvml`; construct one per simulated node store."""

    def __init__(self, store: SimStore) -> None:
        self._store = store
        self._nv = bindings()
        self._init_count = 0

    def __getattr__(self, name: str) -> Any:
        # Constants, ctypes structs, handle types and exception classes come from pynvml itself;
        # NVML functions the simulator does not implement must not silently reach the driver.
        found = getattr(self._nv, name)
        if name.startswith("nvml") and name not in _PURE_HELPERS and callable(found):
            raise AttributeError(f"the simulated node does not implement {name}")
        return found

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._nv)) | set(super().__dir__()))

    # --- plumbing ---------------------------------------------------------------------------

    def _error(self, name: str, error: str) -> Exception:
        if error == "FUNCTION_NOT_FOUND" and name.endswith("RunningProcesses"):
            # What pynvml's unversioned process calls raise, no NVMLError, for a driver without
            # the `_v3` symbol.
            return self._nv.NVMLLibraryMismatchError(  # type: ignore[no-any-return]
                f"Unversioned function called and the pyNVML version does not match the "
                f"NVML lib version: use a versioned function such as {name}_v2"
            )
        return self._nv.NVMLError(NVML_ERROR_CODES[error])  # type: ignore[no-any-return]

    def _call(self, name: str, gpu: int | None, body: Callable[[NodeState], T]) -> T:
        """Count the call, fire a matching fault, run `body` on the locked state; the file is
        rewritten only when the call changes it (a mutation, a consumed fault, `nvmlShutdown`
        publishing this process's counts), never for a read."""
        with self._store.session() as session:
            state = session.state
            self._store.count(name)
            # nvmlShutdown publishes this process's counts after the call (`publish_counts`).
            session.dirty = (name in WRITES and name != "nvmlShutdown") or fault_armed(state, name)
            if name not in ("nvmlInit", "nvmlInitWithFlags") and self._init_count <= 0:
                raise self._error(name, "UNINITIALIZED")
            fault = fire(self._store, state, name, gpu, lambda f: self._error(name, f.error))
            try:
                result = body(state)
            except SimNvmlFailure as exc:
                if fault is not None:  # crash-after: the call failed on its own, then we die
                    self._store.save_now(state)
                    crash()
                raise self._error(name, exc.error) from None
            if fault is not None:
                self._store.save_now(state)
                crash()
        if name == "nvmlShutdown":
            self._store.publish_counts()
        return result

    @staticmethod
    def _gpu(state: NodeState, index: int) -> SimGpu:
        gpus = state.gpus
        if not 0 <= index < len(gpus):
            raise SimNvmlFailure("INVALID_ARGUMENT", f"no GPU {index}")
        return gpus[index]

    def _device_gpu(
        self, state: NodeState, handle: Any, kind: int = _DEVICE, mig: bool = False
    ) -> SimGpu:
        """The GPU of a handle of this kind (INVALID_ARGUMENT for another); an instance's
        handle is stale once MIG is off, and `mig` asks a GPU's to have MIG on."""
        got, gpu_index, _, _ = _decode(handle)
        if got != kind:
            raise SimNvmlFailure("INVALID_ARGUMENT", "wrong handle kind")
        gpu = self._gpu(state, gpu_index)
        if kind != _DEVICE or mig:
            require_mig(gpu)
        return gpu

    def _gi(self, state: NodeState, handle: Any) -> tuple[SimGpu, SimGi]:
        gpu, gi_id = self._device_gpu(state, handle, _GI), _decode(handle)[2]
        gi = next((gi for gi in gpu.gis if gi.id == gi_id), None)
        if gi is None:
            raise SimNvmlFailure("INVALID_ARGUMENT", "stale GPU instance handle")
        return gpu, gi

    def _ci(self, state: NodeState, handle: Any, kind: int) -> tuple[SimGpu, SimGi, SimCi]:
        gpu, (_, _, gi_id, ci_id) = self._device_gpu(state, handle, kind), _decode(handle)
        pairs = ((gi, ci) for gi in gpu.gis for ci in gi.cis)
        found = next(((gi, ci) for gi, ci in pairs if (gi.id, ci.id) == (gi_id, ci_id)), None)
        if found is None:
            raise SimNvmlFailure("INVALID_ARGUMENT", "stale handle")
        return gpu, *found

    def _device(self, state: NodeState, handle: Any) -> tuple[SimGpu, SimGi | None, SimCi | None]:
        """What a GPU's or a MIG device's handle names: the GPU, and a MIG device's GI and CI."""
        if _decode(handle)[0] == _MIG:
            return self._ci(state, handle, _MIG)
        return self._device_gpu(state, handle), None, None

    def _gpu_of(self, handle: Any) -> int | None:
        if isinstance(handle, (str, bytes)):  # a UUID names no GPU index
            return None
        with contextlib.suppress(SimNvmlFailure):  # a null handle names none either
            return _decode(handle)[1]
        return None

    def _handle(self, kind: int, gpu: int, gi: int = 0, ci: int = 0) -> Any:
        instances = {_GI: self._nv.c_nvmlGpuInstance_t, _CI: self._nv.c_nvmlComputeInstance_t}
        ptype = instances.get(kind, self._nv.c_nvmlDevice_t)
        return ctypes.cast(ctypes.c_void_p(_encode(kind, gpu, gi, ci)), ptype)

    def _fill_array(self, array_ref: Any, count_ref: Any, items: list[Any]) -> int:
        """NVML's array protocol: the count always, the items where the array holds them."""
        count, array = _deref(count_ref), _deref(array_ref)
        room, count.value = count.value, len(items)
        if array is not None and (room < len(items) or len(array) < len(items)):
            raise SimNvmlFailure("INSUFFICIENT_SIZE", "array too small")
        if array is not None:
            array[: len(items)] = items
        return int(self._nv.NVML_SUCCESS)

    # --- library ----------------------------------------------------------------------------

    @_nvml
    def nvmlInit(self, state: NodeState) -> None:
        self._init_count += 1

    @_nvml
    def nvmlShutdown(self, state: NodeState) -> None:
        self._init_count -= 1  # and `_call` publishes this process's counts

    @_nvml
    def nvmlSystemGetDriverVersion(self, state: NodeState) -> str:
        return state.driver_version

    # --- devices ----------------------------------------------------------------------------

    @_nvml
    def nvmlDeviceGetCount(self, state: NodeState) -> int:
        return len(state.gpus)

    @_nvml
    def nvmlDeviceGetHandleByIndex(self, state: NodeState, index: int) -> Any:
        self._gpu(state, index)
        return self._handle(_DEVICE, index)

    @_nvml
    def nvmlDeviceGetHandleByUUID(self, state: NodeState, uuid: str | bytes) -> Any:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in state.gpus:
            if gpu.uuid == text:
                return self._handle(_DEVICE, gpu.index)
            for gi, ci in mig_devices(gpu):
                if ci.mig_uuid == text:
                    return self._handle(_MIG, gpu.index, gi.id, ci.id)
        raise SimNvmlFailure("NOT_FOUND", f"no device {text}")

    @_nvml
    def nvmlDeviceGetIndex(self, state: NodeState, handle: Any) -> int:
        return self._device_gpu(state, handle).index

    @_nvml
    def nvmlDeviceGetUUID(self, state: NodeState, handle: Any) -> str:
        gpu, _, ci = self._device(state, handle)
        return gpu.uuid if ci is None else ci.mig_uuid

    @_nvml
    def nvmlDeviceGetName(self, state: NodeState, handle: Any) -> str:
        gpu, gi, _ = self._device(state, handle)
        name = model_of(gpu).nvml_name
        return name if gi is None else f"{name} MIG {profile_of(gpu, gi.profile_id).name}"

    @_nvml
    def nvmlDeviceGetMinorNumber(self, state: NodeState, handle: Any) -> int:
        return self._device_gpu(state, handle).minor

    @_nvml
    def nvmlDeviceGetMigMode(self, state: NodeState, handle: Any) -> list[int]:
        gpu = self._device_gpu(state, handle)
        return [gpu.mig_current, gpu.mig_pending]

    def _processes(self, state: NodeState, handle: Any, kind: BusyKind) -> list[Any]:
        """The processes of one kind (`sim busy --kind`) on a MIG device, or on every MIG device
        of a GPU for a GPU handle; each kind's process has its own PID."""
        gpu, gi, ci = self._device(state, handle)
        pairs = mig_devices(gpu) if gi is None or ci is None else [(gi, ci)]
        pid = _PROCESS_PID_BASE * (1 + list(BusyKind).index(kind)) + gpu.index * 1000
        return [
            self._nv.nvmlFriendlyObject(
                {
                    "pid": pid + gi.id * 10 + ci.id,
                    "usedGpuMemory": 1 << 30,
                    "gpuInstanceId": gi.id,
                    "computeInstanceId": ci.id,
                }
            )
            for gi, ci in pairs
            if kind in ci.busy
        ]

    @_nvml
    def nvmlDeviceGetComputeRunningProcesses(self, state: NodeState, handle: Any) -> list[Any]:
        return self._processes(state, handle, BusyKind.COMPUTE)

    @_nvml
    def nvmlDeviceGetGraphicsRunningProcesses(self, state: NodeState, handle: Any) -> list[Any]:
        return self._processes(state, handle, BusyKind.GRAPHICS)

    @_nvml
    def nvmlDeviceGetMPSComputeRunningProcesses(self, state: NodeState, handle: Any) -> list[Any]:
        return self._processes(state, handle, BusyKind.MPS)

    # --- GPU instance profiles and placements --------------------------------------------------

    def _info(self, struct: str, version: int, name: str) -> Any:
        """pynvml's profile info `struct` of this version: 1, or 2 with the profile's name."""
        if version not in (1, 2):
            raise SimNvmlFailure("FUNCTION_NOT_FOUND")
        info = getattr(self._nv, f"{struct}_v2_t" if version == 2 else f"{struct}_t")()
        if version == 2:
            info.name = name.encode()
        return info

    def _profile_info(self, spec: ProfileSpec, version: int) -> Any:
        info = self._info("c_nvmlGpuInstanceProfileInfo", version, f"MIG {spec.name}")
        # A fresh struct is all zeros: no P2P support, no encoders.
        info.id = spec.id
        info.sliceCount = spec.slice_count
        info.instanceCount = spec.max_instances
        info.multiprocessorCount = spec.sm_count
        info.copyEngineCount = spec.slice_count
        media = spec.slice_count == 7 or spec.index == 7  # the full GPU and the +me profile
        info.decoderCount = spec.slice_count // 2 + (1 if spec.index == 7 else 0)
        info.jpegCount = info.ofaCount = int(media)
        info.memorySizeMB = spec.memory_mb
        return info

    @_nvml
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, state: NodeState, handle: Any, profile: int, version: int = 2
    ) -> Any:
        spec = model_of(self._device_gpu(state, handle)).profile_by_index(profile)
        if spec is None:
            known = 0 <= profile < self._nv.NVML_GPU_INSTANCE_PROFILE_COUNT
            raise SimNvmlFailure("NOT_SUPPORTED" if known else "INVALID_ARGUMENT")
        return self._profile_info(spec, version)

    nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo

    @_nvml
    def nvmlDeviceGetGpuInstanceProfileInfoById(
        self, state: NodeState, handle: Any, profileId: int
    ) -> Any:
        return self._profile_info(profile_of(self._device_gpu(state, handle), profileId), 2)

    nvmlDeviceGetGpuInstanceProfileInfoByIdV = nvmlDeviceGetGpuInstanceProfileInfoById

    @_nvml
    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, state: NodeState, handle: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        spec = profile_of(self._device_gpu(state, handle), profileId)
        items = [self._nv.c_nvmlGpuInstancePlacement_t(s, spec.size) for s in spec.starts]
        return self._fill_array(placementsRef, countRef, items)

    @_nvml
    def nvmlDeviceGetGpuInstanceRemainingCapacity(
        self, state: NodeState, handle: Any, profileId: int
    ) -> int:
        gpu = self._device_gpu(state, handle, mig=True)
        spec = profile_of(gpu, profileId)
        free = [s for s in spec.starts if not any(g.overlaps(s, spec.size) for g in gpu.gis)]
        # Count disjoint free placements greedily: what could still be created side by side.
        count, end = 0, -1
        for start in free:
            if start >= end:
                count, end = count + 1, start + spec.size
        same = sum(1 for g in gpu.gis if g.profile_id == profileId)
        return max(0, min(count, spec.max_instances - same))

    # --- GPU instances -----------------------------------------------------------------------

    @_nvml
    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, state: NodeState, handle: Any, profileId: int, placement: Any
    ) -> Any:
        gpu = self._device_gpu(state, handle)
        wanted = _deref(placement)
        spec = model_of(gpu).profile_by_id(profileId)
        if spec is not None and wanted.size != spec.size:
            raise SimNvmlFailure("INVALID_ARGUMENT", "placement size mismatch")
        gi = create_gi(gpu, profileId, int(wanted.start))
        self._store.publish_capability(gpu.minor, gi.id)
        return self._handle(_GI, gpu.index, gi.id)

    @_nvml
    def nvmlDeviceGetGpuInstances(
        self, state: NodeState, handle: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        gpu = self._device_gpu(state, handle, mig=True)
        profile_of(gpu, profileId)
        items = [self._handle(_GI, gpu.index, g.id) for g in gpu.gis if g.profile_id == profileId]
        return self._fill_array(gpuInstancesRef, countRef, items)

    @_nvml
    def nvmlDeviceGetGpuInstanceById(
        self, state: NodeState, handle: Any, gpuInstanceId: int
    ) -> Any:
        gpu = self._device_gpu(state, handle, mig=True)
        if any(gi.id == gpuInstanceId for gi in gpu.gis):
            return self._handle(_GI, gpu.index, gpuInstanceId)
        raise SimNvmlFailure("NOT_FOUND", f"no GI {gpuInstanceId}")

    @_nvml
    def nvmlGpuInstanceGetInfo(self, state: NodeState, gpuInstance: Any) -> Any:
        gpu, gi = self._gi(state, gpuInstance)
        info = self._nv.c_nvmlGpuInstanceInfo_t()
        info.device = self._handle(_DEVICE, gpu.index)
        info.id, info.profileId = gi.id, gi.profile_id
        info.placement.start, info.placement.size = gi.start, gi.size
        return info

    @_nvml
    def nvmlGpuInstanceDestroy(self, state: NodeState, gpuInstance: Any) -> int:
        destroy_gi(*self._gi(state, gpuInstance))
        return int(self._nv.NVML_SUCCESS)

    # --- compute instances ---------------------------------------------------------------------

    @_nvml
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, state: NodeState, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        gpu, gi = self._gi(state, device)  # a GI handle despite the parameter's name
        if engProfile != self._nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise SimNvmlFailure("NOT_SUPPORTED", "engine profile")
        offered = ci_profiles_of(gpu, gi)
        if profile not in offered:
            raise SimNvmlFailure("NOT_SUPPORTED", f"CI profile {profile}")
        slices = offered[profile]
        gi_spec = profile_of(gpu, gi.profile_id)
        part = "" if slices == gi_spec.slice_count else f"{slices}c."
        info = self._info("c_nvmlComputeInstanceProfileInfo", version, f"MIG {part}{gi_spec.name}")
        info.id = profile
        info.sliceCount = slices
        info.instanceCount = gi_spec.slice_count // slices
        info.multiprocessorCount = gi_spec.sm_count * slices // gi_spec.slice_count
        return info

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo

    @_nvml
    def nvmlGpuInstanceCreateComputeInstance(
        self, state: NodeState, gpuInstance: Any, profileId: int
    ) -> Any:
        gpu, gi = self._gi(state, gpuInstance)
        ci = create_ci(gpu, gi, profileId, state.old_mig_uuids)
        self._store.publish_capability(gpu.minor, gi.id, ci.id)
        return self._handle(_CI, gpu.index, gi.id, ci.id)

    @_nvml
    def nvmlGpuInstanceGetComputeInstances(
        self, state: NodeState, gpuInstance: Any, profileId: int, cisRef: Any, countRef: Any
    ) -> int:
        gpu, gi = self._gi(state, gpuInstance)
        items = [
            self._handle(_CI, gpu.index, gi.id, c.id) for c in gi.cis if c.profile_id == profileId
        ]
        return self._fill_array(cisRef, countRef, items)

    @_nvml
    def nvmlGpuInstanceGetComputeInstanceById(
        self, state: NodeState, gpuInstance: Any, computeInstanceId: int
    ) -> Any:
        gpu, gi = self._gi(state, gpuInstance)
        if any(ci.id == computeInstanceId for ci in gi.cis):
            return self._handle(_CI, gpu.index, gi.id, computeInstanceId)
        raise SimNvmlFailure("NOT_FOUND", f"no CI {computeInstanceId}")

    @_nvml
    def nvmlComputeInstanceGetInfo(self, state: NodeState, computeInstance: Any) -> Any:
        gpu, gi, ci = self._ci(state, computeInstance, _CI)
        info = self._nv.c_nvmlComputeInstanceInfo_t()
        info.device = self._handle(_DEVICE, gpu.index)
        info.gpuInstance = self._handle(_GI, gpu.index, gi.id)
        info.id, info.profileId = ci.id, ci.profile_id
        # The placement starts at 0 as a fresh struct does.
        info.placement.size = ci_profiles_of(gpu, gi)[ci.profile_id]
        return info

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    @_nvml
    def nvmlComputeInstanceDestroy(self, state: NodeState, computeInstance: Any) -> int:
        _, gi, ci = self._ci(state, computeInstance, _CI)
        destroy_ci(gi, ci)
        return int(self._nv.NVML_SUCCESS)

    # --- MIG devices -------------------------------------------------------------------------

    @_nvml
    def nvmlDeviceGetMaxMigDeviceCount(self, state: NodeState, handle: Any) -> int:
        return _MAX_MIG_DEVICES if self._device_gpu(state, handle).mig_enabled else 0

    @_nvml
    def nvmlDeviceGetMigDeviceHandleByIndex(self, state: NodeState, handle: Any, index: int) -> Any:
        gpu = self._device_gpu(state, handle, mig=True)
        if not 0 <= index < _MAX_MIG_DEVICES:
            raise SimNvmlFailure("INVALID_ARGUMENT", f"MIG index {index}")
        devices = mig_devices(gpu)
        if index >= len(devices):
            raise SimNvmlFailure("NOT_FOUND", f"no MIG device at {index}")
        gi, ci = devices[index]
        return self._handle(_MIG, gpu.index, gi.id, ci.id)

    @_nvml
    def nvmlDeviceIsMigDeviceHandle(self, state: NodeState, handle: Any) -> Any:
        return ctypes.c_uint(1 if _decode(handle)[0] == _MIG else 0)

    def _mig(self, state: NodeState, handle: Any) -> tuple[SimGpu, SimGi, SimCi]:
        """The MIG device a handle names; NOT_SUPPORTED for a GPU's handle, as NVML answers."""
        if _decode(handle)[0] != _MIG:
            raise SimNvmlFailure("NOT_SUPPORTED", "not a MIG device handle")
        return self._ci(state, handle, _MIG)

    @_nvml
    def nvmlDeviceGetGpuInstanceId(self, state: NodeState, handle: Any) -> int:
        return self._mig(state, handle)[1].id

    @_nvml
    def nvmlDeviceGetAttributes(self, state: NodeState, handle: Any) -> Any:
        """A MIG device's slices (the fields hamimig reads, and the memory size)."""
        gpu, gi, ci = self._mig(state, handle)
        offered = ci_profiles_of(gpu, gi)
        return types.SimpleNamespace(
            gpuInstanceSliceCount=max(offered.values()),
            computeInstanceSliceCount=offered.get(ci.profile_id, 0),
            multiprocessorCount=0,
            memorySizeMB=0,
        )

    @_nvml
    def nvmlDeviceGetComputeInstanceId(self, state: NodeState, handle: Any) -> int:
        return self._mig(state, handle)[2].id

    @_nvml
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, state: NodeState, handle: Any) -> Any:
        return self._handle(_DEVICE, self._ci(state, handle, _MIG)[0].index)
