"""Random lifecycle sequences against a reference model (hypothesis stateful testing).

The machine drives the engine in-process, as `bench/churn.py` does: an in-memory simulated node
of 2 x H100-SXM5-80GB behind the real NVML adapter, durable state (records, intents, CDI specs,
the removal queue) in a temporary directory. Its rules are the lifecycle's operations --
allocate (any pod slot, GPU 0/1 by index or UUID, six profiles, with or without a legal
placement), release (by pod or MIG UUID), reclaim (by MIG UUID, a GPU's placement window or
--all-idle, sometimes dry-run), reconcile -- and the world around them: NVML and file-operation
faults injected through the simulator's fault list, processes holding an instance (busy CI) or
a monitoring client holding its GI, CDI specs deleted or corrupted by an operator, and instances
created behind hamimig's back (Unmanaged).

A reference model says what the specification makes true: which pod slot holds which MIG UUID,
which instances are Idle, Error or Reclaiming. Every operation's exit code and outcome is
predicted from the model before it runs (exactly, unless an injected fault fires during it; then
the outcome must stay inside what the contract allows for a failure of that step), and after
every step the lifecycle's invariants are checked against the real durable state and the
simulated hardware.

Operations are called as the CLI calls them (`cli/context.py`): a `HamimigError` carries the exit
code, a raw `OSError` is exit 4, an `ActionReport` carries its own; exit 1 (a bug) never passes.
At most one injected fault is pending at a time: a second failure inside a rollback legitimately
leaves an intent for `recover`, which this machine does not drive.

Bugs found by this machine are pinned at the bottom of this file as replays of the shrunk
sequence: strict xfail while open (the machine then steers around exactly that path, with
`KNOWN_ALLOCATE_BUG_FAULTS` or a check marked with the test's name, so that it keeps exploring
the rest), plain regression tests once fixed.

Default budget: about 40 s for both machines; `HAMIMIG_PROPERTY_EXAMPLES=5000` for a soak run.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import hashlib
import os
import shutil
import tempfile
import uuid as uuid_module
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from hamimig.cli import options
from hamimig.engine import allocate as allocation
from hamimig.engine.node import Node
from hamimig.engine.podsource import PodSource
from hamimig.engine.reclaim import reclaim
from hamimig.engine.reconcile import reconcile
from hamimig.engine.release import release
from hamimig.engine.requests import AllIdle, AllocateRequest, ByPod, ByUuid, Window
from hamimig.errors import HamimigError
from hamimig.hw.minors import parse_mig_minors
from hamimig.hw.nvml import NvmlHardware
from hamimig.hw.types import FULL_CI_PROFILE_BY_SLICES, parse_placement
from hamimig.pods.model import Pod, PodSnapshot
from hamimig.sim import state as sim_state
from hamimig.sim.files import mig_minors_text
from hamimig.sim.models import MODELS
from hamimig.sim.nvml import SimNvml
from hamimig.sim.state import (
    SimNvmlFailure,
    SimStore,
    new_node,
    normalise_fault,
    run_file_op,
)
from hamimig.store.cdi import CdiDevice, CdiStore, spec_file_name
from hamimig.store.intents import IntentStore
from hamimig.store.lock import LOCK_NAME
from hamimig.store.queue import RemovalQueue
from hamimig.store.records import Record, RecordStore
from hamimig.vocabulary import State
from tests.support.nvml import MUTATING_NVML, NOT_COUNTED

MODEL = MODELS["H100-SXM5-80GB"]
GPUS = 2
NAMESPACE = "ns"
PODS = ("a", "b", "c")
PROFILES = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "7g.80gb")
NO_PODS = PodSource.no_pods()  # no device plugin runs here: no pod holds an Idle instance
SPECS = {p.name: p for p in MODEL.profiles}
PLACEMENTS = {name: [(start, SPECS[name].size) for start in SPECS[name].starts] for name in SPECS}
BOGUS_MIG = "MIG-00000000-0000-0000-0000-0000000dead0"
REUSE_CALL_BUDGET = 14  # a reuse verifies its instance (11 calls) and reads its 3 process lists

NVML_FAULTS = (
    ("nvmlGpuInstanceDestroy", "IN_USE"),
    ("nvmlGpuInstanceDestroy", "UNKNOWN"),
    ("nvmlComputeInstanceDestroy", "IN_USE"),
    ("nvmlComputeInstanceDestroy", "GPU_IS_LOST"),
    ("nvmlGpuInstanceCreateComputeInstance", "UNKNOWN"),
    ("nvmlDeviceCreateGpuInstanceWithPlacement", "UNKNOWN"),
    ("nvmlDeviceCreateGpuInstanceWithPlacement", "INSUFFICIENT_RESOURCES"),
    ("nvmlGpuInstanceGetInfo", "UNKNOWN"),
    ("nvmlComputeInstanceGetInfo", "UNKNOWN"),
    ("nvmlDeviceGetMigDeviceHandleByIndex", "GPU_IS_LOST"),
    ("nvmlDeviceGetHandleByUUID", "UNKNOWN"),
    ("nvmlDeviceGetGpuInstanceById", "UNKNOWN"),
    ("nvmlDeviceGetGpuInstances", "UNKNOWN"),
)
FILE_FAULTS = (
    "record.write",
    "record.remove",
    "cdi.write",
    "cdi.remove",
    "intent.write",
    "intent.remove",
    "queue.write",
)
ALL_FAULTS = NVML_FAULTS + tuple((op, "EIO") for op in FILE_FAULTS)
Fault = tuple[tuple[str, str], int] | None
# A fault armed just before an operation (it fires on the matching call after `skip` others).
FAULT = st.none() | st.tuples(st.sampled_from(ALL_FAULTS), st.integers(0, 2))

# Faults that lead into an open bug, pinned by an xfail test below, when they fire inside
# `allocate`: (op, NVML error name or None for a file op) -> that test's name. The machine clears
# such a fault before it allocates (it still fires in every other operation), so that it keeps
# exploring instead of finding the same bug again. Empty: no open bug needs a fault kept away.
KNOWN_ALLOCATE_BUG_FAULTS: dict[tuple[str, str | None], str] = {}

Slot = tuple[str, int, int]  # pod name (namespace NAMESPACE), container index, device index
GONE = "gone"
ACTIVE, IDLE, ERROR, RECLAIMING = "Active", "Idle", "Error", "Reclaiming"
# What a destroy step may leave behind when an injected fault fires in the middle of it.
WIDEN = {
    IDLE: {IDLE, ERROR, RECLAIMING, GONE},
    ERROR: {ERROR, RECLAIMING, GONE},
    RECLAIMING: {RECLAIMING, ERROR, GONE},
}
CLOCK_BASE = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)


class _CountingUuid:
    """Stands in for the `uuid` module inside the simulator: MIG and GPU UUIDs become a counter,
    so that every example replays identically (the engine orders ties by MIG UUID)."""

    def __init__(self) -> None:
        self.count = 0

    def uuid4(self) -> uuid_module.UUID:
        self.count += 1
        return uuid_module.UUID(int=(0xABC << 100) | self.count)


@dataclasses.dataclass
class Inst:
    """The model's view of one managed instance."""

    mig: str
    gpu: int
    profile: str
    placement: tuple[int, int]
    state: str
    owner: Slot | None = None
    last: Slot | None = None
    """While Idle: the owner it had when it left Active (the record's `last_owner`)."""


