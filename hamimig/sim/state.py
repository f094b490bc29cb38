"""The simulated node's persistent state and the rules of MIG geometry it enforces.

The state is one JSON document (GPUs, their GI/CI layout, busy marks, pending faults and NVML
call counts). A file-backed store lets several processes share one simulated node the way they
would share a real one: every simulated NVML call is one locked read-modify-write of the file.
An in-memory store serves benchmarks that do not need sharing.

Geometry rules live here as plain functions over that document, so the pynvml stand-in
(`hw/sim.py`) and the operator's `sim create` obey exactly the same rules.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hamimig.errors import HardwareError, UsageError
from hamimig.sim.files import NodeFiles, write_access, write_node_files
from hamimig.sim.models import FULL_CI_PROFILE_BY_SLICES, MEMORY_SLICES, MODELS, ModelSpec
from hamimig.vocabulary import FileOpName

SCHEMA_VERSION = 1
DRIVER_VERSION = "550.127.05"
FILE_OPS: tuple[str, ...] = tuple(op.value for op in FileOpName)
FAULT_ACTIONS = ("raise", "crash-before", "crash-after")
CRASH_EXIT_STATUS = 137

# The NVML error names a fault may carry (FACTS.md section 1 codes).
NVML_ERROR_CODES: dict[str, int] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "TIMEOUT": 10,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "IN_USE": 19,
    "INSUFFICIENT_RESOURCES": 23,
    "UNKNOWN": 999,
}

# Up to 32 GPUs, 15 GIs each, 8 CIs each: the shape of /proc/driver/nvidia-caps/mig-minors.
MINORS_GPUS, MINORS_GIS, MINORS_CIS = 32, 15, 8

State = dict[str, Any]


class SimNvmlFailure(Exception):
    """A simulated NVML call fails with this NVML error code (turned into pynvml's class)."""

    def __init__(self, code: int, detail: str = "") -> None:
        super().__init__(detail or f"NVML error {code}")
        self.code = code
        self.detail = detail


def capability_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The minor `mig-minors` gives `gpu<minor>/gi<gi>[/ci<ci>]/access` on a simulated node."""
    per_gi = 1 + MINORS_CIS
    return 3 + gpu_minor * MINORS_GIS * per_gi + gi * per_gi + (0 if ci is None else 1 + ci)


def mig_minors_text() -> str:
    """The content of a driver's `mig-minors` file for every possible GPU minor."""
    lines = ["config 1", "monitor 2"]
    for gpu in range(MINORS_GPUS):
        for gi in range(MINORS_GIS):
            lines.append(f"gpu{gpu}/gi{gi}/access {capability_minor(gpu, gi)}")
            for ci in range(MINORS_CIS):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {capability_minor(gpu, gi, ci)}")
    return "\n".join(lines) + "\n"


def new_state(model: ModelSpec, count: int) -> State:
    return {
        "kind": "HamimigSimNode",
        "version": SCHEMA_VERSION,
        "driverVersion": DRIVER_VERSION,
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{uuid.uuid4()}",
                "model": model.key,
                "minor": i,
                "migMode": {"current": 1, "pending": 1},
                "gpuInstances": [],
            }
            for i in range(count)
        ],
        "faults": [],
        "calls": {},
    }


