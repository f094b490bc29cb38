"""`metrics`: Prometheus text for node-exporter's textfile collector (docs/formats.md, "Metrics").

Every family is always present, zeros included, so no alert sees a series vanish; labels are
HAMi's so the series join its scheduler's. What cannot be read is left out with a warning and
the rest still exported: a broken node must still tell its alerts why.
"""

from __future__ import annotations

import math
import os
import socket
import stat
from pathlib import Path

from hamimig.durations import parse_time
from hamimig.engine.facts import Durable, load_durable
from hamimig.engine.idle_policy import idle_age_of
from hamimig.engine.node import Node
from hamimig.engine.results import InstanceView, Warning_
from hamimig.errors import HamimigError, HardwareError, PathUnusable, why
from hamimig.hw.types import MigMode
from hamimig.reports.doctor import run_checks
from hamimig.reports.inventory import list_instances
from hamimig.reports.views import CheckStatus, InstanceList, Metrics
from hamimig.store.counters import (
    CREATIONS,
    EVENTS_WRITE_FAILURES,
    FAILURE_OPS,
    FAILURES,
    LAST_RECONCILE,
    RECLAIMS,
    REUSES,
    CounterValues,
)
from hamimig.store.files import atomic_write, check_dir
from hamimig.store.intents import IntentStore
from hamimig.vocabulary import State

TEXTFILE_MODE = 0o644
INFO = "hamimig_mig_instance_info"

_COUNTER_HELP = {
    CREATIONS: "MIG instances created by hamimig allocate.",
    REUSES: "Idle MIG instances handed out again by hamimig allocate (exact reuse).",
    RECLAIMS: "Managed (Idle, Error or Reclaiming) MIG instances destroyed by hamimig.",
    FAILURES: (
        "Lifecycle operations that failed on hardware or I/O: op=allocate (rolled back), "
        "op=destroy (instance left in Error)."
    ),
}


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Exposition:
    """Prometheus text format 0.0.4: HELP and TYPE once per family, then its samples, each
    labelled `node` first, so that every series names its node (and joins HAMi's on it)."""

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self.lines: list[str] = []
        self.series = 0

    def family(self, name: str, kind: str, help_text: str) -> None:
        help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, labels: dict[str, str], value: int) -> None:
        labelled = {"node": self.node_name, **labels}
        inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labelled.items())
        self.lines.append(f"{name}{{{inner}}} {value}")
        self.series += 1

    def single(self, name: str, kind: str, help_text: str, value: int) -> None:
        """A family of one unlabelled sample (besides `node`)."""
        self.family(name, kind, help_text)
        self.sample(name, {}, value)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _index(view: InstanceView) -> str:
    return str(view.gpu_index) if view.gpu_index >= 0 else ""


def _realized(view: InstanceView) -> bool:
    ids = (view.mig_uuid, view.gpu_instance_id, view.compute_instance_id)
    return view.state is not State.MISSING and None not in ids and view.gpu_index >= 0


def _instance_labels(view: InstanceView) -> dict[str, str]:
    """The info series' labels of one realized instance (HAMi's, plus `state`; `node` is on
    every sample). A GPU is named as HAMi's scheduler names it on every series of its own."""
    return {
        "device_uuid": view.gpu_uuid,
        "device_index": _index(view),
        "mig_uuid": view.mig_uuid or "",
        "profile": view.profile,
        "gpu_instance_id": str(view.gpu_instance_id),
        "compute_instance_id": str(view.compute_instance_id),
        "placement_start": str(view.placement.start),
        "placement_size": str(view.placement.size),
        "state": view.state.value,
    }


def _seconds(value: float) -> int:
    """Whole seconds, rounded down, never negative (a time in the future reads 0)."""
    return max(0, math.floor(value))