@dataclasses.dataclass(frozen=True)
class LiveCi:
    id: int
    mig: str
    busy: bool


@dataclasses.dataclass(frozen=True)
class LiveGi:
    gpu: int
    gpu_uuid: str
    id: int
    profile: str
    start: int
    size: int
    cis: tuple[LiveCi, ...]
    held: bool

    def overlaps(self, placement: tuple[int, int]) -> bool:
        start, size = placement
        return self.start < start + size and start < self.start + self.size


@dataclasses.dataclass
class Expect:
    """A prediction: allowed exit codes, allowed final states of model instances (GONE: no
    record), how many new managed instances may appear, and which instances a firing fault may
    push along their destroy path."""

    codes: set[int]
    final: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    new: int = 0
    touched: set[str] = dataclasses.field(default_factory=set)
    fault_codes: set[int] = dataclasses.field(default_factory=lambda: {4})
    on_fault: dict[str, set[str]] = dataclasses.field(default_factory=dict)


def _slot(record: Record, last: bool = False) -> Slot | None:
    owner = record.last_owner if last else record.owner
    if owner is None:
        return None
    assert owner.namespace == NAMESPACE
    return (owner.name, owner.container_index, owner.device_index)


def event(text: str) -> None:
    """Count an outcome for `--hypothesis-show-statistics` (and nothing in a plain replay)."""
    if currently_in_test_context():
        hypothesis_event(text)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _age(record: Record) -> tuple[str, str]:
    """The engine's order for destroying several instances: oldest first."""
    return (record.updated_at or "", record.mig_uuid)


MINORS_TEXT = mig_minors_text()
MINORS = parse_mig_minors(MINORS_TEXT)


class SimNodeEnv:
    """A 2 x H100 node: in-memory simulator behind the real NVML adapter, durable state in a
    fresh directory, file operations honouring the simulator's faults, a deterministic clock
    and deterministic MIG UUIDs. `close()` undoes everything."""

    def __init__(self, cdi_enabled: bool = True) -> None:
        self._uuids = _CountingUuid()
        self._saved_uuid = sim_state.__dict__["uuid"]
        sim_state.__dict__["uuid"] = self._uuids
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.tmp = Path(tempfile.mkdtemp(prefix="hamimig-lifecycle-", dir=shm))
        self.sim: dict[str, Any] = new_node(MODEL, GPUS).to_json()
        self.store = SimStore(None, self.sim)
        minors = self.tmp / "mig-minors"
        minors.write_text(MINORS_TEXT, encoding="ascii")
        self.hw = NvmlHardware(SimNvml(self.store), minors)
        self.hw.open()
        config = self.tmp / "config.yaml"
        # Spec content is not what these properties are about; `none` keeps the host's /etc/cdi
        # and /proc out of them (this node is not a `--sim` one, whose files sit beside it).
        setting = "enabled: false" if not cdi_enabled else "baseSpec: none"
        config.write_text(f"cdi:\n  {setting}\n", encoding="utf-8")
        self.state_dir = self.tmp / "state"
        self.cdi_dir = self.tmp / "cdi"
        self.ticks = 0
        store = self.store
        self.node = Node(
            state_dir=self.state_dir,
            cdi_dir=self.cdi_dir,
            config_path=config,
            lock_timeout=5.0,
            clock_source=self._clock,
            # Durable-state file operations honour the in-memory simulator's faults.
            faults=lambda op, perform: run_file_op(store, op, perform),
            opened=self.hw,
        )
        self.records_store = RecordStore(self.state_dir)
        self.intents_store = IntentStore(self.state_dir)
        self.queue_store = RemovalQueue(self.state_dir)
        self.cdi = CdiStore(self.cdi_dir)
        self.gpu_uuids = [g["uuid"] for g in self.sim["gpus"]]

    def close(self) -> None:
        self.hw.close()
        sim_state.__dict__["uuid"] = self._saved_uuid
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _clock(self) -> float:
        self.ticks += 1
        return (CLOCK_BASE + datetime.timedelta(milliseconds=self.ticks)).timestamp()

    def fault(self, op: str, error: str | None = None, skip: int = 0) -> None:
        """`sim fault add --op OP [--error NAME] [--skip K]` (action raise, once)."""
        self.sim["faults"].append(normalise_fault(op, error, "raise", 1, skip, None).to_json())


