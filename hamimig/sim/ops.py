"""What `sim fault add` can name (docs/simulator.md), importable without loading the simulator:
the CLI builds its `--op`, `--action` and `--model` choices from here for help, completion and
the man page, and a test keeps the NVML list equal to the simulator's."""

from __future__ import annotations

import enum

from hamimig.sim.models import MODELS
from hamimig.vocabulary import FileOpName

DRIVER_VERSION = "550.127.05"
"""The driver a simulated node reports unless `sim init --driver-version` names another."""
MAX_SIM_GPUS = 32
"""The most GPUs `sim init --count` builds (NVML numbers at most 32 GPU minors here)."""
MAX_FAULT_CALLS = 2**31 - 1
"""The most calls a fault fires on or lets pass first (`sim fault add --times`, `--skip`)."""

SIMULATED_NVML: tuple[str, ...] = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstanceProfileInfoById",
    "nvmlDeviceGetGpuInstancePossiblePlacements",
    "nvmlDeviceGetGpuInstanceRemainingCapacity",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlDeviceGetGpuInstances",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceGetComputeInstances",
    "nvmlGpuInstanceGetComputeInstanceById",
    "nvmlComputeInstanceGetInfo",
    "nvmlComputeInstanceDestroy",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
)


class BusyKind(str, enum.Enum):
    """The kinds of process `sim busy --kind` runs on an instance, each listed by its NVML call
    (HAMi counts every kind as busy)."""

    COMPUTE = "compute"
    """nvmlDeviceGetComputeRunningProcesses"""
    GRAPHICS = "graphics"
    """nvmlDeviceGetGraphicsRunningProcesses"""
    MPS = "mps"
    """nvmlDeviceGetMPSComputeRunningProcesses"""


class FaultAction(str, enum.Enum):
    """What a fault does when it fires."""

    RAISE = "raise"
    """The call fails with the fault's error; the process goes on."""
    CRASH_BEFORE = "crash-before"
    """The process ends (exit status 137) before the operation takes effect."""
    CRASH_AFTER = "crash-after"
    """The process ends (exit status 137) after the operation took effect."""


FaultOp = enum.Enum(  # type: ignore[misc]
    "FaultOp",
    [(name, name) for name in (*SIMULATED_NVML, *(op.value for op in FileOpName))],
    type=str,
)
"""Every operation a fault can name: a simulated NVML function or a file operation."""

SimModel = enum.Enum("SimModel", [(key, key) for key in MODELS], type=str)  # type: ignore[misc]
"""The boards `sim init --model` builds."""
