"""The one place that prints: JSON, YAML or rich tables for every result, and errors.

rich and yaml are imported only inside the functions that need them, so `hamimig --help` and
`-o json` never pay for rich's table machinery.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from hamimig.engine.views import (
    InstanceList,
    InstanceView,
    ProfileList,
    Result,
    SimView,
    State,
)
from hamimig.errors import HamimigError

if TYPE_CHECKING:
    from rich.console import Console


STATE_STYLE = {
    State.ACTIVE: "bold green",
    State.IDLE: "cyan",
    State.CREATING: "yellow",
    State.RECLAIMING: "yellow",
    State.ERROR: "bold red",
    State.UNMANAGED: "magenta",
    State.ORPHAN_GI: "red",
    State.MISSING: "red",
}


def text(message: str, err: bool = False) -> None:
    print(message, file=sys.stderr if err else sys.stdout)


def _dump(data: dict[str, Any], fmt: str) -> None:
    if fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")


def error(err: HamimigError, fmt: str) -> None:
    """A failure: one JSON/YAML object on stdout, or one line on stderr."""
    if fmt in ("json", "yaml"):
        _dump({"kind": "Error", "error": {"code": err.code, "message": err.message}}, fmt)
    else:
        text(f"hamimig: error: {err.message}", err=True)


def emit(result: Result, fmt: str) -> None:
    if fmt in ("json", "yaml"):
        _dump(result.to_json(), fmt)
        return
    console = _console()
    if isinstance(result, InstanceList):
        _instance_list(console, result)
    elif isinstance(result, ProfileList):
        _profile_list(console, result)
    elif isinstance(result, SimView):
        _sim_view(console, result)
    else:  # a result without a table of its own still shows everything it has
        console.print_json(json.dumps(result.to_json()))


def _console() -> Console:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:  # piped or captured: never truncate what scripts may grep
        console = Console(highlight=False, soft_wrap=False, width=250)
    return console


def _owner(inst: InstanceView) -> str:
    if inst.owner is None:
        return "-"
    return f"{inst.owner.namespace}/{inst.owner.name}"


def _instance_list(console: Console, result: InstanceList) -> None:
    from rich.table import Table

    table = Table(title="MIG instances", title_justify="left", header_style="bold")
    for column in ("GPU", "MIG UUID", "PROFILE", "PLACEMENT", "GI", "CI", "STATE", "OWNER", "CDI"):
        table.add_column(column, no_wrap=column in ("MIG UUID", "CDI"))
    for inst in result.instances:
        style = STATE_STYLE.get(inst.state, "")
        table.add_row(
            str(inst.gpu_index),
            inst.mig_uuid or "-",
            inst.profile,
            str(inst.placement),
            "-" if inst.gpu_instance_id is None else str(inst.gpu_instance_id),
            "-" if inst.compute_instance_id is None else str(inst.compute_instance_id),
            f"[{style}]{inst.state.value}[/]" if style else inst.state.value,
            _owner(inst),
            inst.cdi_device.rsplit("=", 1)[-1][:16] if inst.cdi_device else "-",
        )
    if result.instances:
        console.print(table)
    else:
        console.print("no MIG instances")
    if console.is_terminal:
        for gpu in result.gpus:
            console.print(
                _slice_map(
                    gpu.index,
                    gpu.model,
                    gpu.memory_slices,
                    gpu.mig_mode.value,
                    [i for i in result.instances if i.gpu_index == gpu.index],
                )
            )
    else:
        for gpu in result.gpus:
            console.print(f"GPU {gpu.index} {gpu.uuid} {gpu.model} MIG {gpu.mig_mode.value}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")


def _slice_map(
    index: int, model: str, slices: int, mig_mode: str, instances: list[InstanceView]
) -> str:
    """One line per GPU: each memory slice shows the GI occupying it, `·` when free."""
    cells: list[str] = []
    width = 7
    for s in range(slices):
        owner = next((i for i in instances if i.placement.start <= s < i.placement.end), None)
        if owner is None:
            cells.append("[dim]" + "·".center(width) + "[/]")
            continue
        label = f"GI{owner.gpu_instance_id}" if s == owner.placement.start else "…"
        style = STATE_STYLE.get(owner.state, "")
        cells.append(f"[{style}]{label.center(width)}[/]")
    header = "".join(str(s).center(width) for s in range(slices))
    title = f"[bold]GPU {index}[/] {model} (MIG {mig_mode})"
    if mig_mode != "enabled":
        return title
    return f"{title}\n  slice {header}\n        {'|'.join(cells)}"


def _profile_list(console: Console, result: ProfileList) -> None:
    from rich.table import Table

    for gpu in result.gpus:
        table = Table(
            title=f"GPU {gpu.index}  {gpu.model}  {gpu.uuid}",
            title_justify="left",
            header_style="bold",
        )
        for column in ("PROFILE", "ID", "SLICES", "MEMORY MiB", "MAX", "PLACEMENTS (start:size)"):
            table.add_column(column)
        for p in gpu.profiles:
            table.add_row(
                p.name,
                str(p.id),
                str(p.slice_count),
                str(p.memory_mb),
                str(p.max_instances),
                " ".join(str(pl) for pl in p.placements),
            )
        console.print(table)


def _sim_view(console: Console, result: SimView) -> None:
    from rich.table import Table

    if result.message:  # a change: say what happened; `sim show` prints the whole node
        console.print(result.message)
        return
    table = Table(title=f"simulated node {result.path}", title_justify="left", header_style="bold")
    for column in (
        "GPU",
        "MODEL",
        "MIG",
        "GI",
        "PROFILE ID",
        "PLACEMENT",
        "CI",
        "MIG UUID",
        "BUSY",
    ):
        table.add_column(column, no_wrap=column == "MIG UUID")
    for gpu in result.state["gpus"]:
        mode = gpu["migMode"]
        mig = "on" if mode["current"] else "off"
        if mode["current"] != mode["pending"]:
            mig += " (reset pending)"
        if not gpu["gpuInstances"]:
            table.add_row(str(gpu["index"]), gpu["model"], mig, "-", "-", "-", "-", "-", "-")
        for gi in gpu["gpuInstances"]:
            placement = f"{gi['placement']['start']}:{gi['placement']['size']}"
            cis = gi["computeInstances"] or [None]
            for ci in cis:
                busy = []
                if ci and ci.get("busy"):
                    busy.append("processes")
                if gi.get("held"):
                    busy.append("GI held")
                table.add_row(
                    str(gpu["index"]),
                    gpu["model"],
                    mig,
                    str(gi["id"]),
                    str(gi["profileId"]),
                    placement,
                    "-" if ci is None else str(ci["id"]),
                    "-" if ci is None else ci["migUUID"],
                    ", ".join(busy) or "-",
                )
    console.print(table)
    for fault in result.state["faults"]:
        gpu = "" if fault["gpu"] is None else f" on GPU {fault['gpu']}"
        console.print(
            f"fault: {fault['action']} {fault['op']} ({fault['error']}) x{fault['times']}, "
            f"skip {fault['skip']}{gpu}"
        )
    if result.state["calls"]:
        calls = ", ".join(f"{k}={v}" for k, v in sorted(result.state["calls"].items()))
        console.print(f"NVML calls: {calls}")