class SimStore:
    """Holds the state: in a JSON file shared under a lock, or only in memory.

    NVML call counts of a file-backed node are kept in memory and merged into the file under
    the lock whenever this process writes the state anyway (a mutation, a consumed fault, a
    crash, `nvmlShutdown`) and when the process exits: a read-only call never rewrites the file.
    """

    def __init__(self, path: Path | None, state: State | None = None) -> None:
        self.path = path
        self._memory = state
        self._pending: dict[str, int] = {}
        if path is not None:
            _LIVE.add(self)

    @property
    def lock_path(self) -> Path:
        assert self.path is not None
        return self.path.with_name(self.path.name + ".lock")

    @property
    def minors_path(self) -> Path | None:
        return None if self.path is None else self.path.with_name("mig-minors")

    @property
    def files(self) -> NodeFiles | None:
        """The driver's and NVIDIA's files that stand beside the simulated node."""
        return None if self.path is None else NodeFiles.beside(self.path)

    def create(self, state: State) -> None:
        """Write a fresh node (and the driver's and NVIDIA's files), replacing any previous one."""
        if self.path is None:
            self._memory = state
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._pending.clear()  # counts of the node this one replaces
            self._write(state)
        minors = self.minors_path
        assert minors is not None
        minors.write_text(mig_minors_text(), encoding="ascii")
        files = self.files
        assert files is not None
        write_node_files(files, state["gpus"], state["driverVersion"], capability_minor)

    def publish_capability(self, gpu_minor: int, gi_id: int, ci_id: int | None = None) -> None:
        """Write the `access` file the driver publishes for a new GI or CI (file-backed only)."""
        files = self.files
        if files is not None and gpu_minor < MINORS_GPUS and gi_id < MINORS_GIS:
            write_access(files, gpu_minor, gi_id, ci_id, capability_minor(gpu_minor, gi_id, ci_id))

    def count(self, state: State, name: str) -> None:
        """Count one NVML call: in the in-memory state directly, else until the next write."""
        if self.path is None:
            calls = state["calls"]
            calls[name] = calls.get(name, 0) + 1
        else:
            self._pending[name] = self._pending.get(name, 0) + 1

    def _merge(self, state: State) -> None:
        calls = state["calls"]
        for name, n in self._pending.items():
            calls[name] = calls.get(name, 0) + n
        self._pending.clear()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> State:
        if self.path is None:
            if self._memory is None:
                raise UsageError("the in-memory simulated node was never initialised")
            return self._memory
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsageError(
                f"no simulated node at {self.path}: run 'hamimig --sim {self.path} sim init'"
            ) from None
        except OSError as exc:
            raise UsageError(f"cannot read simulated node {self.path}: {exc.strerror}") from None
        try:
            state = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(f"simulated node {self.path} is not valid JSON: {exc}") from None
        if not isinstance(state, dict) or state.get("kind") != "HamimigSimNode":
            raise UsageError(f"{self.path} is not a hamimig simulated node")
        if state.get("version") != SCHEMA_VERSION:
            raise UsageError(
                f"simulated node {self.path} has version {state.get('version')!r}, "
                f"this hamimig reads version {SCHEMA_VERSION}"
            )
        return cast(State, state)

    def _write(self, state: State) -> None:
        # No fsync: the simulator stands for a GPU, not for a disk; a kill -9 of the process
        # never loses what reached the page cache, which is all crash faults need.
        if self.path is None:
            self._memory = state
            return
        self._merge(state)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    def read(self) -> State:
        """A consistent copy of the state for read-only use (not counted as a call), with this
        process's calls counted so far."""
        if self.path is None:
            return json.loads(json.dumps(self._read()))  # type: ignore[no-any-return]
        with self._locked():
            state = self._read()
        calls = state["calls"]
        for name, n in self._pending.items():
            calls[name] = calls.get(name, 0) + n
        return state

    @contextlib.contextmanager
    def transaction(self) -> Iterator[State]:
        """Lock, load, let the caller mutate, and write back, also when the caller raises."""
        with self.session() as session:
            session.dirty = True
            yield session.state

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """Lock and load; write back on the way out only if the caller marked it dirty."""
        if self.path is None:
            yield Session(self._read())
            return
        with self._locked():
            session = Session(self._read())
            try:
                yield session
            finally:
                if session.dirty:
                    self._write(session.state)

    def save_now(self, state: State) -> None:
        """Write the state immediately (inside a transaction, before a simulated crash)."""
        self._write(state)

    def flush(self) -> None:
        """Merge this process's call counts into the file (at `nvmlShutdown` and at exit)."""
        if self.path is None or not self._pending:
            return
        with self.transaction():
            pass


