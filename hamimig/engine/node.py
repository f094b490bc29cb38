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
from typing import TypeVar, cast

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
from hamimig.store.files import FileOp, Noted, check_usable_dir, no_faults
from hamimig.store.idle_seen import IdleSeen
from hamimig.store.intents import IntentStore
from hamimig.store.lock import NodeLock
from hamimig.store.queue import RemovalQueue
from hamimig.store.records import RecordStore
from hamimig.vocabulary import FileOpName

SYSTEM_CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
"""Where runtimes read CDI specs, and so where the node's NVIDIA spec is looked for."""

_GPU_UUID = re.compile(r"^GPU-[0-9A-Fa-f-]{8,64}$")

T = TypeVar("T")


@dataclass(frozen=True)
class Node:
    """What every command needs to know about where it runs, decided when it is built (by the
    CLI, from the command line); what it reads from the node is read on first use, once."""

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
    pasted: str = "hamimig"
    """How the operator calls hamimig on this node: with the global options that chose it on
    the command line (`pasteable`)."""
    command: str | None = None
    """The hamimig command running (`allocate`, `reconcile`...), as the event journal names it."""
    clock_source: Callable[[], float] | None = None
    """Seconds since the epoch; None: the host's clock, or a simulated node's own."""
    faults: FileOp | None = field(default=None, repr=False)
    """The file-operation fault hook every store writes through; None: a simulated node's
    faults, or none on a real node."""
    opened: MigHardware | None = field(default=None, repr=False)
    """An adapter already open, used instead of opening one (a long-lived process: the
    benchmark, the tests); its owner closes it."""
    loaded_config: Config | None = field(default=None, repr=False)
    """The configuration, instead of reading `config_path`."""
    cache: dict[str, object] = field(default_factory=dict, repr=False)
    """What one command reads once and asks for several times: the config, the open hardware
    (until `close`), the NVIDIA base spec, the CDI directory scan, a simulated clock."""
    file_ops: list[FileOpName] = field(default_factory=list, repr=False)
    """The durable-state file operations this command completed, in order (`Noted`)."""
    refusals: list[HamimigError] = field(default_factory=list, repr=False)
    """A dry run's verdict: the refusals the real run would raise where planning found them
    (`refuse`), kept while the dry run plans on, so that it can show its plan and still exit
    with the real run's code (the first one's)."""
    file_op: Noted = field(init=False, repr=False)
    records: RecordStore = field(init=False, repr=False)
    intents: IntentStore = field(init=False, repr=False)
    queue: RemovalQueue = field(init=False, repr=False)
    idle_seen: IdleSeen = field(init=False, repr=False)
    """When the idle policy first saw each of HAMi's own Idle records."""
    counters: Counters = field(init=False, repr=False)
    """Lifecycle event counters (`counters.json` in the state directory)."""
    events: EventJournal = field(init=False, repr=False)
    """The event journal (`events.jsonl`): its appends honour the simulator's faults but are
    not noted in `file_ops`, since they are not part of what a step changed."""

    def __post_init__(self) -> None:
        faults = self.faults or (no_faults if self.sim is None else SimBackend(self.sim).file_op)
        noted = Noted(faults, self.file_ops)
        made = {
            "file_op": noted,
            "records": RecordStore(self.state_dir, noted),
            "intents": IntentStore(self.state_dir, noted),
            "queue": RemovalQueue(self.state_dir, noted),
            "idle_seen": IdleSeen(self.state_dir, noted),
            "counters": Counters(self.state_dir),
            "events": EventJournal(self.state_dir, faults),
        }
        for name, value in made.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    def _once(self, key: str, read: Callable[[], T]) -> T:
        if key not in self.cache:
            self.cache[key] = read()
        return cast("T", self.cache[key])

    def refuse(self, err: HamimigError, dry_run: bool) -> None:
        """Raise `err`, the refusal of a run that would change the node; a dry run notes it
        and goes on planning."""
        if not dry_run:
            raise err
        self.refusals.append(err)

    def pasteable(self, line: str) -> str:
        """`hamimig LINE` as the operator pastes it to act on this node."""
        return f"{self.pasted} {line}"

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
        sim = self.sim
        return self._once("clock-offset", lambda: SimBackend(sim).store.read().clock_offset)

    def clock(self) -> str:
        """`now()` as the RFC 3339 UTC text every file of hamimig's carries."""
        return to_rfc3339(self.now())

    def config(self) -> Config:
        if self.loaded_config is not None:
            return self.loaded_config
        return self._once("config", lambda: load_config(self.config_path))

    def cdi(self) -> CdiStore | None:
        """The CDI spec store, or None in legacy non-CDI mode (`cdi.enabled: false`)."""
        cfg = self.config()
        if not cfg.cdi_enabled:
            return None
        return CdiStore(
            self.cdi_dir, cfg.cdi_kind, cfg.cdi_annotations, self.file_op, self.cdi_base
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
        return tuple(dict.fromkeys([*SYSTEM_CDI_DIRS, self.cdi_dir]))

    def cdi_base(self, config: Config | None = None) -> BaseLookup:
        """The node's NVIDIA CDI spec as `cdi.baseSpec` says, looked up once per command."""
        setting = (config or self.config()).cdi_base_spec
        return self._once(f"cdi-base:{setting}", lambda: find_base(setting, self.cdi_base_dirs()))

    def check_dirs(self) -> None:
        """Refuse (exit 2) a state or CDI directory that hamimig could not write (rules:
        docs/formats.md, "Files"). Called before the hardware is touched: finding out at the
        first write would leave a GI and CI that can be neither recorded nor handed out."""
        if self.sim is not None and (problem := not_a_node(self.sim)) is not None:
            raise problem  # before the directories in its home are made: nothing of no node
        home = None if self.sim is None else node_home(self.sim)

        def usable(path: Path, what: str, default: Path) -> None:
            check_usable_dir(path, what, path == default or path.parent == home)

        usable(self.state_dir, "state directory", DEFAULT_STATE_DIR)
        if self.config().cdi_enabled:
            usable(self.cdi_dir, "CDI directory", DEFAULT_CDI_DIR)

    def lock(self) -> NodeLock:
        if self.read_only:
            raise HamimigError("a dry run asked for the node lock (a bug); nothing was changed")
        return NodeLock(self.state_dir, self.lock_timeout)

    def lock_unless(self, dry_run: bool) -> AbstractContextManager[object]:
        """The node lock for a run that changes the node; nothing for a dry run, which only
        reads, like `list`: it never blocks a real run and leaves every directory byte for byte
        as it was (and may see another command's work half done)."""
        return contextlib.nullcontext() if dry_run else self.lock()

    def hardware(self) -> MigHardware:
        """Open NVML (or the simulated node) on first use; closed by `close()`."""
        if self.opened is not None:
            return self.opened

        def opened() -> MigHardware:
            hw = NvmlHardware(bindings()) if self.sim is None else SimBackend(self.sim).hardware()
            hw.open()
            return hw

        return self._once("hardware", opened)

    def close(self) -> None:
        hw = self.cache.pop("hardware", None)
        if hw is not None:
            cast(MigHardware, hw).close()


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
    return hw.gpu(parsed) if isinstance(parsed, int) else hw.gpu_by_uuid(parsed)


def select_gpus(hw: MigHardware, ref: int | str | None) -> list[Gpu]:
    """The GPU `ref` names, or every GPU when it names none."""
    return [hw.gpu(i) for i in range(hw.gpu_count())] if ref is None else [resolve_gpu(hw, ref)]
