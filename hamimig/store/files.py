"""Atomic, symlink-safe file I/O for the state and CDI directories (docs/design.md "Crash
safety"): every durable change is a whole-file replace or a remove that survives a crash. The
directories are shared (HAMi, runtimes, a hostPath), so every operation is relative to a
directory opened with O_NOFOLLOW: one swapped for a link cannot redirect a write. Faults go
through a `FileOp` hook so the simulator can fail one named operation.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

from hamimig.errors import UsageError
from hamimig.store._fields import reason_of
from hamimig.vocabulary import FileOpName

FileOp = Callable[[FileOpName, Callable[[], None]], None]
"""`file_op(op_name, perform)`: must call `perform()`; may raise or exit around it."""

TEMP_PREFIX = ".hamimig-tmp-"
"""Temp names start with a dot and never with `hami-owned-`, and never end in .json/.yaml, so
neither HAMi's record loader nor a CDI runtime ever picks up a half-written file."""

MAX_READ_BYTES = 4 * 1024 * 1024
"""Records, intents, queues and specs are a few hundred bytes; a huge file is not ours."""

STATE_DIR_MODE = 0o750
STATE_FILE_MODE = 0o600
"""The state directory's mode and its files': private to root (CDI's are 0755 and 0644)."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

T = TypeVar("T")


def no_faults(op: FileOpName, perform: Callable[[], None]) -> None:
    """The production hook: just perform the operation."""
    perform()


@dataclass(frozen=True)
class Noted:
    """A command's stores write through this: each operation under the injected fault hook
    (the simulator's, or none), and each one that completed noted in `done`, in order, so that
    the executor can say what a step changed on disk. Nothing here calls above the store."""

    faults: FileOp
    done: list[FileOpName]

    def __call__(self, op: FileOpName, perform: Callable[[], None]) -> None:
        self.faults(op, perform)
        self.done.append(op)


def _check_name(name: str) -> None:
    # Names are always computed by hamimig; anything path-like here is a bug, not input.
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")


def _not_usable(path: Path, why: str) -> UsageError:
    return UsageError(f"{path} is not a usable directory ({why})")


def check_dir(path: Path) -> bool:
    """True if `path` is a real directory, False if it is absent; `UsageError` (exit 2,
    docs/formats.md) for anything else, rather than something to work around."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        raise _not_usable(path, "a parent is not a directory") from None
    if stat.S_ISLNK(st.st_mode):
        raise _not_usable(path, "it is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise _not_usable(path, "it is not a directory")
    return True


def ensure_dir(path: Path, mode: int) -> None:
    """Create `path` (and parents) if missing, the leaf chmodded to exactly `mode` since mkdir's
    is masked by the umask. An existing directory keeps its mode: an operator or a hostPath mount
    may have chosen it deliberately."""
    if check_dir(path):
        return
    try:
        path.mkdir(parents=True, mode=mode)
    except FileExistsError:
        # Lost a race with another creator, or something else appeared: judge what is there.
        if check_dir(path):
            return
        raise _not_usable(path, "it vanished while being created") from None
    except NotADirectoryError:
        raise _not_usable(path, "a parent is not a directory") from None
    os.chmod(path, mode, follow_symlinks=False)
    # A new directory entry is durable only once its parent is synced (when it can be opened).
    with contextlib.suppress(OSError, UsageError), open_dir(path.parent) as parent_fd:
        os.fsync(parent_fd)


def check_usable_dir(path: Path, what: str, create_parents: bool) -> None:
    """Refuse (UsageError) a directory hamimig could not write (docs/formats.md "Files"), before
    anything is changed: found at the first write, a GI and CI would exist that can be neither
    recorded nor handed out."""
    try:
        exists = check_dir(path)
    except UsageError as exc:
        raise UsageError(f"{what} {exc.message}") from None
    if exists:
        if not os.access(path, os.W_OK | os.X_OK):
            raise UsageError(f"{what} {path} is not writable and searchable by uid {os.getuid()}")
        return
    parent = path.parent
    if create_parents:
        while not os.path.lexists(parent) and parent != parent.parent:
            parent = parent.parent
    elif not os.path.lexists(parent):
        raise UsageError(f"{what} {path} does not exist and neither does its parent {parent}")
    # The parent may be a symlink (/var/run -> /run); only the directory itself may not.
    if not os.path.isdir(parent):
        raise UsageError(f"{what} {path} cannot be created: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(
            f"{what} {path} does not exist and {parent} is not writable by uid {os.getuid()}"
        )


@contextlib.contextmanager
def open_dir(directory: Path) -> Iterator[int]:
    """A descriptor of `directory` itself (never of a symlink's target), closed on exit."""
    try:
        fd = os.open(directory, DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _not_usable(directory, "it is a symbolic link or not a directory") from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def atomic_write(directory: Path, name: str, data: bytes, mode: int) -> None:
    """Replace `directory/name` with `data` so that a crash leaves the old or the new file. A
    symlink there is replaced, never written through (`os.replace` renames over the link)."""
    _check_name(name)
    with open_dir(directory) as dir_fd:
        tmp = f"{TEMP_PREFIX}{name}-{secrets.token_hex(8)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                # The open mode was masked by the umask; chmod before fsync so that the mode
                # is as durable as the content.
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)


def remove_file(directory: Path, name: str) -> bool:
    """Unlink `directory/name` durably; False when it was already absent.

    unlink never follows a symlink, so a link planted at our name is removed, not its target.
    """
    _check_name(name)
    if not check_dir(directory):
        return False
    with open_dir(directory) as dir_fd:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        os.fsync(dir_fd)
    return True


_NOT_REGULAR = (
    (stat.S_ISLNK, "is a symbolic link (not followed)"),
    (stat.S_ISDIR, "is a directory, not a regular file"),
    (stat.S_ISFIFO, "is a FIFO, not a regular file"),
    (stat.S_ISSOCK, "is a socket, not a regular file"),
)


def describe_entry(directory: Path, name: str) -> str | None:
    """Why `directory/name` cannot be one of our files (a symlink, a FIFO...), or None if regular,
    so a problem names what the entry is, and a link's target is never touched."""
    mode = os.lstat(directory / name).st_mode
    if stat.S_ISREG(mode):
        return None
    other = "is a device or special file, not a regular file"
    return next((why for kind, why in _NOT_REGULAR if kind(mode)), other)


def read_regular(directory: Path, name: str) -> bytes:
    """The content of `directory/name`, refusing anything but a regular file: O_NOFOLLOW, and
    O_NONBLOCK so a planted FIFO cannot hang the open; fstat checks what was opened, which also
    covers an entry swapped after a caller's lstat."""
    return _read_opened(open_regular(directory, name))


def open_regular(directory: Path, name: str) -> int:
    """A read-only descriptor of `directory/name` if it is a regular file (the caller closes
    it), for a reader that reads it its own way; ValueError for a symlink (never followed) or
    anything else that is not a regular file, OSError when it cannot be opened."""
    _check_name(name)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(directory / name, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("is a symbolic link (not followed)") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_opened(fd: int) -> bytes:
    """The content of the file open at `fd` (closed here), if it is a regular file of at most
    `MAX_READ_BYTES`; ValueError otherwise. fstat checks what was actually opened."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("is not a regular file")
        if st.st_size > MAX_READ_BYTES:
            raise ValueError(f"is {st.st_size} bytes, larger than any hamimig file")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 65536):
            total += len(chunk)
            if total > MAX_READ_BYTES:
                raise ValueError("grew larger than any hamimig file while being read")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_input(path: Path) -> bytes:
    """An input file an operator points hamimig at (the config, NVIDIA's CDI spec): links are
    followed (a ConfigMap mount is one), but only a bounded regular file is read, so a FIFO or
    /dev/zero cannot hang the command or fill its memory."""
    return _read_opened(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))


# --------------------------------------------------------------------------------------------
# Reading our files, and what stores say about them


@dataclass(frozen=True)
class Problem:
    """A file hamimig could not use, and why. `store`, `subject` and `io` (the OS refused the
    read, rather than the file being wrong) place it for reports; equality is file and reason."""

    file: str
    reason: str
    io: bool = field(default=False, compare=False)
    store: str = field(default="", compare=False)
    subject: str = field(default="", compare=False)


def read_entry(directory: Path, name: str, decode: Callable[[bytes], T]) -> T | Problem | None:
    """One of our files decoded, a `Problem`, or None when absent (or vanished since listing).
    Every loader reads through here, so none can forget a case; `decode` raises ValueError for
    bad content and never returns None."""
    path = str(directory / name)
    try:
        why = describe_entry(directory, name)
        if why is not None:
            return Problem(path, why)
        decoded = decode(read_regular(directory, name))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return Problem(path, reason_of(exc), io=True)
    except RecursionError:
        return Problem(path, "is nested too deeply")
    except ValueError as exc:
        return Problem(path, reason_of(exc))
    if decoded is None:  # a decoder's bug must not read as an absent file
        return Problem(path, "holds no value")
    return decoded


@dataclass(frozen=True)
class ModeFinding:
    """A file of a store whose permissions are not the ones the store writes."""

    path: Path
    store: str
    subject: str
    mode: int
    expected: int
    decides: bool = True

    @property
    def writable_by_others(self) -> bool:
        """Group- or world-writable: others could forge or delete it."""
        return bool(self.mode & 0o022)


class StoreFiles:
    """What a store knows about its own files, so reports (doctor) ask the store instead of
    knowing its names, modes and formats. Writes and removals go through `file_op`, named, so
    the simulator can fail or crash exactly one."""

    store: ClassVar[str]
    prefix: ClassVar[str]
    suffix: ClassVar[str]
    """A store of many files owns the names with this prefix and suffix."""
    file_mode: ClassVar[int] = STATE_FILE_MODE
    dir_mode: ClassVar[int] = STATE_DIR_MODE
    decides: ClassVar[bool] = True
    """Whether what the files say decides what hamimig does to instances (so that a file
    others could write is a forgery risk), rather than being bookkeeping."""

    def __init__(self, directory: Path, file_op: FileOp = no_faults) -> None:
        self.directory = directory
        self.file_op = file_op

    def owns(self, name: str) -> bool:
        return name.startswith(self.prefix) and name.endswith(self.suffix)

    def names(self) -> list[str]:
        """The store's files by name, sorted; [] when the directory is absent."""
        if not check_dir(self.directory):
            return []
        with open_dir(self.directory) as dir_fd:
            return sorted(n for n in os.listdir(dir_fd) if self.owns(n))

    def write_named(self, op: FileOpName | None, name: str, data: bytes) -> None:
        """Create or replace `name` atomically with the store's mode, creating the directory
        with the store's directory mode first. `op` None: bookkeeping, no fault hook."""
        ensure_dir(self.directory, self.dir_mode)
        if op is None:
            atomic_write(self.directory, name, data, self.file_mode)
        else:
            self.file_op(op, lambda: atomic_write(self.directory, name, data, self.file_mode))

    def remove_named(self, op: FileOpName, name: str) -> bool:
        """Remove `name` durably; False when it was already gone (a retried removal)."""
        removed: list[bool] = []
        self.file_op(op, lambda: removed.append(remove_file(self.directory, name)))
        return bool(removed and removed[0])

    def subject(self, name: str) -> str:
        """Which of the store's files `name` is, in a report's words (empty: the only one)."""
        return ""

    def read_file(self, name: str, decode: Callable[[bytes], T]) -> T | Problem | None:
        """`read_entry`, with a problem saying which store and file it concerns."""
        loaded = read_entry(self.directory, name, decode)
        if isinstance(loaded, Problem):
            return self.problem(name, loaded.reason, loaded.io)
        return loaded

    def read_all(
        self, decode: Callable[[str, bytes], T]
    ) -> tuple[list[tuple[str, T]], list[Problem]]:
        """Every file of the store that `decode(name, data)` accepts, by name, and every one it
        cannot use as a `Problem` (`read_file`)."""
        found: list[tuple[str, T]] = []
        problems: list[Problem] = []
        for name in self.names():
            loaded = self.read_file(name, functools.partial(decode, name))
            if isinstance(loaded, Problem):
                problems.append(loaded)
            elif loaded is not None:
                found.append((name, loaded))
        return found, problems

    def problem(self, name: str, reason: str, io: bool = False) -> Problem:
        return Problem(str(self.directory / name), reason, io, self.store, self.subject(name))

    def inspect_modes(self) -> list[ModeFinding]:
        """The store's regular files whose mode is not `file_mode` (anything but a regular file
        is the loader's problem, reported with its reason)."""
        found: list[ModeFinding] = []
        for name in self.names():
            try:
                st = os.lstat(self.directory / name)
            except FileNotFoundError:
                continue
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISREG(st.st_mode) and mode != self.file_mode:
                path, subject = self.directory / name, self.subject(name)
                found.append(
                    ModeFinding(path, self.store, subject, mode, self.file_mode, self.decides)
                )
        return found


class SingleFile(StoreFiles):
    """A store that is one file in its directory (the removal queue, the counters)."""

    file_name: ClassVar[str]

    def owns(self, name: str) -> bool:
        return name == self.file_name

    @property
    def path(self) -> Path:
        return self.directory / self.file_name

    def read_or(
        self, decode: Callable[[bytes], T], empty: Callable[[], T]
    ) -> tuple[T, Problem | None]:
        """The file decoded (`read_file`), `empty()` when it or the directory is absent;
        `empty()` and the `Problem` when it cannot be used."""
        loaded = self.read_file(self.file_name, decode) if check_dir(self.directory) else None
        if isinstance(loaded, Problem):
            return empty(), loaded
        return empty() if loaded is None else loaded, None
