"""The simulated node's persistent state and the rules of MIG geometry it enforces.

One JSON document, so several processes share a simulated node as they would a real one (each
simulated NVML call runs under the file's lock). The rules are plain functions over it, so the
pynvml stand-in (`sim/nvml.py`) and the operator's `sim create` obey exactly the same ones.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import functools
import json
import operator
import os
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn, cast

from pydantic import (
    AliasPath,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from hamimig.errors import UsageError
from hamimig.hw.types import FULL_CI_PROFILE_BY_SLICES, MEMORY_SLICES
from hamimig.model import Model
from hamimig.sim.files import (
    FILE_MODE,
    HOME_SUFFIX,
    MINORS_CIS,
    MINORS_GIS,
    NodeFiles,
    home_problem,
    no_node,
    not_a_node,
    recorded_home,
    write_access,
    write_node_files,
)
from hamimig.sim.models import MODELS, ModelSpec, ProfileSpec
from hamimig.sim.ops import DRIVER_VERSION, MAX_FAULT_CALLS, BusyKind, FaultAction
from hamimig.vocabulary import DURABLE_FILE_OPS, FileOpName

SCHEMA_VERSION = 1
LOCK_FILE = "node.lock"
"""The simulated node's lock, in its home: it serialises the processes that use the node."""
FIRST_NEW_UUID_DRIVER = 470
"""Drivers before R470 name a MIG device `MIG-GPU-<gpu uuid>/<gi>/<ci>`, later ones `MIG-<uuid>`."""
FILE_OPS: tuple[str, ...] = tuple(op.value for op in FileOpName)
DURABLE_OPS: tuple[str, ...] = tuple(op.value for op in DURABLE_FILE_OPS)
"""The file operations of the durable state (every file op but the event journal's append)."""
FAULT_ACTIONS = tuple(action.value for action in FaultAction)
CRASH_EXIT_STATUS = 137

# The NVML error names a fault may carry, with nvml.h's codes.
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

Document = dict[str, Any]
"""The state's JSON form, as stored in the node's file."""

MAX_CLOCK_OFFSET = 100 * 366 * 86400.0


class _Mutable(Model, frozen=False):
    """The simulated node's parts change in place (a simulated call edits the locked state and
    writes it back); loading one checks it as strictly as hamimig's own files."""


class SimCi(_Mutable):
    """A compute instance: with its GI, one MIG device."""

    id: int
    profile_id: int = Field(alias="profileId")
    mig_uuid: str = Field(alias="migUUID")
    busy: set[BusyKind] = Field(default_factory=set)
    """The kinds of process that run on it (`sim busy --kind`), each listed by its NVML call;
    any of them makes destroying it fail with IN_USE."""

    @field_validator("busy", mode="before")
    @classmethod
    def _kinds(cls, mark: object) -> set[BusyKind]:
        """A list of kinds, or (files written before kinds) a boolean: true is compute."""
        if mark is None or mark is False:
            return set()
        if mark is True:
            return {BusyKind.COMPUTE}
        if not isinstance(mark, list):
            raise ValueError(f"busy mark {mark!r} is neither a list of kinds nor a boolean")
        return {BusyKind(str(kind)) for kind in mark}

    @field_serializer("busy")
    def _in_order(self, busy: set[BusyKind]) -> list[str]:
        return [kind.value for kind in BusyKind if kind in busy]


class SimGi(_Mutable):
    """A GPU instance at its placement (start and size in memory slices)."""

    id: int
    profile_id: int = Field(alias="profileId")
    start: int = Field(validation_alias=AliasPath("placement", "start"))
    size: int = Field(validation_alias=AliasPath("placement", "size"))
    cis: list[SimCi] = Field(alias="computeInstances")
    held: bool = False
    """A client holds the GI: destroying it fails with IN_USE (`sim busy --gi-only`)."""
    held_for: str | None = Field(None, alias="heldFor", exclude_if=lambda name: name is None)
    """The MIG UUID `sim busy --gi-only` named, so `--clear` finds the GI after its CI is gone."""

    def overlaps(self, start: int, size: int) -> bool:
        return start < self.start + self.size and self.start < start + size

    @model_serializer(mode="wrap")
    def _placed(self, handler: SerializerFunctionWrapHandler) -> Document:
        return _nest(handler(self), "placement", "start", "size")


