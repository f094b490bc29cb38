"""The node a command works on: paths from the global options and a hardware session.

Hardware is opened lazily and once per command, so read-only commands that never touch NVML
(and `--help`) never import pynvml or load the driver.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from hamimig.config import Config, load_config
from hamimig.defaults import DEFAULT_CDI_DIR, DEFAULT_CONFIG, DEFAULT_STATE_DIR
from hamimig.durations import to_rfc3339
from hamimig.errors import HamimigError, UsageError
from hamimig.hw.devnodes import DEFAULT_CAPABILITIES, DEFAULT_PROC_DEVICES
from hamimig.hw.minors import DEFAULT_MIG_MINORS
from hamimig.hw.nvml import NvmlHardware, bindings
from hamimig.hw.types import Gpu, MigHardware
from hamimig.hw.types import legal_placement as legal_placement  # re-exported
from hamimig.hw.types import parse_placement as parse_placement  # re-exported
from hamimig.sim.backend import SimBackend
from hamimig.sim.files import NodeFiles, node_home, not_a_node
from hamimig.store.cdi import CdiStore
from hamimig.store.cdi_base import BaseLookup, find_base
from hamimig.store.counters import Counters
from hamimig.store.events import EventJournal
from hamimig.store.files import FileOp, check_usable_dir, no_faults
from hamimig.store.idle_seen import IdleSeen
from hamimig.store.intents import IntentStore
from hamimig.store.lock import NodeLock
from hamimig.store.queue import RemovalQueue
from hamimig.store.records import RecordStore
from hamimig.vocabulary import FileOpName

SYSTEM_CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
"""Where runtimes read CDI specs, and so where the node's NVIDIA spec is looked for."""

_GPU_UUID = re.compile(r"^GPU-[0-9A-Fa-f-]{8,64}$")


