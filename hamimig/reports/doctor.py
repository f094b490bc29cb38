"""`doctor`: what an operator checks before trusting a node, as a list of check results.

Each check comes out ok, warn or fail, with a one-line fix. Nothing here raises on a broken node:
NVML that will not load, a directory that cannot be read, a corrupt record are failing checks,
never exceptions, so `doctor -o json` always prints one object holding every check (the object
to attach to a bug report). Nothing is changed and no lock is taken; the one write is a temp file
`.hamimig-doctor-*` (never a .json/.yaml name, so no runtime loads it) created in the CDI
directory and removed at once, to prove that hamimig could write a spec there.

Exit codes (the categories of docs/formats.md): 0 when no check fails (warnings allowed);
otherwise 4 when any failing check is a hardware or I/O failure (NVML unreachable, the driver
version or a GPU unreadable, `mig-minors` unreadable or without the GPU's entries, a state or
CDI directory that this user cannot read or write, no NVIDIA CDI spec to compose specs from),
else 5: state that is readable but cannot be trusted (a record, intent or queue that does not
load, a state directory that is a symlink, owned by another user or writable by others, a spec
of ours that runtimes reject, another spec defining one of our devices, an NVIDIA CDI spec that
is invalid, conflicting or lacks a MIG GPU, a config file that does not load).

Checks, in order: `config`; `nvml` and `driver`; `gpus` and `mig-mode/gpuN` per GPU;
`mig-minors`; `state-dir`, `state-dir/owner`, `state-dir/mode`; `file-mode/NAME` for each state
file that is not 0600; `records` (or one failing `record/NAME`, `intent/NAME`,
`cdi-removal-queue` check per unusable file); `intents`; `cdi-removal-queue`; `cdi-dir`;
`cdi-base` (the NVIDIA spec instance specs are composed from: found, valid, describing every MIG
GPU; a warning with `cdi.baseSpec: none`, whose containers get no driver libraries);
`cdi-specs` (a summary of the good ones) and `cdi-spec/NAME` per spec of ours that is not good
(and per live instance missing its spec); `cdi-conflicts`, or one failing `cdi-conflict/DEVICE`
per device of ours that another spec also defines. NAME and DEVICE are shortened to `mig-<12
hex>` (the hash in the file name); the message carries the full path.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hamimig.config import Config
from hamimig.engine.facts import Durable, Liveness, cdi_device_for, check_record, load_durable
from hamimig.engine.node import Node
from hamimig.engine.podsource import PodSource
from hamimig.engine.safety import SYSTEM_CDI_DIR, cdi_conflicts, parent_problem, scan_cdi_dirs
from hamimig.errors import HamimigError
from hamimig.hw.minors import MigMinors
from hamimig.hw.types import Gpu, GpuInstance, MigHardware, MigMode
from hamimig.reports.views import Check, CheckStatus, DoctorReport
from hamimig.store.cdi import (
    SPEC_PREFIX,
    CdiDevice,
    CdiStore,
    spec_file_name,
    validate_spec,
)
from hamimig.store.cdi_base import NONE, BaseLookup
from hamimig.store.files import describe_entry, read_regular
from hamimig.store.intents import INTENT_PREFIX, INTENT_SUFFIX
from hamimig.store.queue import QUEUE_NAME
from hamimig.store.records import (
    LOADER_PREFIX,
    RECORD_MODE,
    RECORD_SUFFIX,
    STATE_DIR_MODE,
    Record,
    RecordState,
)

HARDWARE = 4
"""Exit code of a failing hardware or I/O check."""
UNVERIFIABLE = 5
"""Exit code of a failing check on state that cannot be trusted."""

DOCTOR_TEMP_PREFIX = ".hamimig-doctor-"
_FIRST_STABLE_UUID_DRIVER = 470


def _ok(name: str, message: str) -> Check:
    return Check(name, CheckStatus.OK, message)


def _warn(name: str, message: str, hint: str) -> Check:
    return Check(name, CheckStatus.WARN, message, hint)


def _fail(name: str, message: str, hint: str, exit_code: int = UNVERIFIABLE) -> Check:
    return Check(name, CheckStatus.FAIL, message, hint, exit_code)


def _why(exc: BaseException) -> str:
    if isinstance(exc, HamimigError):
        return exc.message
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _guarded(name: str, checks: Callable[[], list[Check]]) -> list[Check]:
    """A section of checks; an error it did not expect becomes its failing check."""
    try:
        return checks()
    except (HamimigError, OSError, ValueError) as exc:
        code = UNVERIFIABLE if isinstance(exc, ValueError) else HARDWARE
        if isinstance(exc, HamimigError):
            code = HARDWARE if exc.exit_code == HARDWARE else UNVERIFIABLE
        return [
            _fail(
                name,
                f"could not check: {_why(exc)}",
                "run as root; if it persists, report it with hamimig doctor -o json",
                code,
            )
        ]


def _mode(mode: int) -> str:
    return f"{mode:04o}"


def _short(name: str) -> str:
    """A file's check subject short enough for a table column (messages carry the full path):
    `hami-owned-mig-<sha>.json` and `hami-dynamic-mig-mig-<sha>.json` read `mig-<12 hex>`."""
    for prefix in (SPEC_PREFIX, LOADER_PREFIX, INTENT_PREFIX):
        if name.startswith(prefix):
            stem = name[len(prefix) :]
            if prefix == SPEC_PREFIX:
                stem = "mig-" + stem
            break
    else:
        stem = name
    stem = stem.removesuffix(".json")
    return stem if len(stem) <= 16 else stem[:16] + "…"


# --------------------------------------------------------------------------------------------
# Entry point


def run_checks(
    node: Node, cdi_dirs: Sequence[Path] | None = None, pods: PodSource | None = None
) -> DoctorReport:
    """Every check on `node`. `cdi_dirs` are the directories searched for other specs that
    define one of our devices: by default /etc/cdi and the node's CDI directory. `pods` is
    the pod source the recovery checks judge pod-held instances by (none: those are skipped).
    """
    dirs = tuple(cdi_dirs) if cdi_dirs is not None else (SYSTEM_CDI_DIR, node.cdi_dir)
    checks: list[Check] = []
    config, config_check = _check_config(node)
    checks.append(config_check)
    hw_checks, live = _check_hardware(node, config)
    checks += hw_checks
    checks += _guarded("mig-minors", lambda: _check_mig_minors(node, live))
    state_checks, state = _check_state_dir(node.state_dir)
    checks += state_checks
    durable: Durable | None = None
    if state == "usable":
        checks += _guarded("state-files", lambda: _check_file_modes(node.state_dir))
        try:
            durable = load_durable(node)
        except (HamimigError, OSError) as exc:
            checks.append(
                _fail(
                    "records",
                    f"cannot load the state directory: {_why(exc)}",
                    "run as root; check the state directory's permissions",
                    HARDWARE,
                )
            )
        else:
            checks += _check_durable(durable)
    elif state == "missing":  # nothing recorded yet: every spec of ours is then an orphan
        durable = Durable(records={}, intents=(), removals=(), problems=())
        none = "none (no state directory yet)"
        checks += [_ok("records", none), _ok("intents", none), _ok("cdi-removal-queue", none)]
    checks += _check_cdi(node, config, live, durable, dirs)
    if live.hw is not None and durable is not None and not durable.problems:
        checks = _with_recovery(checks, node, config, durable, pods)
    return DoctorReport(
        checks=tuple(checks),
        sim=None if node.sim is None else str(node.sim),
        state_dir=str(node.state_dir),
        cdi_dir=str(node.cdi_dir),
    )


# --------------------------------------------------------------------------------------------
# What recover would do


RECOVER_REFUSES = (
    "recover refuses until every recovery/N failure is resolved: stop the stray process, fix "
    "the record or the pod annotation, or drop what cannot be verified (hamimig forget "
    "MIG_UUID, or --intent ID)"
)


def _with_recovery(
    checks: list[Check], node: Node, config: Config, durable: Durable, source: PodSource | None
) -> list[Check]:
    """The recovery planner's own verdict, so that every condition that makes `recover`
    exit 5 is a failing check here, found by the same code. Hints that would send the
    operator to `recover` are replaced while recover refuses."""
    from hamimig.engine.recovery import plan_recovery

    environment = [
        c.name
        for c in checks
        if c.status is CheckStatus.FAIL
        and (c.exit_code == HARDWARE or c.name in ("config", "state-dir", "cdi-dir"))
        and c.name != "cdi-base"  # recover keeps existing specs without one (and warns)
    ]
    if environment:
        return [
            *checks,
            _warn(
                "recovery",
                f"not checked while {', '.join(environment)} fail(s): recover cannot run either",
                "fix those first",
            ),
        ]
    found: list[Check] = []
    try:
        snapshot = None if source is None else source.load(node)
    except HamimigError as exc:
        failed = _fail("recovery/pods", f"the pod list: {exc.message}", _POD_HINT)
        return [*_not_via_recover(checks), failed]
    pods_known = snapshot is not None or (source is not None and source.assume_no_pods)
    try:
        plan = plan_recovery(node, durable, snapshot, config.adopt_existing, pods_known=pods_known)
    except HamimigError as exc:
        code = HARDWARE if exc.exit_code == HARDWARE else UNVERIFIABLE
        name = "recovery/pods" if "pod" in exc.message else "recovery"
        failed = _fail(name, f"recover would fail: {exc.message}", _POD_HINT, code)
        return [*_not_via_recover(checks), failed]
    for number, refusal in enumerate(plan.refusals, 1):
        found.append(
            _fail(f"recovery/{number}", f"recover would refuse: {refusal}", RECOVER_REFUSES)
        )
    if not found:
        changes = sum(1 for step in plan.steps if step.changes)
        found.append(
            _ok("recovery", f"recover can verify every record and intent ({changes} step(s))")
        )
    if not pods_known:
        found.append(
            _ok(
                "recovery/pods",
                "skipped: no pod source given, so what pods hold is not checked "
                "(doctor --pods FILE|- or --kube checks it too)",
            )
        )
    if plan.refusals:
        checks = _not_via_recover(checks)
    return [*checks, *found]


def _not_via_recover(checks: list[Check]) -> list[Check]:
    """While recover refuses (or fails), no hint may send the operator to it."""
    return [
        dataclasses.replace(c, hint=RECOVER_REFUSES) if "hamimig recover" in c.hint else c
        for c in checks
    ]


_POD_HINT = "fix the pod source (kubectl get pods -o json), or check --node/NODE_NAME"


# --------------------------------------------------------------------------------------------
# Config


def _check_config(node: Node) -> tuple[Config, Check]:
    path = node.config_path
    try:
        config = node.config()
    except HamimigError as err:
        return Config(), _fail(
            "config",
            f"{err.message} (the other checks assume the defaults)",
            f"fix {path} as docs/formats.md's Config section describes; until then commands exit 2",
        )
    origin = f"{path} loads" if os.path.exists(path) else f"no config file at {path}: defaults"
    cdi = f"CDI kind {config.cdi_kind}" if config.cdi_enabled else "CDI disabled"
    adopt = "adoption on" if config.adopt_existing else "adoption off"
    return config, _ok("config", f"{origin} ({cdi}, {adopt})")


# --------------------------------------------------------------------------------------------
# Hardware


@dataclass
class _Live:
    """The hardware as far as it could be read, with per-GPU caches for the CDI comparison."""

    node: Node
    hw: MigHardware | None = None
    composes: bool = True
    """Whether specs are composed from the NVIDIA base (`cdi.baseSpec` is not none)."""
    gpus: list[Gpu] = field(default_factory=list)
    _layouts: dict[int, tuple[GpuInstance, ...]] = field(default_factory=dict)
    _names: dict[int, dict[int, str]] = field(default_factory=dict)

    def gpu_of(self, gpu_uuid: str) -> Gpu | None:
        return next((g for g in self.gpus if g.uuid == gpu_uuid), None)

    def needed_device(self, record: Record) -> CdiDevice | str:
        """What the record's live instance needs in its spec, or why that cannot be known."""
        assert self.hw is not None
        gpu = self.gpu_of(record.gpu_uuid)
        if gpu is None:
            return f"its GPU {record.gpu_uuid} is not on this node"
        if gpu.mig_mode is not MigMode.ENABLED:
            return f"MIG is {gpu.mig_mode.value} on GPU {gpu.index}: its instance is not live"
        if gpu.index not in self._layouts:
            self._layouts[gpu.index] = self.hw.layout(gpu.index)
            self._names[gpu.index] = {p.id: p.name for p in self.hw.profiles(gpu.index)}
        live = check_record(record, self._layouts[gpu.index], self._names[gpu.index])
        if live.status is not Liveness.COMPLETE:
            return f"its instance is not live ({live.detail})"
        return cdi_device_for(
            self.node,
            record.mig_uuid,
            gpu.uuid,
            gpu.minor,
            record.gpu_instance_id,
            record.compute_instance_id,
            self.composes,
        )


