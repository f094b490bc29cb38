"""Doctor's checks of the CDI directory and our specs in it (docs/cdi.md): the directory is
proved writable by creating and removing a temp file, and each spec is judged as a runtime
would load it, against the live instances.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hamimig.config import Config
from hamimig.engine.facts import Durable
from hamimig.engine.node import Node
from hamimig.engine.safety import cdi_conflicts, scan_cdi_dirs, unreadable_specs
from hamimig.errors import HamimigError, why
from hamimig.hw.types import MigMode
from hamimig.reports.doctor.hardware import Live
from hamimig.reports.doctor.verdicts import (
    HARDWARE,
    UNVERIFIABLE,
    fail,
    guarded,
    ok,
    subject_of,
    warn,
)
from hamimig.reports.views import Check, CheckStatus
from hamimig.store.cdi import CdiDevice, CdiStore, spec_file_name
from hamimig.store.cdi_base import BaseLookup
from hamimig.store.cdi_rules import first_of
from hamimig.store.files import Problem
from hamimig.store.records import Record, forget_name
from hamimig.vocabulary import State


def check_cdi(
    node: Node, config: Config, live: Live, durable: Durable | None, dirs: Sequence[Path]
) -> list[Check]:
    directory = node.cdi_dir
    cdi = CdiStore(
        directory, config.cdi_kind, config.cdi_annotations, base=lambda: node.cdi_base(config)
    )
    if not config.cdi_enabled:
        try:
            ours = cdi.list_ours()
        except (HamimigError, OSError):
            ours = []
        if ours:
            left = f"cdi.enabled is false, yet {len(ours)} spec(s) of ours are in {directory}"
            hint = "remove them once no container uses them, or set cdi.enabled: true"
            return [warn("cdi-dir", left, hint)]
        return [ok("cdi-dir", "CDI disabled (legacy mode): no specs to check")]
    dir_check, usable = _check_cdi_dir(directory)
    checks = [dir_check, _check_base(cdi.lookup(), live)]
    records = {} if durable is None else durable.records
    if usable:
        checks += guarded("cdi-spec", lambda: _check_our_specs(cdi, live, durable))
    checks += guarded("cdi-conflicts", lambda: _check_conflicts(node, cdi, records, dirs))
    return checks


_GENERATE = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (or set cdi.baseSpec: none)"


def _check_base(lookup: BaseLookup, live: Live) -> Check:
    """The NVIDIA spec that instance specs take their driver edits from, and whether it
    describes every MIG GPU (allocate refuses a GPU it lacks)."""
    if not lookup.composes:
        return warn(
            "cdi-base",
            "cdi.baseSpec is none: containers given our devices get device nodes only, no "
            "driver libraries (libcuda, libnvidia-ml), binaries or hooks, so CUDA cannot start "
            "unless the image brings a matching driver",
            "generate NVIDIA's spec (nvidia-ctk cdi generate) and set cdi.baseSpec: auto",
        )
    if lookup.base is None:
        code = HARDWARE if lookup.missing else UNVERIFIABLE
        return fail("cdi-base", lookup.problem or "no NVIDIA CDI spec", _GENERATE, code)
    lacking = []
    enabled = [g for g in live.gpus if g.mig_mode is MigMode.ENABLED]
    for gpu in enabled:
        try:
            lookup.base.parent_edits(gpu.minor)
        except HamimigError as exc:
            lacking.append(f"GPU {gpu.index}: {exc.message}")
    if lacking:
        return fail("cdi-base", first_of(lacking), _GENERATE)
    covered = ", ".join(str(g.index) for g in enabled)
    gpus = f"; it describes GPU(s) {covered}" if covered else ""
    return ok("cdi-base", f"{lookup.base.path} (kind {lookup.base.kind}) is valid{gpus}")


def _check_cdi_dir(path: Path) -> tuple[Check, bool]:
    """The CDI directory; the flag says whether there are specs to look at."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        absent = f"{path} does not exist; hamimig creates it (0755) with the first spec"
        hint = "check --cdi-dir: container runtimes must read the same directory"
        return warn("cdi-dir", absent, hint), False
    except OSError as exc:
        return fail("cdi-dir", f"cannot inspect {path}: {why(exc)}", "run as root", HARDWARE), False
    refuses = "hamimig refuses to write specs there"
    if stat.S_ISLNK(st.st_mode):
        hint = f"make {path} a real directory"
        return fail("cdi-dir", f"{path} is a symbolic link; {refuses}", hint), False
    if not stat.S_ISDIR(st.st_mode):  # a file, or `/dev/null`: the option is what is wrong
        hint = "not a directory: check --cdi-dir"
        return fail("cdi-dir", f"{path} is not a directory; {refuses}", hint), False
    fix = "mount it read-write and run hamimig as root"
    if not os.access(path, os.W_OK | os.X_OK):
        return fail("cdi-dir", f"{path} is not writable by uid {os.getuid()}", fix, HARDWARE), True
    try:
        with tempfile.NamedTemporaryFile(prefix=".hamimig-doctor-", dir=path):
            pass  # created, then removed
    except OSError as exc:
        return fail("cdi-dir", f"cannot create a file in {path}: {why(exc)}", fix, HARDWARE), True
    return ok("cdi-dir", f"{path} is writable"), True


