"""The state directory: the directory itself (a real directory, owned by root or this user,
not writable by others, its lock file usable), the modes of the stores' files, and what the
stores could load (each unusable record, intent or queue is one failing check naming it).
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from hamimig.engine.facts import Durable, forget_line
from hamimig.engine.node import Node
from hamimig.engine.safety import parent_problem
from hamimig.errors import why
from hamimig.reports.doctor.verdicts import HARDWARE, fail, mode_text, ok, subject_of, warn
from hamimig.reports.views import Check
from hamimig.store.counters import EVENTS_WRITE_FAILURES, Counters
from hamimig.store.events import EventJournal
from hamimig.store.files import STATE_DIR_MODE, StoreFiles
from hamimig.store.idle_seen import IdleSeen
from hamimig.store.lock import NodeLock
from hamimig.vocabulary import State


def check_state_dir(path: Path) -> tuple[list[Check], str]:
    """The directory itself, and whether its files can be loaded: "usable", "missing" or "bad"
    (a symlink or not a directory: the stores refuse it, and so does HAMi)."""
    name = "state-dir"
    fix = f"chmod 0750 {path}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        absent = f"{path} does not exist; hamimig creates it (0750) on the first change"
        hint = "nothing to do on a new node; otherwise check --state-dir and the hostPath mount"
        return [warn(name, absent, hint)], "missing"
    except OSError as exc:
        return [fail(name, f"cannot inspect {path}: {why(exc)}", "run as root", HARDWARE)], "bad"
    if stat.S_ISLNK(st.st_mode):
        link = f"{path} is a symbolic link (to {os.readlink(path)}); hamimig and HAMi refuse it"
        hint = f"make {path} a real directory (mount the hostPath at this path itself)"
        return [fail(name, link, hint)], "bad"
    if not stat.S_ISDIR(st.st_mode):
        # A file, or `/dev/null`: the option is what is wrong, never the file.
        hint = "not a directory: check --state-dir"
        return [fail(name, f"{path} is not a directory", hint)], "bad"
    uid, mode = os.getuid(), stat.S_IMODE(st.st_mode)
    if os.access(path, os.R_OK | os.W_OK | os.X_OK):
        checks = [ok(name, f"{path} is a directory")]
    else:
        unusable = f"{path} is not readable and writable by uid {uid}"
        checks = [fail(name, unusable, "run hamimig as root", HARDWARE)]
    if st.st_uid in (0, uid):
        checks.append(ok(f"{name}/owner", f"owned by uid {st.st_uid}"))
    else:
        foreign = (
            f"owned by uid {st.st_uid}, neither root nor this user (uid {uid}): its owner can "
            "forge ownership records"
        )
        checks.append(fail(f"{name}/owner", foreign, f"chown root {path}"))
    shown = mode_text(mode)
    if mode & 0o022:
        harm = "others can forge or delete ownership records"
        checks.append(
            fail(f"{name}/mode", f"mode {shown} is group- or world-writable: {harm}", fix)
        )
    elif mode != STATE_DIR_MODE:
        expected = f"mode {shown}, expected {mode_text(STATE_DIR_MODE)}"
        checks.append(warn(f"{name}/mode", expected, fix))
    else:
        checks.append(ok(f"{name}/mode", f"mode {shown}"))
    lock = NodeLock(path)
    lock_problem = lock.inspect()
    if lock_problem is not None:
        refused = f"the node lock {lock.path} {lock_problem}; mutating commands refuse it"
        remove = f"remove {lock.path} (hamimig creates the lock file itself)"
        checks.append(fail(f"{name}/lock", refused, remove))
    parent = parent_problem(path)
    if parent is not None:
        checks.append(fail(f"{name}/parent", parent.reason, parent.fix or ""))
    return checks, "usable"


def check_file_modes(stores: Sequence[StoreFiles]) -> list[Check]:
    """Every store's files have the mode it writes them with (records, intents, the queue and
    the counters: 0600); each store names its own files, so none is missed or mistaken."""
    checks: list[Check] = []
    for store in stores:
        for found in store.inspect_modes():
            name = f"file-mode/{found.subject or found.store}"
            fix = f"chmod {mode_text(found.expected)} {found.path}"
            mode = f"{found.path}: mode {mode_text(found.mode)}"
            loose = f"{mode} is group- or world-writable"
            if not found.writable_by_others:
                checks.append(warn(name, f"{mode}, expected {mode_text(found.expected)}", fix))
            elif found.decides:
                checks.append(fail(name, loose, fix))
            else:  # bookkeeping: others could skew the metrics, not take an instance
                what = "the event history" if found.store == "events" else "the metrics"
                checks.append(warn(name, f"{loose} (only {what} depends on it)", fix))
    return checks


def check_durable(node: Node, durable: Durable) -> list[Check]:
    checks: list[Check] = []
    for problem in durable.problems:
        line = forget_line(problem, node)
        way = f"drop it: {line}" if line else "move it out of the state directory"
        hint = (
            "mutating commands and recover exit 5 until it is repaired or gone: check which "
            f"instance it describes, then repair it or {way}"
        )
        name = subject_of(problem.store or "record", problem.subject)
        checks.append(fail(name, f"{problem.file}: {problem.reason}", hint))
    if not any(c.name.startswith("record/") for c in checks):  # else the files say why
        by_state = Counter(
            r.state.value if r.managed else f"{State.IDLE.value} (HAMi's)"
            for r in durable.records.values()
        )
        detail = ", ".join(f"{n} {s}" for s, n in sorted(by_state.items()))
        count = len(durable.records)
        checks.append(ok("records", f"{count} record(s) load" + (f": {detail}" if detail else "")))
    if durable.intents:
        described = "; ".join(
            f"{i.op} {i.profile} at {i.placement} on GPU {i.gpu_index} since {i.created_at}"
            for i in durable.intents
        )
        hint = "if no hamimig command is running: hamimig recover (rolls back or finishes them)"
        checks.append(warn("intents", f"{len(durable.intents)} intent(s) left: {described}", hint))
    elif not any(c.name.startswith("intent/") for c in checks):
        checks.append(ok("intents", "no allocation in flight"))
    if durable.removals:
        oldest = durable.removals[0]
        checks.append(
            fail(
                "cdi-removal-queue",
                f"{len(durable.removals)} CDI spec removal(s) pending (oldest {oldest.mig_uuid} "
                f"since {oldest.since}, {oldest.attempts} attempt(s): {oldest.last_error})",
                "hamimig reconcile (retries them); until then a new instance on that GPU is "
                "refused, since it could get the stale spec's device nodes",
            )
        )
    elif not any(c.name == "cdi-removal-queue" for c in checks):
        checks.append(ok("cdi-removal-queue", "empty"))
    return checks


def check_counters(counters: Counters) -> Check:
    """The lifecycle counters `metrics` exports: bookkeeping, so an unreadable file is a
    warning (the metrics read zeros, a counter reset to Prometheus), never a failure."""
    values = counters.load()
    if values.problem is not None:
        return warn(
            "counters",
            f"{values.problem.file}: {values.problem.reason}; metrics report zeros",
            f"move {values.problem.file} away: the next change starts counting again",
        )
    total = sum(n for by_label in values.values.values() for n in by_label.values())
    return ok("counters", f"{total} lifecycle event(s) counted")


def check_events(journal: EventJournal, counters: Counters) -> Check:
    """The event journal: bookkeeping (nothing hamimig decides reads it), so a planted or torn
    file is a warning; judged from each file's last line, not read whole. Appends that failed
    are said (the history has gaps), as a count: the alert on its increase is what pages."""
    health = journal.health()
    failed = counters.load().get(EVENTS_WRITE_FAILURES)
    gaps = f"; {failed} append(s) failed so far (the history has gaps)" if failed else ""
    if health.problems:
        first = health.problems[0]
        return warn(
            "events",
            "; ".join(f"{p.file}: {p.reason}" for p in health.problems) + gaps,
            f"hamimig events (lists what it can read); move {first.file} away if it is not "
            "hamimig's journal",
        )
    if not health.files:
        return ok("events", "no event journal yet (the first change writes it)" + gaps)
    return ok("events", f"{health.size} byte(s) of events in {health.files} file(s)" + gaps)


def check_idle_seen(seen: IdleSeen) -> Check:
    """When the idle policy first saw HAMi's own Idle records: an unreadable file only restarts
    those clocks (the policy then waits longer), so it is a warning."""
    times, problem = seen.load()
    if problem is not None:
        return warn(
            "idle-seen",
            f"{problem.file}: {problem.reason}; the idle policy restarts the clocks of HAMi's "
            "own records",
            f"move {problem.file} away: the next reconcile with pods writes it again",
        )
    return ok("idle-seen", f"{len(times)} first sighting(s) of HAMi's own Idle records")