class SimGpu(_Mutable):
    """A GPU: its identity, MIG mode (current and pending a reset) and GPU instances."""

    index: int
    uuid: str
    model: str
    minor: int
    mig_current: int = Field(validation_alias=AliasPath("migMode", "current"))
    mig_pending: int = Field(validation_alias=AliasPath("migMode", "pending"))
    gis: list[SimGi] = Field(alias="gpuInstances")

    @property
    def mig_enabled(self) -> bool:
        return self.mig_current == 1

    @model_validator(mode="after")
    def _known_model(self) -> SimGpu:
        if self.model not in MODELS:
            raise ValueError(f"GPU {self.index} has unknown model {self.model!r}")
        return self

    @model_serializer(mode="wrap")
    def _modes(self, handler: SerializerFunctionWrapHandler) -> Document:
        return _nest(handler(self), "migMode", "current", "pending", prefix="mig_")


def _nest(out: Document, key: str, *names: str, prefix: str = "") -> Document:
    """The stored form groups some fields under one key (`placement`, `migMode`), where the
    first of them stands: `sim show -o json` prints the keys in that order."""
    at = list(out).index(prefix + names[0])
    nested = {name: out.pop(prefix + name) for name in names}
    items = list(out.items())
    return dict([*items[:at], (key, nested), *items[at:]])


class SimFault(_Mutable):
    """A pending fault: the next matching calls (after `skip`) fail or crash `times` times."""

    op: str
    error: str
    action: str
    times: int
    skip: int
    gpu: int | None = None

    @model_validator(mode="after")
    def _known(self) -> SimFault:
        """What `sim fault add` refuses, a hand-edited node file may not hold either; the error
        name is kept as NVML or errno spells it."""
        is_file_op = self.op in FILE_OPS
        if not is_file_op and not (self.op.startswith("nvml") and self.op.isidentifier()):
            raise ValueError(
                f"unknown fault op {self.op!r}: use a pynvml function name (e.g. "
                f"nvmlGpuInstanceDestroy) or one of {', '.join(FILE_OPS)}"
            )
        if self.action not in FAULT_ACTIONS:
            raise ValueError(
                f"unknown fault action {self.action!r}: use one of {', '.join(FAULT_ACTIONS)}"
            )
        name = self.error.upper()
        if is_file_op:
            if not name.startswith("E") or not isinstance(getattr(errno, name, None), int):
                raise ValueError(
                    f"unknown errno name {name!r} for file op {self.op} (e.g. EIO, EACCES)"
                )
        elif (name := name.removeprefix("NVML_ERROR_")) not in NVML_ERROR_CODES:
            raise ValueError(
                f"unknown NVML error name {name!r}: use one of {', '.join(NVML_ERROR_CODES)}"
            )
        self.error = name
        for what, count, least in (("times", self.times, 1), ("skip", self.skip, 0)):
            if not least <= count <= MAX_FAULT_CALLS:
                raise ValueError(
                    f"a fault's {what} must be between {least} and {MAX_FAULT_CALLS}, not {count}"
                )
        return self


class NodeState(_Mutable):
    """The whole simulated node, as its file holds it."""

    kind: Literal["HamimigSimNode"] = "HamimigSimNode"
    version: Literal[1] = 1
    driver_version: str = Field(alias="driverVersion")
    gpus: list[SimGpu]
    faults: list[SimFault]
    calls: dict[str, int]
    """NVML calls counted so far, by function name (merged in from every process)."""
    clock_offset: float = Field(0.0, alias="clockOffsetSeconds", exclude_if=operator.not_)
    """Seconds the node's clock runs ahead of the host's (`sim clock`), so that tests of
    anything that depends on time move it instead of sleeping."""
    home: str | None = Field(None, exclude_if=lambda name: name is None)
    """The name of the node's own directory beside its file (`files.node_home`); None for a
    node made before homes, or one held in memory."""

    @property
    def old_mig_uuids(self) -> bool:
        """Whether this node's driver names MIG devices in the pre-R470 form."""
        major = self.driver_version.split(".", 1)[0]
        return major.isdigit() and int(major) < FIRST_NEW_UUID_DRIVER

    @field_validator("clock_offset", mode="before")
    @classmethod
    def _within_a_century(cls, value: object) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not -MAX_CLOCK_OFFSET <= value <= MAX_CLOCK_OFFSET  # NaN fails this too
        ):
            raise ValueError(f"clockOffsetSeconds must be seconds within a century, not {value!r}")
        return float(value)

    @field_validator("home")
    @classmethod
    def _beside(cls, name: str | None) -> str | None:
        problem = None if name is None else home_problem(name)
        if problem is not None:
            raise ValueError(problem)
        return name


