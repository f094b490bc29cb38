"""`metrics`: the node's MIG instances and lifecycle counters in Prometheus text format, for
node-exporter's textfile collector (`--collector.textfile.directory`).

Three families:

- `hami_node_gpu_mig_instance_info` (gauge, always 1): one series per realized instance (a live
  GI/CI pair with a MIG UUID), with the labels of HAMi's scheduler metric of the same name
  (`node, device_uuid, device_index, mig_uuid, profile, gpu_instance_id, compute_instance_id,
  placement_start, placement_size`, HAMi's `cmd/scheduler/metrics.go`) plus `state`. HAMi reports
  only instances allocated to pods; here Idle, Error and Unmanaged instances appear too, told
  apart by `state`, so `hami_node_gpu_mig_instance_info{state="Active"}` is the one to compare.
- `hamimig_mig_instances{gpu_uuid, gpu_index, state}` (gauge): instances per GPU and state, every
  state docs/formats.md lists (every `hamimig.vocabulary.State`) for every MIG-capable GPU,
  zeros included, so that no series vanishes when its last instance goes.
- `hamimig_mig_{creations,reuses,reclaims}_total` and `hamimig_mig_failures_total{op}`
  (counters), read from `counters.json` in the state directory. The executor counts where it acts:
  a creation when `allocate` created an instance, a reuse when it handed out an Idle one, a
  reclaim whenever a managed (Idle, Error or Reclaiming) instance was destroyed (by `allocate`,
  `reclaim`, `reconcile` or `recover`), a failure `op="allocate"` when an allocation failed after
  touching the hardware and was rolled back, and `op="destroy"` when a destroy failed and left
  the instance in Error. Counting is best-effort: `Counters.count` never fails an operation.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from hamimig.engine.node import Node
from hamimig.engine.results import InstanceView, Warning_
from hamimig.errors import PathUnusable
from hamimig.hw.types import MigMode
from hamimig.reports.inventory import list_instances
from hamimig.reports.views import InstanceList, Metrics
from hamimig.store.counters import (
    CREATIONS,
    FAILURE_OPS,
    FAILURES,
    RECLAIMS,
    REUSES,
    CounterValues,
)
from hamimig.store.files import atomic_write, check_dir
from hamimig.vocabulary import State

TEXTFILE_MODE = 0o644

INFO = "hami_node_gpu_mig_instance_info"
INSTANCES = "hamimig_mig_instances"

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


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class _Exposition:
    """Prometheus text format 0.0.4: HELP and TYPE once per family, then its samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.series = 0

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {_escape_help(help_text)}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: int) -> None:
        if labels:
            inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{inner}}} {value}")
        else:
            self.lines.append(f"{name} {value}")
        self.series += 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _index(view: InstanceView) -> str:
    return str(view.gpu_index) if view.gpu_index >= 0 else ""


def _realized(view: InstanceView) -> bool:
    return (
        view.state is not State.MISSING
        and view.mig_uuid is not None
        and view.gpu_instance_id is not None
        and view.compute_instance_id is not None
        and view.gpu_index >= 0
    )


def _info(out: _Exposition, node_name: str, inventory: InstanceList) -> None:
    out.family(
        INFO,
        "gauge",
        "Realized MIG instance identity and placement (HAMi's labels plus state), by hamimig.",
    )
    for view in inventory.instances:
        if not _realized(view):
            continue
        out.sample(
            INFO,
            {
                "node": node_name,
                "device_uuid": view.gpu_uuid,
                "device_index": _index(view),
                "mig_uuid": view.mig_uuid or "",
                "profile": view.profile,
                "gpu_instance_id": str(view.gpu_instance_id),
                "compute_instance_id": str(view.compute_instance_id),
                "placement_start": str(view.placement.start),
                "placement_size": str(view.placement.size),
                "state": view.state.value,
            },
            1,
        )


def _per_state(out: _Exposition, inventory: InstanceList) -> None:
    out.family(INSTANCES, "gauge", "MIG instances on this node per GPU and state.")
    counts: dict[tuple[str, str], dict[State, int]] = {}
    for gpu in inventory.gpus:
        if gpu.mig_mode is not MigMode.UNSUPPORTED:
            counts[(gpu.uuid, str(gpu.index))] = dict.fromkeys(State, 0)
    for view in inventory.instances:
        per_gpu = counts.setdefault((view.gpu_uuid, _index(view)), dict.fromkeys(State, 0))
        per_gpu[view.state] += 1
    order = {(g.uuid, str(g.index)): g.index for g in inventory.gpus}
    for key in sorted(counts, key=lambda k: (order.get(k, len(order)), k)):
        gpu_uuid, gpu_index = key
        for state, value in counts[key].items():
            labels = {"gpu_uuid": gpu_uuid, "gpu_index": gpu_index, "state": state.value}
            out.sample(INSTANCES, labels, value)


def _counters(out: _Exposition, values: CounterValues) -> None:
    for name in (CREATIONS, REUSES, RECLAIMS):
        metric = f"hamimig_mig_{name}_total"
        out.family(metric, "counter", _COUNTER_HELP[name])
        out.sample(metric, {}, values.get(name))
    metric = f"hamimig_mig_{FAILURES}_total"
    out.family(metric, "counter", _COUNTER_HELP[FAILURES])
    ops = set(FAILURE_OPS) | set(values.values.get(FAILURES, {}))
    for op in sorted(ops):
        if op:
            out.sample(metric, {"op": op}, values.get(FAILURES, op))


def exposition(node: Node) -> tuple[str, int, tuple[Warning_, ...]]:
    """The whole exposition text, its number of samples, and what could not be read."""
    inventory = list_instances(node)
    counters = node.counters().load()
    node_name = node.node_name or socket.gethostname()
    out = _Exposition()
    _info(out, node_name, inventory)
    _per_state(out, inventory)
    _counters(out, counters)
    warnings = list(inventory.warnings)
    if counters.problem is not None:
        warnings.append(Warning_(file=counters.problem.file, reason=counters.problem.reason))
    return out.text(), out.series, tuple(warnings)


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


def export(node: Node, textfile: Path | None) -> Metrics:
    """Build the exposition; with `textfile`, replace that file atomically (temp file in the same
    directory, fsync, rename; mode 0644), so the collector never reads a torn file."""
    text, series, warnings = exposition(node)
    if textfile is None:
        return Metrics(path=None, series=series, text=text, warnings=warnings)
    _check_textfile(textfile)
    atomic_write(textfile.parent, textfile.name, text.encode("utf-8"), TEXTFILE_MODE)
    if not textfile.name.endswith(".prom"):
        # Written as asked, but the collector would never read it: say so.
        ignored = "node-exporter's textfile collector reads only *.prom files; name it hamimig.prom"
        warnings = (*warnings, Warning_(file=str(textfile), reason=ignored))
    return Metrics(path=str(textfile), series=series, text=text, warnings=warnings)