@dataclass
class Session:
    """The locked state of one simulated call; `dirty` asks for it to be written back."""

    state: State
    dirty: bool = False


_LIVE: weakref.WeakSet[SimStore] = weakref.WeakSet()


def flush_counts() -> None:
    """Merge every live store's pending call counts into its file (this process's calls become
    visible to readers of the file, as they do when the process exits)."""
    for store in list(_LIVE):
        store.flush()


@atexit.register
def _flush_at_exit() -> None:
    for store in list(_LIVE):
        # A node whose directory is already gone (a test's temporary node) has nobody to tell.
        with contextlib.suppress(OSError, UsageError):
            store.flush()


def fault_armed(state: State, op: str) -> bool:
    """Whether a pending fault names `op` (its skip or times count will change)."""
    return any(f["op"] == op for f in state["faults"])


# ---------------------------------------------------------------------------------------------
# Faults


@dataclass(frozen=True)
class Fault:
    """One fired fault: what the caller must do instead of, or around, the operation."""

    op: str
    action: str
    error: str


def normalise_fault(
    op: str, error: str | None, action: str, times: int, skip: int, gpu: int | None
) -> dict[str, Any]:
    """Validate a fault as `sim fault add` receives it and return its stored form."""
    is_file_op = op in FILE_OPS
    if not is_file_op and not (op.startswith("nvml") and op.isidentifier()):
        raise UsageError(
            f"unknown fault op {op!r}: use a pynvml function name (e.g. nvmlGpuInstanceDestroy) "
            f"or one of {', '.join(FILE_OPS)}"
        )
    if action not in FAULT_ACTIONS:
        raise UsageError(f"unknown fault action {action!r}: use one of {', '.join(FAULT_ACTIONS)}")
    if is_file_op:
        name = (error or "EIO").upper()
        if not name.startswith("E") or not isinstance(getattr(errno, name, None), int):
            raise UsageError(f"unknown errno name {name!r} for file op {op} (e.g. EIO, EACCES)")
    else:
        name = (error or "UNKNOWN").upper().removeprefix("NVML_ERROR_")
        if name not in NVML_ERROR_CODES:
            raise UsageError(
                f"unknown NVML error name {name!r}: use one of {', '.join(NVML_ERROR_CODES)}"
            )
    if times < 1:
        raise UsageError(f"--times must be at least 1, not {times}")
    if skip < 0:
        raise UsageError(f"--skip must not be negative, not {skip}")
    return {"op": op, "error": name, "action": action, "times": times, "skip": skip, "gpu": gpu}


def take_fault(state: State, op: str, gpu: int | None) -> Fault | None:
    """Count one matching call against the faults and return the one that fires, if any.

    Consumption is recorded in `state`; callers write it back before the fault takes effect,
    so a later process never fires the same fault again.
    """
    faults: list[dict[str, Any]] = state["faults"]
    for fault in faults:
        if fault["op"] != op:
            continue
        if fault["gpu"] is not None and fault["gpu"] != gpu:
            continue
        if fault["skip"] > 0:
            fault["skip"] -= 1
            return None
        fault["times"] -= 1
        if fault["times"] <= 0:
            faults.remove(fault)
        return Fault(op=op, action=fault["action"], error=fault["error"])
    return None


def crash() -> None:
    """End the process at once, as kill -9 would: no cleanup, no buffered output."""
    os._exit(CRASH_EXIT_STATUS)


