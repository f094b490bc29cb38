"""Atomic, symlink-safe file I/O, and the routing of every durable write through `file_op`.

The simulator injects file faults only through the `file_op` hook, so crash tests of the engine
mean something only if every write and removal really passes through it; that is checked here
for all seven operations, and against the simulator's own `run_file_op`.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hamimig.errors import UsageError
from hamimig.hw.types import Placement
from hamimig.rehearsal.simulator import sim_fault_add, sim_init
from hamimig.sim.state import FILE_OPS, SimStore, run_file_op
from hamimig.store import files
from hamimig.store.cdi import CdiDevice, CdiStore
from hamimig.store.events import EventJournal
from hamimig.store.files import (
    atomic_write,
    ensure_dir,
    read_regular,
    remove_file,
)
from hamimig.store.idle_seen import IdleSeen
from hamimig.store.intents import Intent, IntentStore, new_intent_id
from hamimig.store.queue import RemovalQueue
from hamimig.store.records import Record, RecordStore, record_name
from tests.support.records import MIG

REPO_ROOT = Path(__file__).resolve().parent.parent


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def temp_files(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(files.TEMP_PREFIX)]


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def a_record(mig_uuid: str = MIG) -> Record:
    return Record(
        mig_uuid=mig_uuid,
        gpu_uuid="GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        profile="1g.10gb",
        placement=Placement(0, 1),
        gpu_instance_id=7,
        compute_instance_id=0,
    )


# --------------------------------------------------------------------------------------------
# atomic_write


def test_atomic_write_creates_with_exact_mode_despite_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path, "a.json", b"{}\n", 0o644)
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").read_bytes() == b"{}\n"
    assert mode_of(tmp_path / "a.json") == 0o644
    assert temp_files(tmp_path) == []


def test_atomic_write_replaces_content(tmp_path: Path) -> None:
    atomic_write(tmp_path, "a.json", b"old", 0o600)
    atomic_write(tmp_path, "a.json", b"new", 0o600)
    assert (tmp_path / "a.json").read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["a.json"]


def test_atomic_write_replaces_a_symlink_and_leaves_its_target_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "target"
    target.parent.mkdir()
    target.write_bytes(b"precious")
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "a.json").symlink_to(target)
    atomic_write(directory, "a.json", b"ours", 0o600)
    assert target.read_bytes() == b"precious"
    assert not (directory / "a.json").is_symlink()
    assert (directory / "a.json").read_bytes() == b"ours"


def test_temp_name_is_invisible_to_hami_and_cdi_runtimes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: str, **kw: int) -> None:
        seen.append(src)
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", spy)
    atomic_write(tmp_path, record_name(MIG), b"{}", 0o600)
    (tmp,) = seen
    assert tmp.startswith(".hamimig-tmp-" + record_name(MIG) + "-")
    assert not tmp.startswith("hami-owned-")
    assert not tmp.endswith((".json", ".yaml"))


def test_failed_write_keeps_old_content_and_removes_the_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    atomic_write(tmp_path, "a.json", b"old", 0o600)

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated fsync failure")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError) as info:
        atomic_write(tmp_path, "a.json", b"new", 0o600)
    assert info.value.errno == errno.EIO
    monkeypatch.undo()
    assert (tmp_path / "a.json").read_bytes() == b"old"
    assert temp_files(tmp_path) == []


def test_failing_file_op_hook_keeps_the_old_record(tmp_path: Path) -> None:
    RecordStore(tmp_path).write(a_record())
    before = (tmp_path / record_name(MIG)).read_bytes()

    def hook(op: str, perform: Callable[[], None]) -> None:
        raise OSError(errno.ENOSPC, "no space", op)

    newer = dataclasses.replace(a_record(), gpu_instance_id=8)
    with pytest.raises(OSError):
        RecordStore(tmp_path, hook).write(newer)
    assert (tmp_path / record_name(MIG)).read_bytes() == before
    assert temp_files(tmp_path) == []


def test_atomic_write_refuses_path_like_names(tmp_path: Path) -> None:
    for name in ("", ".", "..", "a/b"):
        with pytest.raises(ValueError):
            atomic_write(tmp_path, name, b"", 0o600)


def test_atomic_write_into_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UsageError, match="not a usable directory"):
        atomic_write(link, "a.json", b"x", 0o600)
    assert os.listdir(real) == []


# --------------------------------------------------------------------------------------------
# remove_file / read_regular / ensure_dir


def test_remove_file_reports_whether_something_was_removed(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x")
    assert remove_file(tmp_path, "a") is True
    assert remove_file(tmp_path, "a") is False
    assert remove_file(tmp_path / "absent-dir", "a") is False


def test_remove_file_removes_a_symlink_not_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    (tmp_path / "link").symlink_to(target)
    assert remove_file(tmp_path, "link") is True
    assert target.read_bytes() == b"keep"


def test_read_regular_refuses_symlinks_fifos_and_directories(tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"secret")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    os.mkfifo(tmp_path / "fifo")  # must not hang on open
    (tmp_path / "dir").mkdir()
    assert read_regular(tmp_path, "target") == b"secret"
    for name in ("link", "fifo", "dir"):
        with pytest.raises((OSError, ValueError)):
            read_regular(tmp_path, name)


def test_ensure_dir_creates_parents_with_exact_leaf_mode(tmp_path: Path, umask_022: None) -> None:
    leaf = tmp_path / "a" / "b" / "state"
    ensure_dir(leaf, 0o750)
    assert leaf.is_dir()
    assert mode_of(leaf) == 0o750


def test_ensure_dir_keeps_an_existing_directorys_mode(tmp_path: Path) -> None:
    leaf = tmp_path / "state"
    leaf.mkdir()
    leaf.chmod(0o700)
    ensure_dir(leaf, 0o755)
    assert mode_of(leaf) == 0o700


def test_ensure_dir_refuses_symlinks_and_files(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "file").write_bytes(b"")
    for name in ("link", "file"):
        with pytest.raises(UsageError, match=f"{tmp_path / name} is not a usable directory"):
            ensure_dir(tmp_path / name, 0o750)
    with pytest.raises(UsageError, match="not a usable directory"):
        ensure_dir(tmp_path / "file" / "below", 0o750)


# --------------------------------------------------------------------------------------------
# file_op routing


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def __call__(self, op: str, perform: Callable[[], None]) -> None:
        perform()
        self.calls.append((op, True))


def test_every_durable_operation_goes_through_file_op(tmp_path: Path) -> None:
    state, cdi_dir = tmp_path / "state", tmp_path / "cdi"
    hook = Recorder()
    records = RecordStore(state, hook)
    cdi = CdiStore(cdi_dir, file_op=hook)
    intents = IntentStore(state, hook)
    queue = RemovalQueue(state, hook)
    intent = Intent(
        id=new_intent_id(),
        op="allocate",
        gpu_uuid="GPU-x",
        gpu_index=0,
        profile="1g.10gb",
        profile_id=19,
        placement=Placement(0, 1),
        owner=None,
        created_at="2024-01-01T00:00:00Z",
    )

    records.write(a_record())
    records.remove(MIG)
    cdi.write(CdiDevice(MIG, 0, 66, 67))
    cdi.remove(MIG)
    intents.write(intent)
    intents.remove(intent.id)
    queue.add(MIG, "EIO", "2024-01-01T00:00:00Z")
    IdleSeen(state, hook).save({MIG: "2024-01-01T00:00:00Z"})  # bookkeeping: no hook
    EventJournal(state, hook).append({"time": "2024-01-01T00:00:00Z", "action": "create"})

    assert hook.calls == [
        ("record.write", True),
        ("record.remove", True),
        ("cdi.write", True),
        ("cdi.remove", True),
        ("intent.write", True),
        ("intent.remove", True),
        ("queue.write", True),
        ("events.write", True),
    ]
    assert {op for op, _ in hook.calls} == set(FILE_OPS)


@pytest.fixture
def sim_hook(tmp_path: Path) -> tuple[Path, Callable[[str, Callable[[], None]], None]]:
    path = tmp_path / "sim" / "node.json"
    sim_init(path, "H100-SXM5-80GB", 1)
    return path, functools.partial(run_file_op, SimStore(path))


def test_simulated_raise_fault_fails_the_record_write_and_leaves_no_file(
    tmp_path: Path, sim_hook: tuple[Path, Callable[[str, Callable[[], None]], None]]
) -> None:
    sim, hook = sim_hook
    sim_fault_add(sim, "record.write", "EIO", "raise", 1, 0, None)
    state = tmp_path / "state"
    store = RecordStore(state, hook)
    with pytest.raises(OSError) as info:
        store.write(a_record())
    assert info.value.errno == errno.EIO
    assert os.listdir(state) == []
    store.write(a_record())  # the fault fired once and is gone
    assert os.listdir(state) == [record_name(MIG)]


@pytest.mark.parametrize("op", ["intent.write", "queue.write", "cdi.write"])
def test_simulated_faults_reach_the_other_stores(
    tmp_path: Path, op: str, sim_hook: tuple[Path, Callable[[str, Callable[[], None]], None]]
) -> None:
    sim, hook = sim_hook
    sim_fault_add(sim, op, "ENOSPC", "raise", 1, 0, None)
    with pytest.raises(OSError) as info:
        if op == "intent.write":
            IntentStore(tmp_path / "d", hook).write(
                Intent(
                    id=new_intent_id(),
                    op="allocate",
                    gpu_uuid="GPU-x",
                    gpu_index=0,
                    profile="1g.10gb",
                    profile_id=19,
                    placement=Placement(0, 1),
                    owner=None,
                    created_at="t",
                )
            )
        elif op == "queue.write":
            RemovalQueue(tmp_path / "d", hook).add(MIG, "EIO", "t")
        else:
            CdiStore(tmp_path / "d", file_op=hook).write(CdiDevice(MIG, 0, 66, 67))
    assert info.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path / "d") == []


@pytest.mark.parametrize(("action", "exists"), [("crash-before", False), ("crash-after", True)])
def test_simulated_crash_around_a_record_write(tmp_path: Path, action: str, exists: bool) -> None:
    """A crash fault ends the process before or after the write: all or nothing on disk."""
    sim = tmp_path / "sim" / "node.json"
    sim_init(sim, "H100-SXM5-80GB", 1)
    sim_fault_add(sim, "record.write", "EIO", action, 1, 0, None)
    state = tmp_path / "state"
    script = textwrap.dedent(
        f"""
        import functools
        from pathlib import Path
        from hamimig.sim.state import SimStore, run_file_op
        from hamimig.hw.types import Placement
        from hamimig.store.records import Record, RecordStore
        hook = functools.partial(run_file_op, SimStore(Path({str(sim)!r})))
        RecordStore(Path({str(state)!r}), hook).write(
            Record({MIG!r}, "GPU-x", "1g.10gb", Placement(0, 1), 7, 0)
        )
        """
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, timeout=60, check=False
    )
    assert ran.returncode == 137, ran.stderr
    records, problems = RecordStore(state).load()
    assert problems == []
    assert (MIG in records) is exists
    assert temp_files(state) == []