@dataclass
class Node:
    """What every command needs to know about where it runs, opened lazily."""

    state_dir: Path = DEFAULT_STATE_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    config_path: Path = DEFAULT_CONFIG
    sim: Path | None = None
    node_name: str | None = None
    lock_timeout: float = 60.0
    read_only: bool = False
    """A dry run: the node lock is never taken and the executor applies no step (a bug that
    tried would exit 1 before writing anything)."""
    setting_sources: dict[str, str] = field(default_factory=dict)
    """Where each of the fields above came from (`config show`): "default", "env VAR" or
    "option --flag", by field name (`state_dir`, `cdi_dir`, `config`, `sim`, `node`)."""
    clock_source: Callable[[], float] | None = None
    """Seconds since the epoch; None: the host's clock, or a simulated node's own."""
    _hw: NvmlHardware | None = field(default=None, repr=False)
    _config: Config | None = field(default=None, repr=False)
    cache: dict[str, object] = field(default_factory=dict, repr=False)
    """What one command reads once and asks for several times (the CDI directory scan)."""
    file_ops: list[FileOpName] = field(default_factory=list, repr=False)
    """The durable-state file operations this command completed, in order (see `file_op`)."""
    command: str | None = None
    """The hamimig command running (`allocate`, `reconcile`...), as the event journal names it."""
    deferred: HamimigError | None = None
    """A dry run's verdict: the first refusal the real run would raise where planning found it
    (`refuse`), kept while the dry run plans on, so that it can show its plan and still exit
    with the real run's code."""

    def refuse(self, err: HamimigError, dry_run: bool) -> None:
        """Raise `err`, the refusal of a run that would change the node; a dry run notes it
        (the first one) and goes on planning."""
        if not dry_run:
            raise err
        if self.deferred is None:
            self.deferred = err

    def pasteable(self, line: str) -> str:
        """`hamimig LINE` as the operator pastes it to act on this node: with the global options
        given on the command line that chose it (`--sim`, `--state-dir`, `--cdi-dir`,
        `--config`), shell-quoted; those set in the environment reach the paste anyway."""
        import shlex

        given = {
            "sim": self.sim,
            "state_dir": self.state_dir,
            "cdi_dir": self.cdi_dir,
            "config": self.config_path,
        }
        words = ["hamimig"]
        for name, value in given.items():
            source = self.setting_sources.get(name, "")
            if source.startswith("option ") and value is not None:
                words += [source.removeprefix("option "), shlex.quote(str(value))]
        return " ".join([*words, line])

    def now(self) -> float:
        """This node's time: a simulated node's clock runs at the host's pace from wherever
        `sim clock` set it, read once per command (a command is one moment to the policy)."""
        if self.clock_source is not None:
            return self.clock_source()
        return time.time() + self.clock_offset()

    def clock_offset(self) -> float:
        """How far this node's clock is from the host's (0 unless it is simulated)."""
        if self.sim is None or self.clock_source is not None:
            return 0.0
        cached = self.cache.get("clock-offset")
        if not isinstance(cached, float):
            cached = SimBackend(self.sim).store.read().clock_offset
            self.cache["clock-offset"] = cached
        return cached

    def clock(self) -> str:
        """`now()` as the RFC 3339 UTC text every file of hamimig's carries."""
        return to_rfc3339(self.now())

    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config

    def _faults(self) -> FileOp:
        return no_faults if self.sim is None else SimBackend(self.sim).file_op

    def file_op(self) -> FileOp:
        """On a simulated node, durable-state file operations honour the simulator's faults.
        Every operation that completes is noted in `file_ops` (what a step changed on disk)."""
        inner = self._faults()
        done = self.file_ops

        def noted(op: FileOpName, perform: Callable[[], None]) -> None:
            inner(op, perform)
            done.append(op)

        return noted

    def records(self) -> RecordStore:
        return RecordStore(self.state_dir, self.file_op())

    def intents(self) -> IntentStore:
        return IntentStore(self.state_dir, self.file_op())

    def queue(self) -> RemovalQueue:
        return RemovalQueue(self.state_dir, self.file_op())

    def cdi(self) -> CdiStore | None:
        """The CDI spec store, or None in legacy non-CDI mode (`cdi.enabled: false`)."""
        cfg = self.config()
        if not cfg.cdi_enabled:
            return None
        return CdiStore(
            self.cdi_dir, cfg.cdi_kind, cfg.cdi_annotations, self.file_op(), self.cdi_base
        )

    def files(self) -> NodeFiles:
        """The driver's files (in a simulated node's home)."""
        if self.sim is not None:
            return SimBackend(self.sim).files
        return NodeFiles(DEFAULT_MIG_MINORS, DEFAULT_PROC_DEVICES, DEFAULT_CAPABILITIES, None)

    def cdi_base_dirs(self) -> tuple[Path, ...]:
        """Where `cdi.baseSpec: auto` looks: a simulated node's own directory only (never the
        host's), else the runtimes' directories and `--cdi-dir`."""
        own = self.files().cdi_base_dir
        if own is not None:
            return (own,)
        dirs = [*SYSTEM_CDI_DIRS, self.cdi_dir]
        return tuple(d for i, d in enumerate(dirs) if d not in dirs[:i])

    def cdi_base(self, config: Config | None = None) -> BaseLookup:
        """The node's NVIDIA CDI spec as `cdi.baseSpec` says, looked up once per command."""
        setting = (config or self.config()).cdi_base_spec
        key = f"cdi-base:{setting}"
        found = self.cache.get(key)
        if isinstance(found, BaseLookup):
            return found
        lookup = find_base(setting, self.cdi_base_dirs())
        self.cache[key] = lookup
        return lookup

    def counters(self) -> Counters:
        """Lifecycle event counters (`counters.json` in the state directory)."""
        return Counters(self.state_dir)

    def events(self) -> EventJournal:
        """The event journal (`events.jsonl`): its appends honour the simulator's faults but
        are not noted in `file_ops`, since they are not part of what a step changed."""
        return EventJournal(self.state_dir, self._faults())

    def idle_seen(self) -> IdleSeen:
        """When the idle policy first saw each of HAMi's own Idle records."""
        return IdleSeen(self.state_dir, self.file_op())

    def check_dirs(self) -> None:
        """Refuse (exit 2) a state or CDI directory that hamimig could not write.

        Mutating commands call this before they touch the hardware: finding out at the first
        write would leave a GI and CI created that can be neither recorded nor handed out. The
        default paths may have their parents created, as on a fresh node (a simulated node's
        directories: in its home); any other path must have an existing parent, so a typo is an
        error rather than a new tree.
        """
        if self.sim is not None and (problem := not_a_node(self.sim)) is not None:
            raise problem  # before the directories in its home are made: nothing of no node
        home = None if self.sim is None else node_home(self.sim)
        check_usable_dir(
            self.state_dir,
            "state directory",
            self.state_dir == DEFAULT_STATE_DIR or self.state_dir.parent == home,
        )
        if self.config().cdi_enabled:
            check_usable_dir(
                self.cdi_dir,
                "CDI directory",
                self.cdi_dir == DEFAULT_CDI_DIR or self.cdi_dir.parent == home,
            )

    def lock(self) -> NodeLock:
        if self.read_only:
            raise HamimigError("a dry run asked for the node lock (a bug); nothing was changed")
        return NodeLock(self.state_dir, self.lock_timeout)

    def lock_unless(self, dry_run: bool) -> AbstractContextManager[object]:
        """The node lock for a run that changes the node; nothing for a dry run.

        A dry run only reads, like `list`: it plans on a snapshot without waiting for the lock
        and without creating the state directory or the lock file, so it never blocks a real run
        and leaves every directory byte for byte as it was. While another command runs it may
        see that command's work half done; it reports, and changes nothing either way.
        """
        return contextlib.nullcontext() if dry_run else self.lock()

    def hardware(self) -> MigHardware:
        """Open NVML (or the simulated node) on first use; closed by `close()`."""
        if self._hw is None:
            if self.sim is not None:
                hw = SimBackend(self.sim).hardware()
            else:
                hw = NvmlHardware(bindings())
            hw.open()
            self._hw = hw
        return self._hw

    def attach(self, hw: NvmlHardware) -> None:
        """Use an already open adapter (a long-lived process: the benchmark, the demo)."""
        self.close()
        self._hw = hw

    def close(self) -> None:
        if self._hw is not None:
            self._hw.close()
            self._hw = None


def parse_gpu_ref(ref: str) -> int | str:
    """An NVML index (`0`) or a GPU UUID (`GPU-…`), syntax only."""
    text = ref.strip()
    if text.isascii() and text.isdigit() and len(text) <= 4:
        return int(text)
    if _GPU_UUID.match(text):
        return text
    raise UsageError(f"invalid GPU {ref!r}: give an NVML index (0) or a GPU UUID (GPU-…)")


def resolve_gpu(hw: MigHardware, parsed: int | str) -> Gpu:
    """A GPU named by NVML index or UUID (as `parse_gpu_ref` gives them). Looks at that GPU
    only, never at the others."""
    if isinstance(parsed, int):
        return hw.gpu(parsed)
    return hw.gpu_by_uuid(parsed)