def _instances(
    out: _Exposition, inventory: InstanceList, durable: Durable, seen: dict[str, str], now: float
) -> None:
    """The info series, the per-GPU-and-state counts and the idle ages."""
    out.family(
        INFO,
        "gauge",
        "Realized MIG instance identity and placement (HAMi's labels plus state), by hamimig; "
        "joins HAMi's hami_node_gpu_mig_instance_info on mig_uuid.",
    )
    realized = [v for v in inventory.instances if _realized(v)]
    for view in realized:
        out.sample(INFO, _instance_labels(view), 1)
    name = "hamimig_mig_instances"
    out.family(name, "gauge", "MIG instances on this node per GPU and state.")
    counts: dict[tuple[str, str], dict[State, int]] = {
        (g.uuid, str(g.index)): dict.fromkeys(State, 0)
        for g in inventory.gpus
        if g.mig_mode is not MigMode.UNSUPPORTED
    }
    for view in inventory.instances:
        counts.setdefault((view.gpu_uuid, _index(view)), dict.fromkeys(State, 0))[view.state] += 1
    order = {(g.uuid, str(g.index)): g.index for g in inventory.gpus}
    for key in sorted(counts, key=lambda k: (order.get(k, len(order)), k)):
        for state, value in counts[key].items():
            labels = {"device_uuid": key[0], "device_index": key[1], "state": state.value}
            out.sample(name, labels, value)
    name = "hamimig_idle_instance_age_seconds"
    out.family(
        name,
        "gauge",
        "Seconds each Idle MIG instance has been Idle, by the node's clock, as the idle policy "
        "counts it; no series while its idle age is unknown.",
    )
    for view in realized:
        record = durable.records.get(view.mig_uuid or "")
        if view.state is State.IDLE and record is not None:
            since = idle_age_of(record, seen).since
            if since is not None:
                out.sample(name, _instance_labels(view), _seconds(now - since))


def _counters(out: _Exposition, values: CounterValues) -> None:
    for name in (CREATIONS, REUSES, RECLAIMS):
        out.single(f"hamimig_mig_{name}_total", "counter", _COUNTER_HELP[name], values.get(name))
    metric = f"hamimig_mig_{FAILURES}_total"
    out.family(metric, "counter", _COUNTER_HELP[FAILURES])
    for op in sorted(set(FAILURE_OPS) | set(values.values.get(FAILURES, {}))):
        if op:
            out.sample(metric, {"op": op}, values.get(FAILURES, op))
    out.single(
        "hamimig_events_write_failures_total",
        "counter",
        "Event journal appends that failed (the lifecycle step they describe stood).",
        values.get(EVENTS_WRITE_FAILURES),
    )


def _durable_health(out: _Exposition, durable: Durable, values: CounterValues, now: float) -> None:
    unreadable_intents = sum(1 for p in durable.problems if p.store == IntentStore.store)
    created = [parse_time(i.created_at) for i in durable.intents]
    ages = [now - t for t in created if t is not None]
    undated = sum(1 for t in created if t is None)
    for name, help_text, value in (
        (
            "hamimig_pending_intents",
            "Intent journal entries on disk: allocations in flight or interrupted "
            "(hamimig recover rolls those back).",
            len(durable.intents) + unreadable_intents,
        ),
        (
            "hamimig_pending_intent_max_age_seconds",
            "Age in seconds of the oldest pending intent, by the node's clock; 0 when none.",
            _seconds(max(ages, default=0)),
        ),
        (
            "hamimig_cdi_removal_queue_length",
            "Entries in the CDI removal queue (spec removals retried by reconcile and recover).",
            len(durable.removals),
        ),
        (
            "hamimig_unreadable_records",
            "Durable-state files hamimig cannot use (records, intents, the CDI removal queue: "
            "unreadable, invalid, duplicate, an intent without a valid createdAt); recover and "
            "mutating commands refuse the node while any is.",
            len(durable.problems) + undated,
        ),
        (
            "hamimig_last_reconcile_timestamp_seconds",
            "Unix time of the last hamimig reconcile pass that ran its plan to the end; 0 = never.",
            values.timestamp(LAST_RECONCILE),
        ),
    ):
        out.single(name, "gauge", help_text, value)