def _check_hardware(node: Node, config: Config) -> tuple[list[Check], _Live]:
    live = _Live(node, composes=config.cdi_base_spec != NONE)
    if node.sim is not None:
        where = f"simulated node {node.sim}"
        hint = f"create it: hamimig --sim {node.sim} sim init --model H100-SXM5-80GB"
    else:
        where = "NVML"
        hint = "run on a GPU node with the NVIDIA driver loaded (nvidia-smi works), or use --sim"
    try:
        hw = node.hardware()
    except (HamimigError, OSError, ImportError) as exc:
        return [_fail("nvml", f"{_why(exc)}; GPU checks skipped", hint, HARDWARE)], live
    live.hw = hw
    checks = [_ok("nvml", f"{where} reachable" if node.sim else "NVML reachable")]
    checks += _guarded("driver", lambda: [_check_driver(hw.driver_version())])
    try:
        count = hw.gpu_count()
    except (HamimigError, OSError) as exc:
        checks.append(_fail("gpus", f"cannot count GPUs: {_why(exc)}", hint, HARDWARE))
        return checks, live
    if count == 0:
        checks.append(_warn("gpus", "no GPUs on this node", "check the driver and nvidia-smi -L"))
    else:
        checks.append(_ok("gpus", f"{count} GPU(s)"))
    for index in range(count):
        name = f"mig-mode/gpu{index}"
        try:
            gpu = hw.gpu(index)
        except (HamimigError, OSError) as exc:
            checks.append(
                _fail(name, f"GPU {index}: {_why(exc)}", f"check nvidia-smi -i {index}", HARDWARE)
            )
            continue
        live.gpus.append(gpu)
        checks.append(_check_mig_mode(gpu))
    return checks, live