def problem(exc: ValidationError) -> str:
    """The first thing wrong with a node, in the words of the check that found it."""
    error = exc.errors(include_url=False)[0]
    cause = error.get("ctx", {}).get("error")
    where = ".".join(map(str, error["loc"]))
    return str(cause) if cause is not None else f"{where}: {error['msg']}"


class SimNvmlFailure(Exception):
    """A simulated NVML call fails with this NVML error (a key of `NVML_ERROR_CODES`, turned
    into pynvml's class)."""

    def __init__(self, error: str, detail: str = "") -> None:
        super().__init__(detail or f"NVML error {NVML_ERROR_CODES[error]}")
        self.error = error
        self.detail = detail


def new_node(model: ModelSpec, count: int, driver_version: str = DRIVER_VERSION) -> NodeState:
    """A fresh node: COUNT GPUs of MODEL, MIG enabled, no instances."""
    modes = {"mig_current": 1, "mig_pending": 1}  # MIG on, and still on after a reset
    gpus = [
        SimGpu(index=i, uuid=f"GPU-{uuid.uuid4()}", model=model.key, minor=i, gis=[], **modes)
        for i in range(count)
    ]
    return NodeState(driver_version=driver_version, gpus=gpus, faults=[], calls={})


class SimStore:
    """Holds the state: in a JSON file shared under a lock, or only in memory (benchmarks and
    property tests). NVML call counts stay in memory until this process writes the node anyway
    (a mutation, a consumed fault, a crash, `nvmlShutdown`) or exits, so a read-only call never
    rewrites the file."""

    def __init__(self, path: Path | None, state: Document | None = None) -> None:
        self.path = path
        self._memory = state
        self._pending: dict[str, int] = {}
        if path is not None:
            _LIVE.add(self)

    @functools.cached_property
    def lock_path(self) -> Path:
        """In the node's home, with everything else of it; beside the file for a node made
        before homes."""
        assert self.path is not None
        home = recorded_home(self.path)
        if home is None and not self.path.exists():
            home = self.path.name + HOME_SUFFIX  # the node `create` is about to make
        if home is None:
            return self.path.with_name(self.path.name + ".lock")
        return self.path.parent / home / LOCK_FILE

    @functools.cached_property
    def files(self) -> NodeFiles | None:
        """The driver's and NVIDIA's files of the simulated node (read once: only `create`
        changes where they are)."""
        return None if self.path is None else NodeFiles.of(self.path)

    def create(self, state: NodeState) -> None:
        """Write a fresh node (and the driver's and NVIDIA's files), replacing any previous one."""
        if self.path is None:
            self._memory = state.to_json()
            return
        state.home = self.path.name + HOME_SUFFIX
        home = self.path.parent / state.home
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Not group-writable whatever the umask: the state directory's parent (`safety`).
        home.mkdir(mode=0o755, exist_ok=True)
        self.lock_path = home / LOCK_FILE
        with self._locked(made=False):
            self._pending.clear()  # counts of the node this one replaces
            self.save_now(state)
        self.files = NodeFiles.within(home)
        write_node_files(self.files, [g.to_json() for g in state.gpus], state.driver_version)

    def publish_capability(self, gpu_minor: int, gi_id: int, ci_id: int | None = None) -> None:
        """Write the `access` file the driver publishes for a new GI or CI (file-backed only)."""
        if self.files is not None:
            write_access(self.files, gpu_minor, gi_id, ci_id)

    def count(self, name: str) -> None:
        """Count one NVML call, to be merged into the stored state at the next write."""
        self._pending[name] = self._pending.get(name, 0) + 1

    def _merge(self, calls: dict[str, int]) -> None:
        for name, n in self._pending.items():
            calls[name] = calls.get(name, 0) + n
        self._pending.clear()

    @contextlib.contextmanager
    def _locked(self, made: bool = True) -> Iterator[None]:
        """The node's lock; for a node already `made` (all but `create`), only when its file
        exists, so a mistyped `--sim` leaves no lock file behind."""
        assert self.path is not None
        if (made or self.path.exists()) and (problem := not_a_node(self.path)) is not None:
            raise problem
        fd = self._lock_file(made)
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            if fd is not None:
                os.close(fd)

    def _lock_file(self, made: bool) -> int | None:
        """The lock file read-write (created if need be), else read-only where this user may not
        write beside an existing node (flock takes that too), else None: the node is then read
        unlocked, which is sound, as a writer replaces the file by an atomic rename (a read sees
        one whole version), and a write fails at its temp file as it must."""
        assert self.path is not None
        try:
            return os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # its directory is missing: there is no node here
            raise no_node(self.path) from None
        except OSError as exc:
            if not made or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
        try:
            return os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None

    def _raw(self) -> str:
        assert self.path is not None
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise no_node(self.path) from None
        except OSError as exc:
            raise UsageError(f"cannot read simulated node {self.path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise UsageError(f"simulated node {self.path} is not UTF-8 text") from None

    def _document(self, raw: str | None) -> Document:
        """The document `raw` holds, or (None) the one in memory."""
        if raw is None:
            if self._memory is None:
                raise UsageError("the in-memory simulated node was never initialised")
            return self._memory
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(f"simulated node {self.path} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("kind") != "HamimigSimNode":
            raise UsageError(f"{self.path} is not a hamimig simulated node")
        if doc.get("version") != SCHEMA_VERSION:
            raise UsageError(
                f"simulated node {self.path} has version {doc.get('version')!r}, "
                f"this hamimig reads version {SCHEMA_VERSION}"
            )
        return cast(Document, doc)

    def _load(self, shared: bool = False) -> NodeState:
        """The state, parsed. With `shared`, a file whose text is exactly what this process
        last read or wrote gives back that same parsed object (one NVML call after another
        would otherwise parse the whole node each time); the caller holds the lock and writes
        back whatever it changes (`Session.dirty`), so the object and the text stay equal."""
        path = self.path
        raw = None if path is None else self._raw()
        cached = _PARSED.get(path) if shared and path is not None else None
        if cached is not None and cached[0] == raw:
            return cached[1]
        try:
            state = NodeState.model_validate(self._document(raw))
        except ValidationError as exc:
            where = "the in-memory simulated node" if path is None else str(path)
            raise UsageError(f"{where} is malformed: {problem(exc)}") from None
        if shared and path is not None and raw is not None:
            _remember(path, raw, state)
        return state

    def save_now(self, state: NodeState) -> None:
        """Write the state (with this process's counts) now: at the end of a session that
        changed it, or inside one before a simulated crash."""
        # No fsync: the simulator stands for a GPU, not for a disk; a kill -9 of the process
        # never loses what reached the page cache, which is all crash faults need.
        self._merge(state.calls)
        doc = state.to_json()
        if self.path is None:
            assert self._memory is not None
            self._memory.clear()  # in place: whoever gave the document sees the node
            self._memory.update(doc)
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        text = json.dumps(doc, sort_keys=True)  # no indent: C's encoder, 5x Python's
        try:
            tmp.write_text(text, encoding="utf-8")
            tmp.chmod(FILE_MODE)
            os.replace(tmp, self.path)
        except BaseException:
            # The state in memory may differ from the file now: never serve it again.
            _PARSED.pop(self.path, None)
            raise
        _remember(self.path, text, state)

    def _guard(self) -> contextlib.AbstractContextManager[None]:
        """The node's lock; nothing to lock for a node held in memory."""
        return contextlib.nullcontext() if self.path is None else self._locked()

    def read(self) -> NodeState:
        """A consistent copy of the state for read-only use (not counted as a call), with this
        process's calls counted so far."""
        with self._guard():
            state = self._load()
        for name, n in self._pending.items():
            state.calls[name] = state.calls.get(name, 0) + n
        return state

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """Lock and load; write back on the way out only if the caller marked it dirty."""
        with self._guard():
            session = Session(self._load(shared=True))
            before = session.state.to_json() if CHECK_READS and self.path is not None else None
            try:
                yield session
            finally:
                if session.dirty:
                    self.save_now(session.state)
                elif self.path is None:
                    self._merge(self._document(None)["calls"])
                elif before is not None and session.state.to_json() != before:
                    _PARSED.pop(self.path, None)
                    raise AssertionError("a read-only simulated call changed the node's state")

    @contextlib.contextmanager
    def edit(self) -> Iterator[NodeState]:
        """Lock, load, let the caller mutate, and write back, also when the caller raises."""
        with self.session() as session:
            session.dirty = True
            yield session.state

    def publish_counts(self) -> None:
        """`flush` where the node can be written (at `nvmlShutdown`). The counts are
        bookkeeping: a node in a read-only directory keeps this process's unpublished rather
        than failing a command that only reads it."""
        try:
            self.flush()
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise

    def flush(self) -> None:
        """Merge this process's call counts into the file (at `nvmlShutdown` and at exit)."""
        if self.path is None or not self._pending:
            return
        with self.edit():
            pass


@dataclass
class Session:
    """The locked state of one simulated call; `dirty` asks for it to be written back."""

    state: NodeState
    dirty: bool = False


_LIVE: weakref.WeakSet[SimStore] = weakref.WeakSet()

CHECK_READS = False
"""Tests set this to have every session that is not written back prove it changed nothing."""

_PARSED: dict[Path, tuple[str, NodeState]] = {}
"""Per node file: the text this process last read or wrote there, and that text parsed.
Sound only because no read-only NVML call changes the state it is given (a test checks)."""


def _remember(path: Path, text: str, state: NodeState) -> None:
    _PARSED.pop(path, None)
    _PARSED[path] = (text, state)
    while len(_PARSED) > 8:  # a process rarely uses more than one node; tests use many
        del _PARSED[next(iter(_PARSED))]


@atexit.register
def _flush_at_exit() -> None:
    for store in list(_LIVE):
        # A node whose directory is already gone (a test's temporary node) has nobody to tell.
        with contextlib.suppress(OSError, UsageError):
            store.flush()


def fault_armed(state: NodeState, op: str) -> bool:
    """Whether a pending fault names `op` (its skip or times count will change)."""
    return any(f.op == op for f in state.faults)


# ---------------------------------------------------------------------------------------------
# Faults


def normalise_fault(
    op: str, error: str | None, action: str, times: int, skip: int, gpu: int | None
) -> SimFault:
    """A fault as `sim fault add` receives it (no error: EIO or UNKNOWN), checked as stored."""
    error = error or ("EIO" if op in FILE_OPS else "UNKNOWN")
    try:
        return SimFault(op=op, error=error, action=action, times=times, skip=skip, gpu=gpu)
    except ValidationError as exc:
        raise UsageError(problem(exc)) from None


def fire(
    store: SimStore,
    state: NodeState,
    op: str,
    gpu: int | None,
    fail: Callable[[SimFault], Exception],
) -> SimFault | None:
    """Count one call against the faults that name `op` (the caller marked its session dirty
    when one does): the one that fires raises `fail(fault)`, or has the node saved, so that no
    later process fires it again, and ends the process before the call; a crash-after fault
    comes back for the caller to end it after the call."""
    for fault in state.faults:
        if fault.op != op or fault.gpu not in (None, gpu):
            continue
        if fault.skip > 0:
            fault.skip -= 1
            return None
        fault.times -= 1
        if fault.times <= 0:
            state.faults.remove(fault)
        if fault.action == "raise":
            raise fail(fault)
        store.save_now(state)
        if fault.action == "crash-before":
            crash()
        return fault
    return None


def crash() -> NoReturn:
    """End the process at once, as kill -9 would: no cleanup, no buffered output."""
    os._exit(CRASH_EXIT_STATUS)


def _os_error(fault: SimFault) -> OSError:
    code = getattr(errno, fault.error)
    return OSError(code, os.strerror(code), f"<simulated fault on {fault.op}>")


def run_file_op(store: SimStore, op: str, perform: Callable[[], None]) -> None:
    """Run a durable-state file operation (the store's writes and removals on a simulated
    node) under the simulator's faults; the node's file is rewritten only when one names it."""
    op = op.value if isinstance(op, FileOpName) else op  # messages name it as `--op` does
    with store.session() as session:
        session.dirty = fault_armed(session.state, op)
        fault = fire(store, session.state, op, None, _os_error)
    perform()
    if fault is not None:
        crash()


# ---------------------------------------------------------------------------------------------
# Geometry rules


def model_of(gpu: SimGpu) -> ModelSpec:
    return MODELS[gpu.model]


def profile_of(gpu: SimGpu, profile_id: int) -> ProfileSpec:
    """The GPU's GI profile with this ID; INVALID_ARGUMENT, as NVML answers, otherwise."""
    spec = model_of(gpu).profile_by_id(profile_id)
    if spec is None:
        raise SimNvmlFailure("INVALID_ARGUMENT", f"no profile ID {profile_id}")
    return spec


def require_mig(gpu: SimGpu) -> None:
    if not gpu.mig_enabled:
        raise SimNvmlFailure("NOT_SUPPORTED", "MIG mode is disabled")


def gi_id_for(gpu: SimGpu, size: int, start: int) -> int:
    """Pick a GI ID the way A100/H100 drivers were observed to, lowest free otherwise."""
    used = {gi.id for gi in gpu.gis}
    preferred: list[int] = []
    if size == 1:
        preferred = [7 + start]
    elif size == 2 and start < 6:
        preferred = [3 + start // 2]
    elif size == 4:
        preferred = [1 if start == 0 else 2, 2 if start == 0 else 1]
    elif size == MEMORY_SLICES:
        preferred = [0]
    for candidate in preferred + list(range(1, MINORS_GIS)):
        if candidate not in used:
            return candidate
    raise SimNvmlFailure("INSUFFICIENT_RESOURCES", "no free GI ID")


def create_gi(gpu: SimGpu, profile_id: int, start: int) -> SimGi:
    """Create a GI on a simulated GPU, enforcing placement legality, overlap and limits."""
    require_mig(gpu)
    profile = profile_of(gpu, profile_id)
    if start not in profile.starts:
        raise SimNvmlFailure("INVALID_ARGUMENT", f"{start} is not a legal start for {profile.name}")
    for gi in gpu.gis:
        if gi.overlaps(start, profile.size):
            where = f"{start}:{profile.size} overlaps GI {gi.id} at {gi.start}:{gi.size}"
            raise SimNvmlFailure("INSUFFICIENT_RESOURCES", f"placement {where}")
    same = sum(1 for gi in gpu.gis if gi.profile_id == profile_id)
    if same >= profile.max_instances:
        most = f"{profile.name} allows at most {profile.max_instances} instance(s)"
        raise SimNvmlFailure("INSUFFICIENT_RESOURCES", most)
    gi_id = gi_id_for(gpu, profile.size, start)
    gi = SimGi(id=gi_id, profile_id=profile_id, start=start, size=profile.size, cis=[])
    gpu.gis.append(gi)
    gpu.gis.sort(key=lambda g: g.id)
    return gi


def ci_profiles_of(gpu: SimGpu, gi: SimGi) -> dict[int, int]:
    """CI profile ID -> compute slices offered by a GI (7g offers 1,2,3,4,7c; 4g 1,2,4c; ...)."""
    slices = profile_of(gpu, gi.profile_id).slice_count
    offered = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7)}[slices]
    return {FULL_CI_PROFILE_BY_SLICES[s]: s for s in offered}


def create_ci(gpu: SimGpu, gi: SimGi, ci_profile_id: int, old_uuid: bool = False) -> SimCi:
    """`old_uuid`: name it as drivers before R470 do, by its place (`NodeState.old_mig_uuids`)."""
    offered = ci_profiles_of(gpu, gi)
    if ci_profile_id not in offered:
        raise SimNvmlFailure("NOT_SUPPORTED", f"CI profile {ci_profile_id} not offered")
    used = sum(offered.get(ci.profile_id, 0) for ci in gi.cis)
    if used + offered[ci_profile_id] > max(offered.values()):  # the GI's own slices
        raise SimNvmlFailure("INSUFFICIENT_RESOURCES", "GI has no free slices")
    taken = {ci.id for ci in gi.cis}
    ci_id = next(i for i in range(MINORS_CIS) if i not in taken)
    # A fresh random UUID every time, so a recreated instance never passes for the old one;
    # an old driver's name is its place, and a recreated instance does carry the old name.
    name = f"MIG-{gpu.uuid}/{gi.id}/{ci_id}" if old_uuid else f"MIG-{uuid.uuid4()}"
    ci = SimCi(id=ci_id, profile_id=ci_profile_id, mig_uuid=name)
    gi.cis.append(ci)
    gi.cis.sort(key=lambda c: c.id)
    return ci


def destroy_ci(gi: SimGi, ci: SimCi) -> None:
    if ci.busy:
        raise SimNvmlFailure("IN_USE", "processes run on this instance")
    gi.cis.remove(ci)


def destroy_gi(gpu: SimGpu, gi: SimGi) -> None:
    """A GI goes only when it has no CI and no client holds it (NVML: destroy CIs first)."""
    if gi.cis:
        raise SimNvmlFailure("IN_USE", "GI still has compute instances")
    if gi.held:
        raise SimNvmlFailure("IN_USE", "a client holds this GI")
    gpu.gis.remove(gi)


def mig_devices(gpu: SimGpu) -> list[tuple[SimGi, SimCi]]:
    """(GI, CI) pairs in MIG-device index order; GIs without a CI are not MIG devices."""
    if not gpu.mig_enabled:
        return []
    return [(gi, ci) for gi in gpu.gis for ci in gi.cis]