def _doctor(out: _Exposition, node: Node) -> Warning_ | None:
    """The doctor gauges, from the report `doctor` builds (no pods); a report that cannot be
    built counts as one failing check, with a warning saying why."""
    warning = None
    try:
        report = run_checks(node)
        failed, warned = report.count(CheckStatus.FAIL), report.count(CheckStatus.WARN)
    except Exception as exc:  # doctor reports every expected failure as a check: a bug
        cause = exc.message if isinstance(exc, HamimigError) else f"{type(exc).__name__}: {exc}"
        reason = f"hamimig doctor's report could not be built ({cause}); counted as 1 failed check"
        warning = Warning_(file=str(node.state_dir), reason=reason)
        failed, warned = 1, 0
    for what, value in (("failed", failed), ("warned", warned)):
        help_text = f"How many of hamimig doctor's checks {what[:-2]} (without pods)."
        out.single(f"hamimig_doctor_{what}_checks", "gauge", help_text, value)
    return warning


def exposition(node: Node) -> tuple[str, int, tuple[Warning_, ...]]:
    """The whole exposition text, its number of samples, and what could not be read."""
    warnings: list[Warning_] = []
    try:
        inventory = list_instances(node)
    except (HamimigError, OSError) as exc:
        # NVML down, a lost GPU, a bad config: the instance series go, the health series stay
        # (doctor's failing checks among them), so the node still tells its alerts why.
        inventory = InstanceList(instances=(), gpus=())
        warnings.append(Warning_(file="instances", reason=f"not exported: {why(exc)}"))
    try:
        durable = load_durable(node)
    except (HamimigError, OSError) as exc:
        durable = Durable(records={}, intents=(), removals=(), problems=())
        warnings.append(Warning_(file=str(node.state_dir), reason=f"not read: {why(exc)}"))
    seen, seen_problem = node.idle_seen.load()
    counters = node.counters.load()
    now = node.now()
    # --node/NODE_NAME (the DaemonSet sets it to spec.nodeName); the hostname only without it.
    out = _Exposition(node.node_name or socket.gethostname())
    _instances(out, inventory, durable, seen, now)
    _counters(out, counters)
    _durable_health(out, durable, counters, now)
    doctor_warning = _doctor(out, node)
    warnings += inventory.warnings
    for problem in (counters.problem, seen_problem):
        if problem is not None:
            warnings.append(Warning_(file=problem.file, reason=problem.reason))
    if doctor_warning is not None:
        warnings.append(doctor_warning)
    return out.text(), out.series, tuple(warnings)


def _ours(path: Path) -> bool:
    """Whether `path` starts as an exposition this command writes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.read(fd, 64).startswith(f"# HELP {INFO} ".encode())
    finally:
        os.close(fd)


def _check_textfile(path: Path) -> None:
    if not path.name or path.name in (".", ".."):
        raise PathUnusable(path, "name a file, e.g. .../hamimig.prom")
    if not check_dir(path.parent):
        raise PathUnusable(path, f"directory {path.parent} does not exist")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise PathUnusable(path, "is a directory; name a file in it")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise PathUnusable(path, "is a device, FIFO or socket, not a textfile; nothing written")
    if stat.S_ISREG(st.st_mode) and not path.name.endswith(".prom") and not _ours(path):
        # An existing file that is no exposition of ours (a typo for the config?) stays.
        raise PathUnusable(
            path, "exists and is neither a *.prom textfile nor hamimig's metrics; nothing written"
        )


def export(node: Node, textfile: Path | None) -> Metrics:
    """Build the exposition; with `textfile`, replace that file atomically (temp file in the same
    directory, fsync, rename; mode 0644), so the collector never reads a torn file."""
    text, series, warnings = exposition(node)
    if textfile is None:
        return Metrics(path=None, series=series, text=text, warnings=warnings)
    _check_textfile(textfile)
    try:
        atomic_write(textfile.parent, textfile.name, text.encode("utf-8"), TEXTFILE_MODE)
    except OSError as exc:
        # The error names the temporary file that failed; the operator named the textfile.
        raise HardwareError(
            f"cannot write {textfile}: {exc.strerror or exc} (hamimig creates a temporary file "
            f"in {textfile.parent} and renames it over {textfile.name}: the directory must "
            "accept new files)"
        ) from None
    if not textfile.name.endswith(".prom"):
        # Written as asked, but the collector would never read it: say so.
        ignored = "node-exporter's textfile collector reads only *.prom files; name it hamimig.prom"
        warnings = (*warnings, Warning_(file=str(textfile), reason=ignored))
    return Metrics(path=str(textfile), series=series, text=text, warnings=warnings)