def _check_driver(version: str) -> Check:
    major_text = version.split(".", 1)[0]
    if major_text.isdigit() and int(major_text) < _FIRST_STABLE_UUID_DRIVER:
        return _warn(
            "driver",
            f"driver {version} predates R470: MIG UUIDs there read MIG-GPU-…/GI/CI",
            "upgrade the NVIDIA driver to R470 or later",
        )
    return _ok("driver", f"driver {version}")


def _check_mig_mode(gpu: Gpu) -> Check:
    name = f"mig-mode/gpu{gpu.index}"
    what = f"GPU {gpu.index} {gpu.model}"
    if gpu.mig_mode is MigMode.UNSUPPORTED:
        return _warn(name, f"{what}: MIG not supported; hamimig ignores this GPU", "nothing to do")
    if gpu.reset_pending:
        loses = (
            "; it destroys every MIG instance on the GPU"
            if gpu.mig_pending is MigMode.DISABLED
            else ""
        )
        revert = 1 if gpu.mig_mode is MigMode.ENABLED else 0
        return _warn(
            name,
            f"{what}: MIG {gpu.mig_mode.value} now, {gpu.mig_pending.value} after a GPU reset "
            f"(reset needed{loses})",
            f"reset the GPU when idle (nvidia-smi -r -i {gpu.index}) to apply it, or revert: "
            f"nvidia-smi -i {gpu.index} -mig {revert}",
        )
    if gpu.mig_mode is MigMode.DISABLED:
        return _warn(
            name,
            f"{what}: MIG disabled; hamimig manages no instances on it",
            f"to use it: nvidia-smi -i {gpu.index} -mig 1, then reset the GPU",
        )
    return _ok(name, f"{what}: MIG enabled")