class LifecycleMachine(RuleBasedStateMachine):
    cdi_enabled = True
    steer = True  # avoid the paths of open bugs (their xfail tests replay them without)

    def __init__(self) -> None:
        super().__init__()
        self.env = env = SimNodeEnv(self.cdi_enabled)
        self.sim = env.sim
        self.node = env.node
        self.records_store = env.records_store
        self.intents_store = env.intents_store
        self.queue_store = env.queue_store
        self.cdi = env.cdi
        self.state_dir = env.state_dir
        self.cdi_dir = env.cdi_dir
        self.gpu_uuids = env.gpu_uuids
        # The reference model.
        self.model: dict[str, Inst] = {}
        self.external: dict[str, int] = {}  # Unmanaged MIG UUID -> GPU index
        self.damaged: set[str] = set()  # CDI spec broken by an operator while Idle
        self.kept_foreign: set[str] = set()  # destroyed while damaged: its spec stays
        self.spec_names: dict[str, str] = {}  # spec file name -> MIG UUID, for every UUID seen
        self.spec_bytes: dict[str, bytes] = {}  # MIG UUID -> the spec content it must have
        self.handed_out: set[str] = set()  # every MIG UUID a successful allocation created

    def teardown(self) -> None:
        self.env.close()

    # --- observing the world ----------------------------------------------------------------

    def _live(self, gpu: int | None = None) -> list[LiveGi]:
        out = []
        for g in self.sim["gpus"]:
            if gpu is not None and g["index"] != gpu:
                continue
            names = {p.id: p.name for p in MODEL.profiles}
            for gi in g["gpuInstances"]:
                cis = tuple(
                    LiveCi(ci["id"], ci["migUUID"], bool(ci.get("busy")))
                    for ci in gi["computeInstances"]
                )
                for ci in cis:
                    self.spec_names.setdefault(spec_file_name(ci.mig), ci.mig)
                out.append(
                    LiveGi(
                        gpu=g["index"],
                        gpu_uuid=g["uuid"],
                        id=gi["id"],
                        profile=names[gi["profileId"]],
                        start=gi["placement"]["start"],
                        size=gi["placement"]["size"],
                        cis=cis,
                        held=bool(gi.get("held")),
                    )
                )
        return out

    def _gpu_of(self, gpu_uuid: str) -> int:
        return self.gpu_uuids.index(gpu_uuid)

    def _liveness(self, record: Record, live: list[LiveGi] | None = None) -> str:
        """complete | gi-only | absent | mismatch, judged on the raw simulated layout."""
        placement = (record.placement.start, record.placement.size)
        gpu = self._gpu_of(record.gpu_uuid)
        layout = [gi for gi in (self._live() if live is None else live) if gi.gpu == gpu]
        for gi in layout:
            if gi.id != record.gpu_instance_id:
                continue
            if (gi.start, gi.size) != placement or gi.profile != record.profile:
                return "mismatch"
            if not gi.cis:
                return "gi-only"
            if any(
                ci.id == record.compute_instance_id and ci.mig == record.mig_uuid for ci in gi.cis
            ):
                return "complete"
            return "mismatch"
        if any(gi.overlaps(placement) for gi in layout):
            return "mismatch"
        return "absent"

    def _records(self) -> dict[str, Record]:
        records, problems = self.records_store.load()
        assert not problems, f"unreadable records: {problems}"
        return records

    def _queued(self) -> list[str]:
        removals, problems = self.queue_store.load()
        assert not problems, f"unreadable removal queue: {problems}"
        for r in removals:
            self.spec_names.setdefault(spec_file_name(r.mig_uuid), r.mig_uuid)
        return [r.mig_uuid for r in removals]

    def _calls(self) -> dict[str, int]:
        return dict(self.sim["calls"])

    def _digest(self) -> dict[str, str]:
        """Every file in the state and CDI directories (the lock file aside), by content."""
        out = {}
        for directory in (self.state_dir, self.cdi_dir):
            if not directory.is_dir():
                continue
            for path in sorted(directory.iterdir()):
                if path.name == LOCK_NAME:
                    continue
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        return out

    def _processes(self, record: Record) -> bool:
        """Processes run on the record's live MIG device (a busy CI): hamimig never hands it
        out, reclaims or destroys it, and it blocks its slices like an Active instance."""
        placement = (record.placement.start, record.placement.size)
        for gi in self._live(self._gpu_of(record.gpu_uuid)):
            if gi.id == record.gpu_instance_id and (gi.start, gi.size) == placement:
                return any(
                    ci.id == record.compute_instance_id and ci.mig == record.mig_uuid and ci.busy
                    for ci in gi.cis
                )
        return False

    def _destroy_outcome(self, record: Record) -> str:
        """What destroying `record` leaves without injected faults: GONE, or ERROR when a
        process holds the CI or a client holds the GI."""
        if self._liveness(record) == "absent":
            return GONE
        for gi in self._live(self._gpu_of(record.gpu_uuid)):
            if gi.id != record.gpu_instance_id:
                continue
            ci = next((c for c in gi.cis if c.id == record.compute_instance_id), None)
            if ci is not None and ci.busy:
                return ERROR
            return ERROR if gi.held else GONE
        return GONE

    def _sequential_destroy(
        self, targets: list[Record], final: dict[str, set[str]]
    ) -> Record | None:
        """Destroy targets in order until one fails (allocate stops there); returns it."""
        for record in targets:
            outcome = self._destroy_outcome(record)
            final[record.mig_uuid] = {outcome}
            if outcome == ERROR:
                return record
        return None

    # --- running an operation ------------------------------------------------------------------

    def _pending_fault(self) -> dict[str, Any] | None:
        faults: list[dict[str, Any]] = self.sim["faults"]
        return faults[0] if faults else None

    def _run(self, action: Callable[[], Any]) -> tuple[int, Any, bool, dict[str, Any] | None]:
        """Run one engine call as the CLI does; returns (exit code, result, fault fired, fault)."""
        fault = self._pending_fault()
        fault_copy = dict(fault) if fault else None
        try:
            result = action()
            code = int(getattr(result, "exit_code", 0))
        except HamimigError as exc:
            assert exc.exit_code != 1, f"internal error (exit 1): {exc.message}"
            result, code = exc, exc.exit_code
        except OSError as exc:
            result, code = exc, 4  # cli/context.py: an I/O error is exit 4
        fired = fault is not None and self._pending_fault() is not fault
        return code, result, fired, fault_copy

    def _settle(
        self,
        what: str,
        exp: Expect,
        code: int,
        result: Any,
        fired: bool,
        fault: dict[str, Any] | None,
        new_owner: Slot | None = None,
    ) -> list[Record]:
        """Check the outcome against the prediction and move the model along; returns the new
        managed instances' records."""
        codes = set(exp.codes)
        if fired:
            codes |= exp.fault_codes
            if fault is not None and fault["op"] == "cdi.remove":
                codes.add(0)  # a failed spec removal is queued, the operation goes on
        assert code in codes, (
            f"{what}: exit {code}, expected one of {sorted(codes)}"
            f"{' (fault ' + str(fault) + ' fired)' if fired else ''}: {result}"
        )
        event(f"{what.split()[0]} exit {code}{' after a fault' if fired else ''}")
        records = self._records()
        for mig, inst in list(self.model.items()):
            allowed = exp.final.get(mig, {inst.state})
            if fired and mig in exp.touched:
                allowed = allowed | WIDEN.get(inst.state, set())
            if fired and mig in exp.on_fault:
                allowed = allowed | exp.on_fault[mig]
            record = records.get(mig)
            seen = record.state.value if record is not None else GONE
            assert seen in allowed, (
                f"{what}: {mig} ({inst.profile} at {inst.placement} on GPU {inst.gpu}) went "
                f"from {inst.state} to {seen}, expected one of {sorted(allowed)}"
                f"{' (fault ' + str(fault) + ' fired)' if fired else ''}; exit {code}: {result}"
            )
            if record is None:
                event(f"{inst.state} -> destroyed")
                del self.model[mig]
                if mig in self.damaged:
                    self.kept_foreign.add(mig)  # a truncated spec is not ours by content
                self.damaged.discard(mig)
                continue
            if seen == ACTIVE and inst.state == ACTIVE:
                assert _slot(record) == inst.owner, f"{what}: owner of {mig} changed"
            elif seen == ACTIVE:
                assert _slot(record) == new_owner, f"{what}: {mig} went Active for another owner"
            if seen != inst.state:
                event(f"{inst.state} -> {seen}")
            if seen == IDLE and inst.state == ACTIVE:
                inst.last = inst.owner
            elif seen != IDLE:
                inst.last = None
            assert _slot(record, last=True) == inst.last, f"{what}: last owner of {mig}"
            inst.state = seen
            inst.owner = _slot(record)
            if seen == ACTIVE:
                self.damaged.discard(mig)  # a reuse repairs the spec before turning Active
        new = [r for m, r in records.items() if m not in self.model]
        allowed_new = exp.new if code == 0 else 0
        assert len(new) <= allowed_new, (
            f"{what}: {len(new)} new record(s) {[r.mig_uuid for r in new]}, expected at most "
            f"{allowed_new}; exit {code}: {result}"
        )
        for record in new:
            assert record.state is State.ACTIVE and _slot(record) == new_owner
            self.handed_out.add(record.mig_uuid)
            self.model[record.mig_uuid] = Inst(
                mig=record.mig_uuid,
                gpu=self._gpu_of(record.gpu_uuid),
                profile=record.profile,
                placement=(record.placement.start, record.placement.size),
                state=ACTIVE,
                owner=new_owner,
            )
        if code != 0 and not fired and not exp.final:
            assert self._unchanged(), f"{what}: refused with exit {code} but changed files"
        return new

    def _unchanged(self) -> bool:
        """Whether the state and CDI directories are as `_begin` found them (contract: refused
        commands and dry runs change nothing)."""
        return self._before_digest == self._digest()

    def _begin(self) -> None:
        self._before_digest = self._digest()
        self._before_calls = self._calls()

    def _mutations_since(self) -> int:
        after = self._calls()
        return sum(after.get(c, 0) - self._before_calls.get(c, 0) for c in MUTATING_NVML)

    def _calls_since(self) -> int:
        after = self._calls()
        return sum(after[c] - self._before_calls.get(c, 0) for c in after if c not in NOT_COUNTED)

    # --- allocate --------------------------------------------------------------------------------

    def _expect_allocate(
        self, slot: Slot, gpu: int, profile: str, placement: tuple[int, int] | None
    ) -> tuple[str, Expect, Any]:
        records = self._records()
        held = [r for r in records.values() if r.state is State.ACTIVE and _slot(r) == slot]
        if held:
            record = held[0]
            same = (
                self._gpu_of(record.gpu_uuid) == gpu
                and record.profile == profile
                and (
                    placement is None
                    or (record.placement.start, record.placement.size) == placement
                )
            )
            if same:
                return "idempotent", Expect({0}), record.mig_uuid
            return "clash", Expect({3}), None
        candidates = [
            r
            for r in records.values()
            if r.state is State.IDLE
            and self._gpu_of(r.gpu_uuid) == gpu
            and r.profile == profile
            and (placement is None or (r.placement.start, r.placement.size) == placement)
            and not self._processes(r)
        ]
        if candidates:
            migs = {r.mig_uuid for r in candidates}
            wanted = {m: {ACTIVE} if len(migs) == 1 else {IDLE, ACTIVE} for m in migs}
            on_fault = {m: {IDLE} for m in migs}  # a failed reuse leaves the instance Idle
            return "reuse", Expect({0}, wanted, on_fault=on_fault), migs
        live = self._live(gpu)
        on_gpu = {
            (r.gpu_instance_id, r.placement.start, r.placement.size): r
            for r in records.values()
            if self._gpu_of(r.gpu_uuid) == gpu
        }

        def blockers(p: tuple[int, int]) -> tuple[list[Record], bool]:
            soft, hard = [], False
            for gi in live:
                if not gi.overlaps(p):
                    continue
                record = on_gpu.get((gi.id, gi.start, gi.size))
                if record is None or record.state is State.ACTIVE or self._processes(record):
                    hard = True
                else:
                    soft.append(record)
            return sorted(soft, key=_age), hard

        # A failed process query makes a blocker busy, so a firing fault may move the choice to
        # another placement and reclaim the Idle instances blocking that one instead.
        alternatives: set[str] = set()
        if placement is not None:
            chosen = placement
            soft, hard = blockers(placement)
            if hard:
                return "blocked", Expect({3}), None
        else:
            scored = []
            for p in PLACEMENTS[profile]:
                soft, hard = blockers(p)
                if not hard:
                    scored.append((len(soft), p[0], p, soft))
                    alternatives.update(r.mig_uuid for r in soft)
            if not scored:
                return "blocked", Expect({3}), None
            _, _, chosen, soft = min(scored, key=lambda t: (t[0], t[1]))
        # A Reclaiming record whose hardware is already gone (its removal failed) is finished
        # before anything is created over its slot, or it would name the new instance; one
        # elsewhere on the GPU may be finished too.
        stale = [
            r
            for r in records.values()
            if self._gpu_of(r.gpu_uuid) == gpu
            and r.state is not State.ACTIVE
            and self._liveness(r, live) == "absent"
        ]
        live_soft = soft
        soft = sorted(
            soft + [r for r in stale if _overlap((r.placement.start, r.placement.size), chosen)],
            key=_age,
        )
        final: dict[str, set[str]] = {r.mig_uuid: {RECLAIMING, GONE} for r in stale}
        failed = self._sequential_destroy(soft, final)
        touched = {r.mig_uuid for r in soft} | alternatives
        # INSUFFICIENT_RESOURCES on creating the GI is a conflict (executor.create_instance);
        # an Error blocker that still cannot be destroyed is one too (contract, exit 3).
        fault_codes = {3, 4}
        if failed is not None:
            code = 3 if failed.state is State.ERROR else 4
            return "create", Expect({code}, final, 0, touched, fault_codes), (chosen, soft)
        spec = SPECS[profile]
        destroyed = {r.gpu_instance_id for r in live_soft}
        same_profile = sum(1 for gi in live if gi.profile == profile and gi.id not in destroyed)
        if same_profile >= spec.max_instances:
            # NVML refuses the GI (INSUFFICIENT_RESOURCES): the profile's instance limit.
            return "create", Expect({3}, final, 0, touched, fault_codes), (chosen, soft)
        return "create", Expect({0}, final, 1, touched, fault_codes), (chosen, soft)

    @initialize(
        requests=st.lists(
            st.tuples(
                st.sampled_from(PODS),
                st.integers(0, 1),
                st.integers(0, GPUS - 1),
                st.sampled_from(PROFILES),
                st.none() | st.integers(0, 6),
            ),
            max_size=6,
        ),
        released=st.sets(st.sampled_from(PODS)),
    )
    def populate(
        self, requests: list[tuple[str, int, int, str, int | None]], released: set[str]
    ) -> None:
        """Start from a used node: a few allocations, then some of their pods gone."""
        for pod, device, gpu, profile, where in requests:
            self._allocate(pod, device, gpu, profile, where, False, True)
        for pod in sorted(released):
            self.release_pod(pod)

    @rule(
        pod=st.sampled_from(PODS),
        device=st.integers(0, 1),
        gpu=st.integers(0, GPUS - 1),
        profile=st.sampled_from(PROFILES),
        where=st.none() | st.integers(0, 6),
        by_uuid=st.booleans(),
        with_size=st.booleans(),
        fault=FAULT,
    )
    def allocate(
        self,
        pod: str,
        device: int,
        gpu: int,
        profile: str,
        where: int | None,
        by_uuid: bool,
        with_size: bool,
        fault: Fault,
    ) -> None:
        self._arm(fault)
        self._allocate(pod, device, gpu, profile, where, by_uuid, with_size)

    @precondition(lambda self: any(i.state == IDLE for i in self.model.values()))
    @rule(
        pick=st.integers(0, 20),
        pod=st.sampled_from(PODS),
        device=st.integers(0, 1),
        with_placement=st.booleans(),
        by_uuid=st.booleans(),
        fault=FAULT,
    )
    def allocate_like_idle(
        self, pick: int, pod: str, device: int, with_placement: bool, by_uuid: bool, fault: Fault
    ) -> None:
        """A request that an Idle instance matches (what a scheduler sends most of the time)."""
        self._arm(fault)
        inst = self.model[self._pick(pick, states=(IDLE,), extra=False)]
        where = PLACEMENTS[inst.profile].index(inst.placement) if with_placement else None
        self._allocate(pod, device, inst.gpu, inst.profile, where, by_uuid, True)

    def _allocate(
        self,
        pod: str,
        device: int,
        gpu: int,
        profile: str,
        where: int | None,
        by_uuid: bool,
        with_size: bool,
    ) -> None:
        slot: Slot = (pod, 0, device)
        placements = PLACEMENTS[profile]
        placement = None if where is None else placements[where % len(placements)]
        text = None
        if placement is not None:
            text = f"{placement[0]}:{placement[1]}" if with_size else str(placement[0])
        gpu_ref = self.gpu_uuids[gpu] if by_uuid else str(gpu)
        self._steer_around_known_bugs()
        kind, exp, detail = self._expect_allocate(slot, gpu, profile, placement)
        busy_matches = sum(
            1
            for r in self._records().values()
            if r.state is State.IDLE
            and r.profile == profile
            and (placement is None or (r.placement.start, r.placement.size) == placement)
            and self._processes(r)
        )
        pending = self._pending_fault()
        if pending is not None and pending["op"] == "intent.remove" and exp.codes != {0}:
            # Fail closed by design: when the intent of an allocation that failed (or created
            # nothing) cannot be removed, it stays and blocks its GPU (exit 5) until `recover`,
            # which this machine does not drive. Only a finished allocation's intent is tested.
            self.sim["faults"].clear()
        was_damaged = set(self.damaged)
        self._begin()
        request = AllocateRequest(
            options.owner(f"{NAMESPACE}/{pod}", None, 0, device),
            options.gpu_ref(gpu_ref),
            profile,
            options.placement(text),
        )
        code, result, fired, pending = self._run(
            lambda: allocation.allocate(self.node, request, NO_PODS)
        )
        what = f"allocate {slot} GPU {gpu_ref} {profile} at {text} ({kind})"
        new = self._settle(what, exp, code, result, fired, pending, new_owner=slot)
        if code != 0:
            assert not new
            return
        instance = result.instance
        assert instance.state.value == ACTIVE and instance.mig_uuid not in self.external
        if kind == "idempotent":
            assert (result.created, result.reused, instance.mig_uuid) == (False, False, detail)
            assert self._mutations_since() == 0
        elif kind == "reuse":
            assert result.reused and not result.created and not result.reclaimed, what
            assert instance.mig_uuid in detail, f"{what}: reused {instance.mig_uuid}"
            assert self.model[instance.mig_uuid].state == ACTIVE
            assert self._mutations_since() == 0, f"{what}: a reuse created or destroyed"
            # Each busy candidate verified and passed over costs a verification of its own.
            tried = 1 + busy_matches
            assert self._calls_since() <= REUSE_CALL_BUDGET * tried, (
                f"{what}: {self._calls_since()} NVML calls for a reuse ({tried} verified)"
            )
            if instance.mig_uuid in was_damaged and self.cdi_enabled:
                assert self.cdi.exists(instance.mig_uuid)  # repaired before turning Active
        else:
            chosen, soft = detail
            assert result.created and not result.reused, what
            assert len(new) == 1 and instance.mig_uuid == new[0].mig_uuid, what
            if not fired:  # a failed process query makes a blocker busy: another placement
                assert (instance.placement.start, instance.placement.size) == chosen, (
                    f"{what}: created at {instance.placement}, expected {chosen}"
                )
                assert list(result.reclaimed) == [r.mig_uuid for r in soft], what
            inst = self.model[instance.mig_uuid]
            assert (inst.gpu, inst.profile) == (gpu, profile)
            assert inst.placement == chosen or fired

    def _arm(self, fault: Fault) -> None:
        """Inject `fault` for the coming operation, unless one is already pending."""
        if fault is None or self._pending_fault() is not None:
            return
        (op, error), skip = fault
        self.env.fault(op, error, skip)

    def _steer_around_known_bugs(self) -> None:
        """Keep `allocate` off the paths of the bugs pinned below: drop such a pending fault."""
        fault = self._pending_fault()
        if not self.steer or fault is None:
            return
        is_file_op = fault["op"] in sim_state.FILE_OPS
        if (fault["op"], None if is_file_op else fault["error"]) in KNOWN_ALLOCATE_BUG_FAULTS:
            self.sim["faults"].clear()

    # --- release ---------------------------------------------------------------------------------

    def _pick(self, pick: int, states: tuple[str, ...] | None = None, extra: bool = True) -> str:
        """A model instance in creation order (then, with `extra`, an Unmanaged instance or a
        MIG UUID that does not exist)."""
        migs = [m for m, i in self.model.items() if states is None or i.state in states]
        if extra:
            migs += [*sorted(self.external), BOGUS_MIG]
        return migs[pick % len(migs)]

    @rule(pod=st.sampled_from(PODS), fault=FAULT)
    def release_pod(self, pod: str, fault: Fault = None) -> None:
        self._arm(fault)
        targets = {
            m for m, i in self.model.items() if i.state == ACTIVE and i.owner and i.owner[0] == pod
        }
        before = {
            m for m, i in self.model.items() if i.state == IDLE and i.last and i.last[0] == pod
        }
        # A failed record write may stop a release of several instances part way; releasing
        # again what the pod held is unchanged.
        exp = Expect(
            {0} if targets or before else {6},
            {m: {IDLE} for m in targets},
            on_fault={m: {ACTIVE} for m in targets},
        )
        self._begin()
        code, result, fired, pending = self._run(lambda: release(self.node, ByPod(NAMESPACE, pod)))
        self._settle(f"release --pod {pod}", exp, code, result, fired, pending)
        assert self._mutations_since() == 0
        if code == 0:
            assert {i.mig_uuid for i in result.released} == (targets or before)

    @rule(pick=st.integers(0, 20), fault=FAULT)
    def release_mig(self, pick: int, fault: Fault) -> None:
        self._arm(fault)
        mig = self._pick(pick)
        inst = self.model.get(mig)
        if inst is None:
            exp = Expect({6})
        elif inst.state == ACTIVE:
            exp = Expect({0}, {mig: {IDLE}}, on_fault={mig: {ACTIVE}})
        elif inst.state == IDLE:
            exp = Expect({0})
        else:
            exp = Expect({3})
        self._begin()
        code, result, fired, pending = self._run(lambda: release(self.node, ByUuid(mig)))
        self._settle(f"release --mig-uuid {mig}", exp, code, result, fired, pending)
        assert self._mutations_since() == 0

    # --- reclaim ---------------------------------------------------------------------------------

    def _reclaim_targets_expect(
        self, targets: list[Record], dry_run: bool
    ) -> tuple[Expect, list[str]]:
        """Busy targets are skipped (a failed process query counts as busy, hence 0 and 3
        when a fault fires: the target is then skipped, or refused when named)."""
        ordered = sorted((r for r in targets if not self._processes(r)), key=_age)
        if dry_run:
            return Expect({0}, fault_codes={0, 3, 4}), [r.mig_uuid for r in ordered]
        # Unlike allocate, reclaim goes on past a target it cannot destroy (release.execute_each):
        # every target gets its own outcome, and one left in Error makes the exit 4.
        final = {r.mig_uuid: {self._destroy_outcome(r)} for r in ordered}
        failed = any(ERROR in outcome for outcome in final.values())
        return (
            Expect(
                {4 if failed else 0},
                final,
                touched={r.mig_uuid for r in ordered},
                fault_codes={0, 3, 4},
            ),
            [r.mig_uuid for r in ordered],
        )

    @rule(pick=st.integers(0, 20), dry_run=st.booleans(), fault=FAULT)
    def reclaim_mig(self, pick: int, dry_run: bool, fault: Fault) -> None:
        self._arm(fault)
        mig = self._pick(pick)
        records = self._records()
        record = records.get(mig)
        listed: list[str] = []
        if record is None:
            exp = Expect({3 if mig in self.external else 6})
        elif record.state is State.ACTIVE or self._processes(record):
            exp = Expect({3})
        else:
            exp, listed = self._reclaim_targets_expect([record], dry_run)
        self._begin()
        code, result, fired, pending = self._run(
            lambda: reclaim(self.node, ByUuid(mig), NO_PODS, dry_run)
        )
        self._settle(f"reclaim --mig-uuid {mig} dry={dry_run}", exp, code, result, fired, pending)
        self._check_reclaim_result(code, result, dry_run, listed, fired)

    def _check_reclaim_result(
        self, code: int, result: Any, dry_run: bool, listed: list[str], fired: bool
    ) -> None:
        if code != 0:
            return
        if not fired:  # a failed process query skips a target as busy
            assert [i.mig_uuid for i in result.reclaimed] == listed
        assert result.dry_run is dry_run
        if dry_run:
            assert self._mutations_since() == 0
            assert self._unchanged(), "a dry run changed files"

    @rule(gpu=st.integers(0, GPUS - 1), dry_run=st.booleans(), fault=FAULT)
    def reclaim_all_idle(self, gpu: int, dry_run: bool, fault: Fault) -> None:
        self._arm(fault)
        records = self._records()
        targets = [
            r
            for r in records.values()
            if self._gpu_of(r.gpu_uuid) == gpu and r.state is not State.ACTIVE
        ]
        exp, listed = self._reclaim_targets_expect(targets, dry_run)
        self._begin()
        code, result, fired, pending = self._run(
            lambda: reclaim(self.node, AllIdle(gpu), NO_PODS, dry_run)
        )
        self._settle(
            f"reclaim --gpu {gpu} --all-idle dry={dry_run}", exp, code, result, fired, pending
        )
        self._check_reclaim_result(code, result, dry_run, listed, fired)

    @rule(
        gpu=st.integers(0, GPUS - 1),
        profile=st.sampled_from(PROFILES),
        where=st.integers(0, 6),
        with_size=st.booleans(),
        dry_run=st.booleans(),
        fault=FAULT,
    )
    def reclaim_window(
        self, gpu: int, profile: str, where: int, with_size: bool, dry_run: bool, fault: Fault
    ) -> None:
        self._arm(fault)
        placements = PLACEMENTS[profile]
        start, size = placements[where % len(placements)]
        text = f"{start}:{size}" if with_size else str(start)
        window = (start, size if with_size else 1)
        records = self._records()
        on_gpu = [r for r in records.values() if self._gpu_of(r.gpu_uuid) == gpu]
        chosen = [
            r
            for r in on_gpu
            if r.state is not State.ACTIVE
            and _overlap((r.placement.start, r.placement.size), window)
        ]
        owned = {(r.gpu_instance_id, r.placement.start, r.placement.size) for r in chosen}
        blocked = any(
            gi.overlaps(window) and (gi.id, gi.start, gi.size) not in owned
            for gi in self._live(gpu)
        )
        listed: list[str] = []
        if blocked:
            exp = Expect({3})
        else:
            exp, listed = self._reclaim_targets_expect(chosen, dry_run)
        self._begin()
        code, result, fired, pending = self._run(
            lambda: reclaim(self.node, Window(gpu, parse_placement(text)), NO_PODS, dry_run)
        )
        what = f"reclaim --gpu {gpu} --placement {text} dry={dry_run}"
        self._settle(what, exp, code, result, fired, pending)
        self._check_reclaim_result(code, result, dry_run, listed, fired)

    # --- reconcile -------------------------------------------------------------------------------

    @rule(fault=FAULT)
    def reconcile(self, fault: Fault) -> None:
        self._arm(fault)
        records = self._records()
        failing = [
            r
            for r in records.values()
            if r.state in (State.ERROR, State.RECLAIMING) and not self._processes(r)
        ]  # a busy one is skipped
        final = {r.mig_uuid: {self._destroy_outcome(r)} for r in failing}
        exp = Expect(
            {4 if ERROR in {next(iter(s)) for s in final.values()} else 0},
            final,
            touched=set(final),
            fault_codes={0, 4},  # a failed process query skips a retry as busy
        )
        self._begin()
        code, result, fired, pending = self._run(
            lambda: reconcile(self.node, source=self._running_pods())
        )
        self._settle("reconcile", exp, code, result, fired, pending)
        if not fired:
            assert not self._queued(), "reconcile left CDI removals queued"

    def _running_pods(self) -> PodSource:
        """A fresh pod list in which every Active record's owner runs and no annotation claims
        anything: the retries of Error instances are then the model's to predict."""
        records = self.node.records.load()[0].values()
        owners = sorted({(r.owner.namespace, r.owner.name) for r in records if r.owner})
        pods = tuple(Pod(ns, n, None, None, "Running", None, (), None) for ns, n in owners)
        return PodSource.given(PodSnapshot(pods, "the model", taken_at=self.node.now()))

    # --- the world -------------------------------------------------------------------------------

    @precondition(lambda self: self._pending_fault() is None)
    @rule(
        which=st.sampled_from(NVML_FAULTS),
        skip=st.integers(0, 2),
        gpu=st.none() | st.integers(0, GPUS - 1),
    )
    def inject_nvml_fault(self, which: tuple[str, str], skip: int, gpu: int | None) -> None:
        op, error = which
        self.sim["faults"].append(normalise_fault(op, error, "raise", 1, skip, gpu).to_json())

    @precondition(lambda self: self._pending_fault() is None)
    @rule(
        op=st.sampled_from(FILE_FAULTS),
        name=st.sampled_from(("EIO", "ENOSPC", "EACCES")),
        skip=st.integers(0, 2),
    )
    def inject_file_fault(self, op: str, name: str, skip: int) -> None:
        assert isinstance(getattr(errno, name), int)
        self.env.fault(op, name, skip)

    @precondition(lambda self: self._pending_fault() is not None)
    @rule()
    def clear_faults(self) -> None:
        self.sim["faults"].clear()

    def _live_pairs(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        return [
            (gi, ci)
            for g in self.sim["gpus"]
            for gi in g["gpuInstances"]
            for ci in gi["computeInstances"]
        ]

    @precondition(lambda self: bool(self._live_pairs()))
    @rule(pick=st.integers(0, 20), gi_only=st.booleans())
    def hold_instance(self, pick: int, gi_only: bool) -> None:
        """A process runs on the instance (its CI cannot be destroyed), or a monitoring client
        holds its GI (the CI goes, the GI stays: `sim busy --gi-only`)."""
        pairs = self._live_pairs()
        gi, ci = pairs[pick % len(pairs)]
        if gi_only:
            gi["held"] = True
            gi["heldFor"] = ci["migUUID"]
        else:
            ci["busy"] = True

    def _holds(self) -> list[dict[str, Any]]:
        out = []
        for g in self.sim["gpus"]:
            for gi in g["gpuInstances"]:
                if gi.get("held"):
                    out.append(gi)
                out.extend(ci for ci in gi["computeInstances"] if ci.get("busy"))
        return out

    @precondition(lambda self: bool(self._holds()))
    @rule(pick=st.integers(0, 20))
    def release_hold(self, pick: int) -> None:
        holds = self._holds()
        node = holds[pick % len(holds)]
        node["busy"] = False
        node["held"] = False
        node.pop("heldFor", None)

    @precondition(
        lambda self: self.cdi_enabled and any(i.state == IDLE for i in self.model.values())
    )
    @rule(pick=st.integers(0, 20), delete=st.booleans())
    def damage_spec(self, pick: int, delete: bool) -> None:
        """An operator deletes or truncates an Idle instance's CDI spec; reuse must repair it."""
        mig = self._pick(pick, states=(IDLE,), extra=False)
        path = self.cdi.path_of(mig)
        if delete:
            path.unlink(missing_ok=True)
        else:
            path.write_text("{}\n", encoding="utf-8")
        self.damaged.add(mig)

    @rule(
        gpu=st.integers(0, GPUS - 1),
        profile=st.sampled_from(("1g.10gb", "2g.20gb")),
        where=st.integers(0, 6),
    )
    def create_unmanaged(self, gpu: int, profile: str, where: int) -> None:
        """Another controller creates an instance behind hamimig's back (unsupported: HAMi must
        own the node's MIG layout; but hamimig must preserve it: never reuse, reclaim or destroy
        it)."""
        spec = SPECS[profile]
        start = spec.starts[where % len(spec.starts)]
        claimed = [i.placement for i in self.model.values() if i.gpu == gpu]
        if any(_overlap(p, (start, spec.size)) for p in claimed):
            return  # it would contradict a record that is still being finished (Reclaiming)
        with self.env.store.edit() as state:
            g = state.gpus[gpu]
            try:
                gi = sim_state.create_gi(g, spec.id, start)
            except SimNvmlFailure:
                return
            ci = sim_state.create_ci(g, gi, FULL_CI_PROFILE_BY_SLICES[spec.slice_count])
        self.external[ci.mig_uuid] = gpu

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def durable_state_matches_hardware(self) -> None:
        records = self._records()
        intents, problems = self.intents_store.load()
        assert not problems, f"unreadable intents: {problems}"
        queued = self._queued()
        live = self._live()
        for intent in intents:
            # Only a completed allocation's intent may outlive its operation (recovery's
            # finish-intent clears it), and only if nothing mistakes it for work in flight:
            # the model predicts every later allocation on its GPU, so one refused because of
            # it fails there. Anything else is partial work left behind.
            assert intent.mig_uuid in self.handed_out, f"an intent outlived its operation: {intent}"

        # The model and the records agree on every managed instance.
        assert set(records) == set(self.model), (
            f"records {sorted(records)} but model {sorted(self.model)}"
        )
        owners: dict[Slot, str] = {}
        for mig, record in records.items():
            inst = self.model[mig]
            assert record.managed
            assert record.state.value == inst.state, (
                f"{mig}: record {record.state} model {inst.state}"
            )
            assert (self._gpu_of(record.gpu_uuid), record.profile) == (inst.gpu, inst.profile)
            assert (record.placement.start, record.placement.size) == inst.placement
            liveness = self._liveness(record, live)
            assert liveness != "mismatch", (
                f"record {mig} ({record.state.value}, GI {record.gpu_instance_id} "
                f"{record.profile} at {record.placement}) names another live instance"
            )
            if record.state in (State.ACTIVE, State.IDLE):
                assert liveness == "complete", f"{record.state.value} {mig} is {liveness}"
            if record.state is State.ACTIVE:
                slot = _slot(record)
                assert slot is not None, f"Active {mig} without an owner"
                assert slot not in owners, f"{slot} owns {owners.get(slot)} and {mig}"
                owners[slot] = mig
                assert slot == inst.owner
            else:
                assert record.owner is None, f"{record.state.value} {mig} keeps an owner"
            if record.state is State.ERROR:
                assert record.error, f"Error {mig} without an error text"
                assert liveness in ("complete", "gi-only"), f"Error {mig} is {liveness}"

        # Active instances stay live; Unmanaged ones are never touched.
        live_migs = {ci.mig for gi in live for ci in gi.cis}
        for mig, inst in self.model.items():
            if inst.state == ACTIVE:
                assert mig in live_migs, f"Active {mig} was destroyed"
        for mig in self.external:
            assert mig in live_migs, f"Unmanaged {mig} was destroyed"
            assert mig not in records

        # No overlap; every live GI/CI is a record's or an Unmanaged one.
        for gpu in range(GPUS):
            gis = [gi for gi in live if gi.gpu == gpu]
            for i, a in enumerate(gis):
                for b in gis[i + 1 :]:
                    assert not a.overlaps((b.start, b.size)), f"GI {a.id} overlaps GI {b.id}"
        explained_gis = {
            (self._gpu_of(r.gpu_uuid), r.gpu_instance_id)
            for r in records.values()
            if self._liveness(r, live) in ("complete", "gi-only")
        }
        for gi in live:
            if any(ci.mig in self.external for ci in gi.cis):
                continue
            assert (gi.gpu, gi.id) in explained_gis, (
                f"GPU {gi.gpu} GI {gi.id} ({gi.profile} at {gi.start}:{gi.size}, CIs "
                f"{[c.mig for c in gi.cis]}) is live but no record explains it"
            )
            for ci in gi.cis:
                assert ci.mig in records, f"CI {ci.mig} on GPU {gi.gpu} has no record"

        # CDI specs belong to instances: kept while Active, Idle or Error, removed after.
        specs = set(self.cdi.list_ours())
        if not self.cdi_enabled:
            assert not specs, f"legacy mode wrote CDI specs: {specs}"
            assert not queued, "legacy mode queued CDI removals"
            return
        for name in specs:
            owner = self.spec_names.get(name)
            assert owner is not None, f"CDI spec {name} for an instance never seen"
            # A spec whose content is not the instance's (truncated by hand) is never removed.
            path = self.cdi.path_of(owner)
            foreign = owner in self.kept_foreign and path.read_text() == "{}\n"
            assert owner in records or owner in queued or foreign, (
                f"CDI spec of destroyed {owner} is neither removed nor queued"
            )
        for mig, record in records.items():
            if record.state is State.RECLAIMING or mig in self.damaged:
                continue
            assert spec_file_name(mig) in specs, f"{record.state.value} {mig} has no CDI spec"
            if record.state is State.ERROR:
                continue
            assert self.cdi.path_of(mig).read_bytes() == self._spec_bytes(record), (
                f"CDI spec of {record.state.value} {mig} is stale"
            )
            assert record.cdi_device == self.cdi.qualified_name(mig)

    def _spec_bytes(self, record: Record) -> bytes:
        """The spec an instance must have: its GPU's device node and the capability minors of
        its GI and CI from the mig-minors table (GPU minor = index on the simulated node)."""
        mig = record.mig_uuid
        if mig not in self.spec_bytes:
            gpu = self._gpu_of(record.gpu_uuid)
            gi = f"gpu{gpu}/gi{record.gpu_instance_id}"
            device = CdiDevice(
                mig,
                gpu,
                MINORS[f"{gi}/access"],
                MINORS[f"{gi}/ci{record.compute_instance_id}/access"],
            )
            self.spec_bytes[mig] = self.cdi.render(device)
        return self.spec_bytes[mig]


# Budget of a default run (about 60 s for both machines together on a laptop-class CPU); raise
# it for a soak run with HAMIMIG_PROPERTY_EXAMPLES (the legacy machine gets a quarter).
EXAMPLES = int(os.environ.get("HAMIMIG_PROPERTY_EXAMPLES", "160"))

LifecycleMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.slow
class TestLifecycleProperties(LifecycleMachine.TestCase):  # type: ignore[misc,valid-type]
    pass


class LegacyLifecycleMachine(LifecycleMachine):
    """The same machine with `cdi.enabled: false`: no spec files, no removal queue, ever."""

    cdi_enabled = False


LegacyLifecycleMachine.TestCase.settings = settings(
    max_examples=max(1, EXAMPLES // 4),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.slow
class TestLegacyLifecycleProperties(LegacyLifecycleMachine.TestCase):  # type: ignore[misc,valid-type]
    pass


# --- bugs found by the machine -------------------------------------------------------------------
#
# Each test replays a sequence hypothesis reported (rule calls of the machine above, invariants
# checked after each step) with the machine's steering turned off. A bug that is still open is
# pinned as `@pytest.mark.xfail(strict=True, raises=AssertionError, reason="BUG: ...")`, with an
# entry in KNOWN_ALLOCATE_BUG_FAULTS if the machine must steer around it; when it is fixed the
# test XPASSes (strict: the run fails), so drop both. The tests below pin bugs already fixed.


def _replay(*steps: Callable[[LifecycleMachine], object]) -> None:
    machine = LifecycleMachine()
    machine.steer = False
    try:
        machine.durable_state_matches_hardware()
        for step in steps:
            step(machine)
            machine.durable_state_matches_hardware()
    finally:
        machine.teardown()


def _allocate(pod: str, profile: str, where: int | None, fault: Fault = None) -> Any:
    return lambda m: m.allocate(pod, 0, 0, profile, where, False, True, fault)


def test_refused_command_leaves_finished_intents_alone() -> None:
    """Found by the machine (after the intent fixes below): allocate, release and reclaim
    removed finished intents before deciding, so a refused command changed the state
    directory (a refusal stops a command before its first change: docs/design.md "One mutating
    command")."""
    _replay(
        # a finished allocation whose intent could not be removed
        _allocate("a", "1g.10gb", None, (("intent.remove", "EIO"), 0)),
        # the same slot asks for another placement: refused (exit 3), must change nothing
        _allocate("a", "1g.10gb", 1),
    )


@pytest.mark.parametrize("skip", [0, 1, 2])
def test_a_failed_process_query_may_move_an_allocation_to_another_placement(skip: int) -> None:
    """Found by the machine (a gap in its model, not in hamimig): when a process query fails,
    the Idle instance it was about blocks as busy, so an allocation without a placement takes
    the next placement and reclaims the Idle instance blocking that one. The model allowed only
    the first choice's blockers to go."""
    _replay(
        lambda m: m.create_unmanaged(0, "1g.10gb", 0),  # 1g.20gb at 0 is blocked for good
        _allocate("a", "1g.10gb", 4),  # ...and at 4 (Active)
        _allocate("b", "1g.10gb", 2),
        _allocate("c", "1g.10gb", 6),
        lambda m: m.release_pod("b"),  # Idle at 2: the first choice's blocker
        lambda m: m.release_pod("c"),  # Idle at 6: the next choice's blocker
        _allocate("d", "1g.20gb", None, (("nvmlDeviceGetHandleByUUID", "UNKNOWN"), skip)),
    )


def test_leftover_intent_of_a_finished_allocation_never_blocks_the_gpu() -> None:
    """Found by the machine (after the first fix below): the intent of a finished allocation
    whose removal failed was skipped only while its MIG UUID had a record, so once that
    instance was released and reclaimed every allocation on the GPU exited 5."""
    _replay(
        _allocate("a", "1g.10gb", None, (("intent.remove", "EIO"), 0)),
        _allocate("b", "1g.10gb", None),  # the GPU stays usable...
        lambda m: m.release_pod("a"),
        lambda m: m.reclaim_all_idle(0, False, None),
        _allocate("c", "1g.10gb", None),  # ...also once a's instance is gone
    )


def test_intent_removal_failure_after_the_record_is_not_a_failed_allocation() -> None:
    """Found by the machine: allocate exited 4 (contract: rolled back) although the pod's
    instance was created and Active, and the leftover intent made the next allocation on the
    GPU exit 5."""
    _replay(
        _allocate("a", "1g.10gb", None, (("intent.remove", "EIO"), 0)),
        _allocate("b", "1g.10gb", None),
    )


def test_ci_read_back_failure_is_rolled_back() -> None:
    """Found by the machine: NVML failing right after creating the CI (before the intent knew
    the CI) left GI and CI live -- the rollback destroyed only the GI, which failed IN_USE --
    and kept an intent that blocked the GPU (exit 5)."""
    _replay(_allocate("a", "1g.10gb", None, (("nvmlComputeInstanceGetInfo", "UNKNOWN"), 0)))


def test_gi_read_back_failure_is_rolled_back() -> None:
    """Found by the machine: NVML failing right after creating the GI (reading its ID back)
    dropped the intent and left an unjournalled OrphanGI that hamimig never reclaims."""
    _replay(
        _allocate("a", "1g.10gb", None, (("nvmlGpuInstanceGetInfo", "UNKNOWN"), 0)),
        _allocate("b", "1g.10gb", 0),  # its slot is free again
    )


def test_stale_reclaiming_record_is_finished_before_its_slot_is_reused() -> None:
    """Found by the machine: a Reclaiming record whose hardware was gone (its removal failed)
    was no blocker, so allocate created a new GI with the same ID at the same placement; the
    record then named another live instance and every allocate on the GPU exited 5."""
    _replay(
        _allocate("a", "1g.10gb", 0),
        lambda m: m.release_pod("a"),
        # reclaims a's Idle instance: hardware and CDI spec go, the record removal fails
        _allocate("b", "1g.20gb", 0, (("record.remove", "EIO"), 0)),
        _allocate("c", "1g.10gb", 0),
        _allocate("d", "1g.10gb", 1),
        lambda m: m.reconcile(None),
    )