def _check_our_specs(cdi: CdiStore, live: Live, durable: Durable | None) -> list[Check]:
    """The problems among our spec files, and one summary row for those that are fine (all of
    them, or the others beside the problems), not one per instance."""
    names = cdi.list_ours()
    if durable is None:  # records unreadable: whose spec it is cannot be told
        unreadable = set(names)
    else:  # nor for a record that cannot be read, whose own check says why
        unreadable = {
            cdi.file_of_device(device)
            for file in durable.unreadable_records()
            if (device := forget_name(file)) != file
        }
    known = durable or Durable(records={}, intents=(), removals=(), problems=())
    by_spec = {spec_file_name(r.mig_uuid): r for r in known.records.values()}
    queued = {spec_file_name(q.mig_uuid) for q in known.removals}
    in_flight = {spec_file_name(i.mig_uuid) for i in known.intents if i.mig_uuid}
    results = [
        _check_spec(cdi, n, by_spec.get(n), live, n in queued, n in in_flight, n not in unreadable)
        for n in names
    ]
    checks = [c for c in results if c.status is not CheckStatus.OK]
    good = len(results) - len(checks)
    if live.hw is not None and durable is not None:
        checks += _missing_specs(cdi, set(names), live, durable.records)
    if checks:
        return checks + (
            [ok("cdi-specs", f"{good} other spec(s) of ours are fine")] if good else []
        )
    if not names:
        return [ok("cdi-specs", f"no spec of ours in {cdi.directory}")]
    if durable is None:
        compared = " (not matched with records: they cannot be read)"
    elif live.hw is None:
        compared = " (not compared with the hardware: NVML unavailable)"
    else:
        compared = " and match their live instances"
    return [ok("cdi-specs", f"{good} spec(s) of ours, all valid{compared}")]


def _missing_specs(
    cdi: CdiStore, present: set[str], live: Live, records: dict[str, Record]
) -> list[Check]:
    """Active and Idle instances that are live but have no spec: a pod given one cannot start."""
    checks: list[Check] = []
    for record in records.values():
        spec = spec_file_name(record.mig_uuid)
        if spec in present or record.state not in (State.ACTIVE, State.IDLE):
            continue
        try:
            needed = live.needed_device(record)
        except (HamimigError, OSError):
            continue  # the mig-minors or GPU checks say why
        if isinstance(needed, CdiDevice):
            missing = (
                f"missing: {record.mig_uuid} is live but has no spec in {cdi.directory}, so a pod "
                "given it cannot start"
            )
            name = subject_of(cdi.store, cdi.subject(spec))
            checks.append(warn(name, missing, "hamimig recover (rewrites it: repair-cdi)"))
    return checks