def _mig_minors_path(node: Node) -> Path:
    """The file the node's adapter reads: the driver's, or the one beside the simulated node."""
    return node.files().mig_minors


def _check_mig_minors(node: Node, live: _Live) -> list[Check]:
    path = _mig_minors_path(node)
    enabled = [g for g in live.gpus if g.mig_mode is MigMode.ENABLED]
    hint = (
        f"recreate the simulated node (sim init writes {path})"
        if node.sim is not None
        else "load the driver's MIG capabilities (nvidia-caps); see /proc/driver/nvidia-caps"
    )
    try:
        table = MigMinors(path).table()
    except HamimigError as err:
        if live.hw is not None and not enabled:
            return [_warn("mig-minors", f"{err.message} (no GPU has MIG enabled)", hint)]
        return [_fail("mig-minors", err.message, hint, HARDWARE)]
    missing = [g for g in enabled if f"gpu{g.minor}/gi0/access" not in table]
    if missing:
        which = ", ".join(f"GPU {g.index} (minor {g.minor})" for g in missing)
        return [_fail("mig-minors", f"{path} has no entries for {which}", hint, HARDWARE)]
    return [_ok("mig-minors", f"{path} readable ({len(table)} capabilities)")]


# --------------------------------------------------------------------------------------------
# The state directory