def run_file_op(store: SimStore, op: str, perform: Callable[[], None]) -> None:
    """Run a durable-state file operation under the simulator's file-operation faults.

    The store layer calls this around each write or removal when the node is simulated; the
    node's file is rewritten only when a fault names the operation.
    """
    with store.session() as session:
        state = session.state
        session.dirty = fault_armed(state, op)
        fault = take_fault(state, op, None) if session.dirty else None
        if fault is None:
            pass
        elif fault.action == "raise":
            code = getattr(errno, fault.error)
            raise OSError(code, os.strerror(code), f"<simulated fault on {op}>")
        else:
            store.save_now(state)
            if fault.action == "crash-before":
                crash()
    perform()
    if fault is not None and fault.action == "crash-after":
        crash()


# ---------------------------------------------------------------------------------------------
# Geometry rules


def model_of(gpu: dict[str, Any]) -> ModelSpec:
    return MODELS[gpu["model"]]


def gi_id_for(gpu: dict[str, Any], size: int, start: int) -> int:
    """Pick a GI ID the way A100/H100 drivers were observed to (FACTS.md), lowest free otherwise."""
    used: set[int] = {int(gi["id"]) for gi in gpu["gpuInstances"]}
    preferred: list[int] = []
    if size == 1:
        preferred = [7 + start]
    elif size == 2 and start < 6:
        preferred = [3 + start // 2]
    elif size == 4:
        preferred = [1 if start == 0 else 2, 2 if start == 0 else 1]
    elif size == MEMORY_SLICES:
        preferred = [0]
    candidates: list[int] = [*preferred, *range(1, MINORS_GIS)]
    for candidate in candidates:
        if candidate not in used:
            return candidate
    raise SimNvmlFailure(NVML_ERROR_CODES["INSUFFICIENT_RESOURCES"], "no free GI ID")


def create_gi(gpu: dict[str, Any], profile_id: int, start: int) -> dict[str, Any]:
    """Create a GI on a simulated GPU, enforcing placement legality, overlap and limits."""
    if gpu["migMode"]["current"] != 1:
        raise SimNvmlFailure(NVML_ERROR_CODES["NOT_SUPPORTED"], "MIG mode is disabled")
    profile = model_of(gpu).profile_by_id(profile_id)
    if profile is None:
        raise SimNvmlFailure(NVML_ERROR_CODES["INVALID_ARGUMENT"], f"no profile ID {profile_id}")
    if start not in profile.starts:
        raise SimNvmlFailure(
            NVML_ERROR_CODES["INVALID_ARGUMENT"],
            f"{start} is not a legal start for {profile.name}",
        )
    end = start + profile.size
    for gi in gpu["gpuInstances"]:
        p = gi["placement"]
        if start < p["start"] + p["size"] and p["start"] < end:
            raise SimNvmlFailure(
                NVML_ERROR_CODES["INSUFFICIENT_RESOURCES"],
                f"placement {start}:{profile.size} overlaps GI {gi['id']} at "
                f"{p['start']}:{p['size']}",
            )
    same = sum(1 for gi in gpu["gpuInstances"] if gi["profileId"] == profile_id)
    if same >= profile.max_instances:
        raise SimNvmlFailure(
            NVML_ERROR_CODES["INSUFFICIENT_RESOURCES"],
            f"{profile.name} allows at most {profile.max_instances} instance(s)",
        )
    gi = {
        "id": gi_id_for(gpu, profile.size, start),
        "profileId": profile_id,
        "placement": {"start": start, "size": profile.size},
        "computeInstances": [],
        "held": False,
    }
    gpu["gpuInstances"].append(gi)
    gpu["gpuInstances"].sort(key=lambda g: g["id"])
    return gi


def gi_slices(gpu: dict[str, Any], gi: dict[str, Any]) -> int:
    profile = model_of(gpu).profile_by_id(gi["profileId"])
    assert profile is not None
    return profile.slice_count


def ci_profiles_of(gpu: dict[str, Any], gi: dict[str, Any]) -> dict[int, int]:
    """CI profile ID -> compute slices offered by a GI (FACTS.md: 7g offers 1,2,3,4,7c; ...)."""
    slices = gi_slices(gpu, gi)
    offered = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7)}[slices]
    return {FULL_CI_PROFILE_BY_SLICES[s]: s for s in offered}