def _check_spec(
    cdi: CdiStore,
    name: str,
    record: Record | None,
    live: Live,
    queued: bool,
    in_flight: bool,
    records_known: bool = True,
) -> Check:
    check = subject_of(cdi.store, cdi.subject(name))
    path = cdi.directory / name
    rewrite = "hamimig recover rewrites the spec of a live instance; remove one without a record"
    move = f"move {path} out of the CDI directory if it is not hamimig's"
    found = cdi.inspect(name)
    if found is None:
        return ok(check, f"{path} was removed while doctor looked")
    if isinstance(found, Problem):
        # Without a record no command removes it (it is not ours by content).
        fix = "run as root" if found.io else move if record is None and records_known else rewrite
        return fail(check, f"{path}: {found.reason}", fix, HARDWARE if found.io else UNVERIFIABLE)
    if record is None:
        if not records_known:
            return ok(check, f"{path} is valid (not matched with records: they cannot be read)")
        foreign = cdi.not_ours(name)
        if foreign is not None:
            refused = "recover refuses it and no command removes it"
            return fail(
                check, f"{path} is not hamimig's spec of its instance ({foreign}): {refused}", move
            )
        if queued:
            return warn(
                check, f"{path}: queued for removal (its instance is gone)", "hamimig reconcile"
            )
        if in_flight:
            hint = "if no hamimig command is running: hamimig recover"
            return warn(check, f"{path}: belongs to an allocation in flight (an intent)", hint)
        orphan = f"orphan spec: no record names the device of {path}, yet runtimes still offer it"
        return warn(check, orphan, f"if no container uses it, remove {path}")
    foreign = cdi.foreign(record.mig_uuid)
    if foreign is not None:
        never = "no command overwrites it (recover, reconcile and a reuse of it refuse it)"
        return fail(
            check, f"{path} is not hamimig's spec of {record.mig_uuid} ({foreign}): {never}", move
        )
    what = f"valid, for {record.mig_uuid}"
    if live.hw is None:
        return ok(check, f"{what} (not compared with the hardware: NVML unavailable)")
    try:
        needed = live.needed_device(record)
    except (HamimigError, OSError) as exc:
        return warn(check, f"{what}, but what it needs is unknown: {why(exc)}", "see mig-minors")
    if isinstance(needed, str):
        hint = "hamimig recover (drops or repairs the record and its spec)"
        return warn(
            check, f"{what}, but {needed}: the spec offers a device that does not work", hint
        )
    try:
        same = cdi.matches(needed)
    except HamimigError as exc:
        return warn(
            check, f"{what}; not compared with the NVIDIA CDI spec: {why(exc)}", "see cdi-base"
        )
    if not same:
        differs = (
            f"{path} differs from what {record.mig_uuid} needs (device nodes, the NVIDIA CDI "
            "spec's driver edits, kind or version)"
        )
        return warn(check, differs, "hamimig reconcile or recover (rewrites it: repair-cdi)")
    return ok(check, f"{what}, matches its live instance")


def _check_conflicts(
    node: Node, cdi: CdiStore, records: dict[str, Record], dirs: Sequence[Path]
) -> list[Check]:
    """No other spec in any CDI directory defines a device of ours (within one directory
    runtimes drop it from both files; across directories one shadows the other)."""
    scan = scan_cdi_dirs(dirs, node.cache)
    checks = [
        fail(f"cdi-unreadable/{Path(p.file).name}", p.reason, p.fix or "")
        for p in unreadable_specs(cdi, scan)
    ]
    for qualified, own, others in cdi_conflicts(cdi, records, scan):
        effect = (
            "runtimes drop it from both files, so pods given it cannot start"
            if any(p.parent == own.parent for p in others)
            else "the directory a runtime ranks higher shadows the other"
        )
        listed = ", ".join(str(p) for p in others)
        conflict = f"{qualified} (ours: {own.name}) is also defined by {listed}: {effect}"
        hint = f"remove the other spec; never reuse the kind {cdi.kind} or its device names"
        checks.append(fail(f"cdi-conflict/{qualified.rsplit('=', 1)[-1]}", conflict, hint))
    if not checks:
        where = ", ".join(scan.searched) if scan.searched else "no CDI directory present"
        none = f"no other spec defines a device of ours ({scan.read} file(s) in {where})"
        checks.append(ok("cdi-conflicts", none))
    return checks