def _check_state_dir(path: Path) -> tuple[list[Check], str]:
    """The directory itself, and whether its files can be loaded: "usable", "missing" or "bad"
    (a symlink or not a directory: the stores refuse it, and so does HAMi)."""
    name = "state-dir"
    fix = f"chmod 0750 {path}"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return [
            _warn(
                name,
                f"{path} does not exist; hamimig creates it (0750) on the first change",
                "nothing to do on a new node; otherwise check --state-dir and the hostPath mount",
            )
        ], "missing"
    except OSError as exc:
        return [_fail(name, f"cannot inspect {path}: {_why(exc)}", "run as root", HARDWARE)], "bad"
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        return [
            _fail(
                name,
                f"{path} is a symbolic link (to {target}); hamimig and HAMi refuse it",
                f"make {path} a real directory (mount the hostPath at this path itself)",
            )
        ], "bad"
    if not stat.S_ISDIR(st.st_mode):
        return [
            _fail(name, f"{path} is not a directory", f"move it away; hamimig creates {path}")
        ], "bad"
    checks: list[Check] = []
    if os.access(path, os.R_OK | os.W_OK | os.X_OK):
        checks.append(_ok(name, f"{path} is a directory"))
    else:
        checks.append(
            _fail(
                name,
                f"{path} is not readable and writable by uid {os.getuid()}",
                "run hamimig as root",
                HARDWARE,
            )
        )
    uid = os.getuid()
    if st.st_uid in (0, uid):
        checks.append(_ok(f"{name}/owner", f"owned by uid {st.st_uid}"))
    else:
        checks.append(
            _fail(
                f"{name}/owner",
                f"owned by uid {st.st_uid}, neither root nor this user (uid {uid}): "
                "its owner can forge ownership records",
                f"chown root {path}",
            )
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        checks.append(
            _fail(
                f"{name}/mode",
                f"mode {_mode(mode)} is group- or world-writable: others can forge or delete "
                "ownership records",
                fix,
            )
        )
    elif mode != STATE_DIR_MODE:
        checks.append(
            _warn(f"{name}/mode", f"mode {_mode(mode)}, expected {_mode(STATE_DIR_MODE)}", fix)
        )
    else:
        checks.append(_ok(f"{name}/mode", f"mode {_mode(mode)}"))
    from hamimig.store.lock import LOCK_NAME  # a directory or link here makes every command fail

    try:
        lock_problem = describe_entry(path, LOCK_NAME)
    except FileNotFoundError:
        lock_problem = None  # created by the first mutating command
    except OSError as exc:
        lock_problem = f"cannot be inspected: {_why(exc)}"
    if lock_problem is not None:
        checks.append(
            _fail(
                f"{name}/lock",
                f"the node lock {path / LOCK_NAME} {lock_problem}; mutating commands refuse it",
                f"remove {path / LOCK_NAME} (hamimig creates the lock file itself)",
            )
        )
    parent = parent_problem(path)
    if parent is not None:
        checks.append(_fail(f"{name}/parent", parent, f"chmod go-w {path.parent}"))
    return checks, "usable"


def _is_state_file(name: str) -> bool:
    return (
        (name.startswith(LOADER_PREFIX) and name.endswith(RECORD_SUFFIX))
        or (name.startswith(INTENT_PREFIX) and name.endswith(INTENT_SUFFIX))
        or name == QUEUE_NAME
    )


def _check_file_modes(directory: Path) -> list[Check]:
    """Records, intents and the queue are 0600 regular files (non-regular ones fail to load)."""
    checks: list[Check] = []
    for name in sorted(os.listdir(directory)):
        if not _is_state_file(name):
            continue
        try:
            st = os.lstat(directory / name)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue  # the loader reports it, as a failing check naming the file
        mode = stat.S_IMODE(st.st_mode)
        path = directory / name
        fix = f"chmod 0600 {path}"
        if mode & 0o022:
            checks.append(
                _fail(
                    f"file-mode/{_short(name)}",
                    f"{path}: mode {_mode(mode)} is group- or world-writable",
                    fix,
                )
            )
        elif mode != RECORD_MODE:
            checks.append(
                _warn(
                    f"file-mode/{_short(name)}",
                    f"{path}: mode {_mode(mode)}, expected {_mode(RECORD_MODE)}",
                    fix,
                )
            )
    return checks


def _problem_name(file: str) -> str:
    base = os.path.basename(file)
    if base == QUEUE_NAME:
        return "cdi-removal-queue"
    if base.startswith(INTENT_PREFIX):
        return f"intent/{_short(base)}"
    return f"record/{_short(base)}"


def _check_durable(durable: Durable) -> list[Check]:
    checks: list[Check] = []
    for problem in durable.problems:
        checks.append(
            _fail(
                _problem_name(problem.file),
                f"{problem.file}: {problem.reason}",
                "check which instance it describes, then repair it or move it out of the state "
                "directory; until then mutating commands and recover exit 5",
            )
        )
    if not any(c.name.startswith("record/") for c in checks):  # else the files say why
        by_state: dict[str, int] = {}
        for record in durable.records.values():
            key = record.state.value if record.managed else f"{RecordState.IDLE.value} (HAMi's)"
            by_state[key] = by_state.get(key, 0) + 1
        detail = ", ".join(f"{n} {s}" for s, n in sorted(by_state.items()))
        count = len(durable.records)
        checks.append(_ok("records", f"{count} record(s) load" + (f": {detail}" if detail else "")))
    if durable.intents:
        described = "; ".join(
            f"{i.op} {i.profile} at {i.placement} on GPU {i.gpu_index} since {i.created_at}"
            for i in durable.intents
        )
        checks.append(
            _warn(
                "intents",
                f"{len(durable.intents)} intent(s) left: {described}",
                "if no hamimig command is running: hamimig recover (rolls back or finishes them)",
            )
        )
    elif not any(c.name.startswith("intent/") for c in checks):
        checks.append(_ok("intents", "no allocation in flight"))
    if durable.removals:
        oldest = durable.removals[0]
        checks.append(
            _warn(
                "cdi-removal-queue",
                f"{len(durable.removals)} CDI spec removal(s) pending (oldest {oldest.mig_uuid} "
                f"since {oldest.since}, {oldest.attempts} attempt(s): {oldest.last_error})",
                "hamimig reconcile (retries them)",
            )
        )
    elif not any(c.name == "cdi-removal-queue" for c in checks):
        checks.append(_ok("cdi-removal-queue", "empty"))
    return checks


# --------------------------------------------------------------------------------------------
# CDI


def _check_cdi(
    node: Node, config: Config, live: _Live, durable: Durable | None, dirs: Sequence[Path]
) -> list[Check]:
    directory = node.cdi_dir
    if not config.cdi_enabled:
        ours = _guarded_names(directory)
        if ours:
            return [
                _warn(
                    "cdi-dir",
                    f"cdi.enabled is false, yet {len(ours)} spec(s) of ours are in {directory}",
                    "remove them once no container uses them, or set cdi.enabled: true",
                )
            ]
        return [_ok("cdi-dir", "CDI disabled (legacy mode): no specs to check")]
    cdi = CdiStore(
        directory, config.cdi_kind, config.cdi_annotations, base=lambda: node.cdi_base(config)
    )
    dir_check, usable = _check_cdi_dir(directory)
    checks = [dir_check, _check_base(cdi.lookup(), live)]
    records = {} if durable is None else durable.records
    if usable:
        checks += _guarded("cdi-spec", lambda: _check_our_specs(cdi, live, durable))
    checks += _guarded("cdi-conflicts", lambda: _check_conflicts(node, cdi, records, dirs))
    return checks


_GENERATE = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (or set cdi.baseSpec: none)"


def _check_base(lookup: BaseLookup, live: _Live) -> Check:
    """The NVIDIA spec that instance specs take their driver edits from, and whether it
    describes every MIG GPU (allocate refuses a GPU it lacks)."""
    if not lookup.composes:
        return _warn(
            "cdi-base",
            "cdi.baseSpec is none: containers given our devices get device nodes only, no "
            "driver libraries (libcuda, libnvidia-ml), binaries or hooks, so CUDA cannot start "
            "unless the image brings a matching driver",
            "generate NVIDIA's spec (nvidia-ctk cdi generate) and set cdi.baseSpec: auto",
        )
    if lookup.base is None:
        code = HARDWARE if lookup.missing else UNVERIFIABLE
        return _fail("cdi-base", lookup.problem or "no NVIDIA CDI spec", _GENERATE, code)
    base = lookup.base
    lacking = []
    for gpu in live.gpus:
        if gpu.mig_mode is not MigMode.ENABLED:
            continue
        try:
            base.parent_edits(gpu.minor)
        except HamimigError as exc:
            lacking.append(f"GPU {gpu.index}: {exc.message}")
    if lacking:
        more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
        return _fail("cdi-base", lacking[0] + more, _GENERATE)
    covered = ", ".join(str(g.index) for g in live.gpus if g.mig_mode is MigMode.ENABLED)
    gpus = f"; it describes GPU(s) {covered}" if covered else ""
    return _ok("cdi-base", f"{base.path} (kind {base.kind}) is valid{gpus}")


def _guarded_names(directory: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if n.startswith(SPEC_PREFIX))
    except OSError:
        return []


def _check_cdi_dir(path: Path) -> tuple[Check, bool]:
    """The CDI directory; the flag says whether there are specs to look at."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return _warn(
            "cdi-dir",
            f"{path} does not exist; hamimig creates it (0755) with the first spec",
            "check --cdi-dir: container runtimes must read the same directory",
        ), False
    except OSError as exc:
        return _fail(
            "cdi-dir", f"cannot inspect {path}: {_why(exc)}", "run as root", HARDWARE
        ), False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        return _fail(
            "cdi-dir",
            f"{path} is {what}; hamimig refuses to write specs there",
            f"make {path} a real directory",
        ), False
    fix = "mount it read-write and run hamimig as root"
    if not os.access(path, os.W_OK | os.X_OK):
        return _fail("cdi-dir", f"{path} is not writable by uid {os.getuid()}", fix, HARDWARE), True
    try:
        fd, temp = tempfile.mkstemp(prefix=DOCTOR_TEMP_PREFIX, dir=path)
        os.close(fd)
        os.unlink(temp)
    except OSError as exc:
        return _fail("cdi-dir", f"cannot create a file in {path}: {_why(exc)}", fix, HARDWARE), True
    return _ok("cdi-dir", f"{path} is writable"), True


def _check_our_specs(cdi: CdiStore, live: _Live, durable: Durable | None) -> list[Check]:
    names = cdi.list_ours()
    checks, good = _check_spec_files(cdi, names, live, durable)
    if live.hw is not None and durable is not None:
        checks += _missing_specs(cdi, set(names), live, durable.records)
    return checks + _specs_summary(cdi, names, good, bool(checks), live, durable)


def _check_spec_files(
    cdi: CdiStore, names: list[str], live: _Live, durable: Durable | None
) -> tuple[list[Check], int]:
    """The problems among our spec files, and how many are fine (those get one summary row,
    not one per instance)."""
    if durable is None:  # records unreadable: whose spec it is cannot be told
        results = [
            _check_spec(cdi, name, None, live, False, False, records_known=False) for name in names
        ]
    else:
        by_spec = {spec_file_name(r.mig_uuid): r for r in durable.records.values()}
        queued = {spec_file_name(q.mig_uuid) for q in durable.removals}
        in_flight = {spec_file_name(i.mig_uuid) for i in durable.intents if i.mig_uuid}
        results = [
            _check_spec(cdi, name, by_spec.get(name), live, name in queued, name in in_flight)
            for name in names
        ]
    problems = [c for c in results if c.status is not CheckStatus.OK]
    return problems, len(results) - len(problems)


def _missing_specs(
    cdi: CdiStore, present: set[str], live: _Live, records: dict[str, Record]
) -> list[Check]:
    """Active and Idle instances that are live but have no spec: a pod given one cannot start."""
    checks: list[Check] = []
    for record in records.values():
        spec = spec_file_name(record.mig_uuid)
        if spec in present or record.state not in (RecordState.ACTIVE, RecordState.IDLE):
            continue
        if _needs_a_device(live, record):
            checks.append(
                _warn(
                    f"cdi-spec/{_short(spec)}",
                    f"missing: {record.mig_uuid} is live but has no spec in {cdi.directory}, "
                    "so a pod given it cannot start",
                    "hamimig recover (rewrites it: repair-cdi)",
                )
            )
    return checks


def _needs_a_device(live: _Live, record: Record) -> bool:
    try:
        needed = live.needed_device(record)
    except (HamimigError, OSError):
        return False  # the mig-minors or GPU checks say why
    return isinstance(needed, CdiDevice)


def _specs_summary(
    cdi: CdiStore,
    names: list[str],
    good: int,
    problems: bool,
    live: _Live,
    durable: Durable | None,
) -> list[Check]:
    """One row for the specs that are fine: all of them, or the others beside the problems."""
    if problems:
        return [_ok("cdi-specs", f"{good} other spec(s) of ours are fine")] if good else []
    if not names:
        return [_ok("cdi-specs", f"no spec of ours in {cdi.directory}")]
    if durable is None:
        compared = " (not matched with records: they cannot be read)"
    elif live.hw is None:
        compared = " (not compared with the hardware: NVML unavailable)"
    else:
        compared = " and match their live instances"
    return [_ok("cdi-specs", f"{good} spec(s) of ours, all valid{compared}")]


def _check_spec(
    cdi: CdiStore,
    name: str,
    record: Record | None,
    live: _Live,
    queued: bool,
    in_flight: bool,
    records_known: bool = True,
) -> Check:
    check = f"cdi-spec/{_short(name)}"
    path = cdi.directory / name
    rewrite = "hamimig recover rewrites the spec of a live instance; remove one without a record"
    try:
        why = describe_entry(cdi.directory, name)
        if why is not None:
            return _fail(check, f"{path} {why}", rewrite)
        data = read_regular(cdi.directory, name)
    except ValueError as exc:
        return _fail(check, f"{path} {exc}", rewrite)
    except OSError as exc:
        return _fail(check, f"cannot read {path}: {_why(exc)}", "run as root", HARDWARE)
    try:
        spec = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return _fail(check, f"{path} is not valid JSON: {exc}", rewrite)
    problems = validate_spec(spec)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return _fail(check, f"{path}: runtimes reject it: {problems[0]}{more}", rewrite)
    if record is None:
        if not records_known:
            return _ok(check, f"{path} is valid (not matched with records: they cannot be read)")
        if queued:
            return _warn(
                check,
                f"{path}: queued for removal (its instance is gone)",
                "hamimig reconcile",
            )
        if in_flight:
            return _warn(
                check,
                f"{path}: belongs to an allocation in flight (an intent)",
                "if no hamimig command is running: hamimig recover",
            )
        return _warn(
            check,
            f"orphan spec: no record names the device of {path}, yet runtimes still offer it",
            f"if no container uses it, remove {path}",
        )
    what = f"valid, for {record.mig_uuid}"
    if live.hw is None:
        return _ok(check, f"{what} (not compared with the hardware: NVML unavailable)")
    try:
        needed = live.needed_device(record)
    except (HamimigError, OSError) as exc:
        return _warn(check, f"{what}, but what it needs is unknown: {_why(exc)}", "see mig-minors")
    if isinstance(needed, str):
        return _warn(
            check,
            f"{what}, but {needed}: the spec offers a device that does not work",
            "hamimig recover (drops or repairs the record and its spec)",
        )
    try:
        same = cdi.matches(needed)
    except HamimigError as exc:
        return _warn(
            check, f"{what}; not compared with the NVIDIA CDI spec: {_why(exc)}", "see cdi-base"
        )
    if not same:
        return _warn(
            check,
            f"{path} differs from what {record.mig_uuid} needs (device nodes, the NVIDIA "
            "CDI spec's driver edits, kind or version)",
            "hamimig reconcile or recover (rewrites it: repair-cdi)",
        )
    return _ok(check, f"{what}, matches its live instance")


def _check_conflicts(
    node: Node, cdi: CdiStore, records: dict[str, Record], dirs: Sequence[Path]
) -> list[Check]:
    """No other spec in any CDI directory defines a device of ours (within one directory
    runtimes drop it from both files; across directories one shadows the other)."""
    scan = scan_cdi_dirs(dirs, node.cache)
    checks: list[Check] = []
    for qualified, own, others in cdi_conflicts(cdi, records, scan):
        same_dir = [p for p in others if p.parent == own.parent]
        effect = (
            "runtimes drop it from both files, so pods given it cannot start"
            if same_dir
            else "the directory a runtime ranks higher shadows the other"
        )
        listed = ", ".join(str(p) for p in others)
        checks.append(
            _fail(
                f"cdi-conflict/{_short(qualified.rsplit('=', 1)[-1])}",
                f"{qualified} (ours: {own.name}) is also defined by {listed}: {effect}",
                f"remove the other spec; never reuse the kind {cdi.kind} or its device names",
            )
        )
    if not checks:
        where = ", ".join(scan.searched) if scan.searched else "no CDI directory present"
        checks.append(
            _ok(
                "cdi-conflicts",
                f"no other spec defines a device of ours ({scan.read} file(s) in {where})",
            )
        )
    return checks