def create_ci(gpu: dict[str, Any], gi: dict[str, Any], ci_profile_id: int) -> dict[str, Any]:
    offered = ci_profiles_of(gpu, gi)
    if ci_profile_id not in offered:
        raise SimNvmlFailure(
            NVML_ERROR_CODES["NOT_SUPPORTED"], f"CI profile {ci_profile_id} not offered"
        )
    used = sum(offered.get(ci["profileId"], 0) for ci in gi["computeInstances"])
    if used + offered[ci_profile_id] > gi_slices(gpu, gi):
        raise SimNvmlFailure(NVML_ERROR_CODES["INSUFFICIENT_RESOURCES"], "GI has no free slices")
    taken = {ci["id"] for ci in gi["computeInstances"]}
    ci_id = next(i for i in range(MINORS_CIS) if i not in taken)
    # A fresh random UUID every time, so a recreated instance never passes for the old one.
    ci = {
        "id": ci_id,
        "profileId": ci_profile_id,
        "migUUID": f"MIG-{uuid.uuid4()}",
        "busy": False,
    }
    gi["computeInstances"].append(ci)
    gi["computeInstances"].sort(key=lambda c: c["id"])
    return ci


def destroy_ci(gi: dict[str, Any], ci: dict[str, Any]) -> None:
    if ci.get("busy"):
        raise SimNvmlFailure(NVML_ERROR_CODES["IN_USE"], "processes run on this instance")
    gi["computeInstances"].remove(ci)


def destroy_gi(gpu: dict[str, Any], gi: dict[str, Any]) -> None:
    """A GI goes only when it has no CI and no client holds it (FACTS.md: destroy CIs first)."""
    if gi["computeInstances"]:
        raise SimNvmlFailure(NVML_ERROR_CODES["IN_USE"], "GI still has compute instances")
    if gi.get("held"):
        raise SimNvmlFailure(NVML_ERROR_CODES["IN_USE"], "a client holds this GI")
    gpu["gpuInstances"].remove(gi)


def mig_devices(gpu: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(GI, CI) pairs in MIG-device index order; GIs without a CI are not MIG devices."""
    if gpu["migMode"]["current"] != 1:
        return []
    return [(gi, ci) for gi in gpu["gpuInstances"] for ci in gi["computeInstances"]]


def find_gpu(state: State, ref: str | int) -> dict[str, Any]:
    """A GPU by NVML index or UUID; `UsageError` names what was asked for."""
    gpus: list[dict[str, Any]] = state["gpus"]
    text = str(ref)
    for gpu in gpus:
        if text == gpu["uuid"] or (text.isdigit() and int(text) == gpu["index"]):
            return gpu
    raise UsageError(f"no GPU {text!r} on the simulated node (it has {len(gpus)} GPU(s))")


def find_mig(state: State, mig_uuid: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    for gpu in state["gpus"]:
        for gi in gpu["gpuInstances"]:
            for ci in gi["computeInstances"]:
                if ci["migUUID"] == mig_uuid:
                    return gpu, gi, ci
    raise UsageError(f"no MIG instance {mig_uuid} on the simulated node")


def held_gi(state: State, mig_uuid: str) -> dict[str, Any] | None:
    """The GI a client holds on behalf of `mig_uuid` (`sim busy --gi-only`), CI or not."""
    for gpu in state["gpus"]:
        for gi in gpu["gpuInstances"]:
            if gi.get("heldFor") == mig_uuid:
                return gi  # type: ignore[no-any-return]
    return None


def as_hardware_error(exc: SimNvmlFailure, what: str) -> HardwareError:
    """The simulated hardware refused an operator's change, as NVML would have."""
    name = next((n for n, c in NVML_ERROR_CODES.items() if c == exc.code), str(exc.code))
    return HardwareError(f"{what} failed: NVML {name}: {exc.detail}")
