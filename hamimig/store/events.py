"""The event journal, `events.jsonl` (docs/formats.md "Event journal"): it answers "why did my
instance disappear?" after the fact, so it outlives the process and is cheap to write.
Bookkeeping, not durable state: nothing hamimig decides reads it (docs/design.md "Crash
safety"). Files are opened relative to the directory with O_NOFOLLOW and O_NONBLOCK, so a
planted link or FIFO neither redirects nor hangs a writer or reader.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hamimig.durations import parse_time
from hamimig.store._fields import not_json
from hamimig.store.files import (
    STATE_FILE_MODE,
    Problem,
    StoreFiles,
    check_dir,
    ensure_dir,
    open_dir,
    open_regular,
)
from hamimig.vocabulary import FileOpName

EVENTS_NAME = "events.jsonl"
ROTATED_NAME = "events.jsonl.1"
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
MIN_MAX_BYTES = 4096
MAX_MAX_BYTES = 1024 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024
"""An event is a few hundred bytes; a longer line is not one of ours (and is skipped)."""

_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Event = dict[str, object]
"""One event as its JSON object (docs/formats.md "Event journal" lists the keys)."""


@dataclass(frozen=True)
class JournalRead:
    """The events the journal holds, oldest first, and the lines and files it had to skip."""

    events: tuple[Event, ...]
    problems: tuple[Problem, ...]
    matched: int = 0
    """How many events matched, of which `events` holds the last ones asked for."""


class EventJournal(StoreFiles):
    """`events.jsonl` and its one rotated predecessor in the state directory."""

    store = "events"
    decides = False

    def owns(self, name: str) -> bool:
        return name in (EVENTS_NAME, ROTATED_NAME)

    @property
    def path(self) -> Path:
        return self.directory / EVENTS_NAME

    def append(self, event: Event, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        """Append one event durably (the caller holds the node lock). Raises OSError (or a
        `UsageError` for an unusable state directory) when it could not be written."""
        line = (json.dumps(event, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
        ensure_dir(self.directory, self.dir_mode)
        self.file_op(FileOpName.EVENTS_WRITE, lambda: self._append(line, max_bytes))

    def _append(self, line: bytes, max_bytes: int) -> None:
        with open_dir(self.directory) as dir_fd:
            fd, created = _open_for_append(dir_fd)
            try:
                size = os.fstat(fd).st_size
                if size and size + len(line) > max_bytes:
                    os.close(fd)
                    fd = -1
                    os.replace(EVENTS_NAME, ROTATED_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                    fd, _ = _open_for_append(dir_fd)
                    created, size = True, 0
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # end a torn last line, so this event is read whole
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                if fd >= 0:
                    os.close(fd)
            if created:
                os.fsync(dir_fd)

    def health(self) -> JournalHealth:
        """Both files' sizes and their problems, from their last line only (`read` judges every
        line)."""
        if not check_dir(self.directory):
            return JournalHealth(0, 0, ())
        names = (ROTATED_NAME, EVENTS_NAME)
        found = {n: tail for n in names if (tail := _tail_problem(self.directory, n)) is not None}
        problems = tuple(self.problem(n, why) for n, (_, why) in found.items() if why is not None)
        return JournalHealth(len(found), sum(size for size, _ in found.values()), problems)

    def read(
        self, select: Callable[[Event], bool] | None = None, last: int | None = None
    ) -> JournalRead:
        """The events `select` keeps, oldest first, only the `last` N: streamed, never held
        whole. Takes no lock: a reader may miss an event being appended, never see half of one
        (a last line without its newline is skipped as torn)."""
        if not check_dir(self.directory):
            return JournalRead((), ())
        events: deque[Event] = deque(maxlen=last)
        matched = 0
        problems: list[Problem] = []
        for name in (ROTATED_NAME, EVENTS_NAME):
            bad: list[int] = []
            try:
                for number, raw in _lines(self.directory, name):
                    event = decode_event(raw)
                    if event is None:
                        bad.append(number)
                    elif select is None or select(event):
                        matched += 1
                        events.append(event)  # a deque: only the `last` N stay
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                problems.append(self.problem(name, f"cannot be read: {why}", io=True))
                continue
            if bad:
                shown = ", ".join(str(n) for n in bad[:5]) + (", ..." if len(bad) > 5 else "")
                what = "line" if len(bad) == 1 else f"{len(bad)} lines"
                problems.append(self.problem(name, f"{what} skipped, not an event: {shown}"))
        return JournalRead(tuple(events), tuple(problems), matched)


@dataclass(frozen=True)
class JournalHealth:
    """What `doctor` says of the journal without reading it whole: its size and what is wrong
    with its files (not a regular file, unreadable, a torn or foreign last line)."""

    files: int
    size: int
    problems: tuple[Problem, ...]


def _tail_problem(directory: Path, name: str) -> tuple[int, str | None] | None:
    """(size, why the file is not a journal whose last line is an event); None when absent."""
    try:
        fd = open_regular(directory, name)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        return 0, str(exc)
    except OSError as exc:
        return 0, f"cannot be read: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            return 0, None
        tail = os.pread(
            fd, min(st.st_size, MAX_LINE_BYTES + 1), max(0, st.st_size - MAX_LINE_BYTES - 1)
        )
    finally:
        os.close(fd)
    if not tail.endswith(b"\n"):
        return st.st_size, "its last line is torn (the next append ends it; readers skip it)"
    last = tail[:-1].rsplit(b"\n", 1)[-1]
    if decode_event(last + b"\n") is None:
        return st.st_size, "its last line is not an event (readers skip it)"
    return st.st_size, None


def _open_for_append(dir_fd: int) -> tuple[int, bool]:
    """The journal open for appending, created 0600 when absent; only a regular file."""
    created = False
    try:
        fd = os.open(EVENTS_NAME, _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        fd = os.open(
            EVENTS_NAME, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, STATE_FILE_MODE, dir_fd=dir_fd
        )
        created = True
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symbolic link (not followed)", EVENTS_NAME) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "is not a regular file", EVENTS_NAME)
        if st.st_nlink != 1:
            # A hard link planted at our name would have us append to another file.
            raise OSError(errno.EMLINK, "has other hard links (not written through)", EVENTS_NAME)
        if created:
            os.fchmod(fd, STATE_FILE_MODE)  # the umask masked the open mode
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def _lines(directory: Path, name: str) -> Iterator[tuple[int, bytes | None]]:
    """(line number, content) of each line of `directory/name` up to its size when opened;
    content None for a line too long to be an event or a torn last line."""
    fd = open_regular(directory, name)
    with os.fdopen(fd, "rb", buffering=65536) as f:
        left = os.fstat(f.fileno()).st_size  # what is appended while reading is the next reader's
        number = 0
        raw = b"\n"
        while left > 0:
            whole = raw.endswith(b"\n")  # else: the rest of a line too long, skipped
            raw = f.readline(min(left, MAX_LINE_BYTES + 1))
            if not raw:
                break
            left -= len(raw)
            if whole:
                number += 1
                if not raw.endswith(b"\n"):
                    yield number, None  # too long, or torn
                elif raw.strip():
                    yield number, raw


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e999
        raise ValueError(f"{text} is not a finite number")
    return value


def decode_event(raw: bytes | None) -> Event | None:
    """One line as an event, or None when it is not one: a JSON object with an RFC 3339 `time`
    and an `action` (the rest is shown as it is)."""
    if raw is None:
        return None
    try:
        # NaN and Infinity are not JSON: a line holding one is not an event (and echoing it
        # would make `-o json` output no strict parser reads).
        doc = json.loads(raw, parse_constant=not_json, parse_float=_finite)
    except (ValueError, RecursionError):  # RecursionError: a line nested a thousand deep
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("action"), str) or not doc["action"]:
        return None
    when = doc.get("time")
    return doc if isinstance(when, str) and parse_time(when) is not None else None
