"""The one place that prints: JSON, YAML or rich tables for every result, and errors.

rich and yaml are imported only inside the functions that need them, so `hamimig --help` and
`-o json` never pay for rich's table machinery.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from hamimig.engine.results import (
    ActionReport,
    Allocation,
    Forget,
    InstanceView,
    Reclaim,
    Release,
    Result,
)
from hamimig.errors import HamimigError
from hamimig.reports.views import (
    CheckStatus,
    DoctorReport,
    InstanceDetail,
    InstanceList,
    Metrics,
    ProfileList,
    SimView,
)
from hamimig.vocabulary import Outcome, State

if TYPE_CHECKING:
    from rich.console import Console

    from hamimig.reports.demo import DemoStep, DemoTranscript
    from hamimig.reports.settings import ConfigView
    from hamimig.sim.state import SimCi


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


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _tolerates_closed_output(fn: Callable[_P, None]) -> Callable[_P, None]:
    """A reader that stops early (`| head`, `| true`) is not a failure of the command.

    The change a command made is made whether or not anyone reads the report, so its exit
    status must stay the command's own rather than rich's or Python's 1 for a broken pipe. Output
    is flushed here so that a closed pipe shows up now, not as "Exception ignored" at exit.
    """

    @functools.wraps(fn)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:
            discard_closed_output()

    return guarded


def discard_closed_output() -> None:
    """Point a closed stdout or stderr at /dev/null so later writes and the final flush at exit
    succeed silently (what Python's documentation on SIGPIPE recommends)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
        except (OSError, ValueError):
            pass


def printable(message: str) -> str:
    """`message` with undecodable bytes (lone surrogates from non-UTF-8 arguments or file names)
    shown as escapes, so that reporting a bad name can never itself fail."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


@_tolerates_closed_output
def text(message: str, err: bool = False) -> None:
    print(printable(message), file=sys.stderr if err else sys.stdout)


def _dump(data: dict[str, Any], fmt: str) -> None:
    if fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")


def one_line(message: str) -> str:
    """`message` on one line: line breaks and tabs become spaces, and other control characters
    (an escape sequence in a name read from the command line or a file) are shown escaped, so a
    failure is always one line and never drives the terminal."""
    lines = message.replace("\t", " ").splitlines()
    flat = " ".join(line.strip() for line in lines) if len(lines) > 1 else message
    return "".join(
        c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii")
        for c in flat
    )


@_tolerates_closed_output
def error(err: HamimigError, fmt: str) -> None:
    """A failure: one JSON/YAML object on stdout, or one line on stderr."""
    message = one_line(printable(err.message))
    if err.setting is not None:
        from hamimig.cli.options import SETTING_FLAGS

        message += f" ({err.setting.value}: {SETTING_FLAGS[err.setting]})"
    if fmt in ("json", "yaml"):
        _dump({"kind": "Error", "error": {"code": err.code, "message": message}}, fmt)
    else:
        text(f"hamimig: error: {message}", err=True)


@_tolerates_closed_output
def emit(result: Result, fmt: str) -> None:
    """A result as JSON, YAML, or the table registered for its kind in `_TABLES`."""
    if fmt in ("json", "yaml"):
        _dump(result.to_json(), fmt)
        return
    table = _TABLES.get(result.kind)
    if table is None:  # a result without a table of its own still shows everything it has
        _console().print_json(json.dumps(result.to_json()))
        return
    table(result)


@_tolerates_closed_output
def demo_step(step: DemoStep) -> None:
    """One narrated demo step: title, story, the equivalent command, outcome, NVML cost."""
    from rich.rule import Rule

    console = _console()
    console.print(Rule(f"[bold]{step.number}. {step.title}[/]", align="left"))
    console.print(step.narration)
    console.print(f"[dim]$ {step.command}[/]")
    style = "green" if step.exit_code == 0 else "yellow"
    console.print(f"[{style}]→ {step.outcome}[/] (exit {step.exit_code})")
    console.print(
        f"[dim]NVML calls: {step.nvml_calls} (GI/CI create calls: {step.creations}, "
        f"destroy calls: {step.destructions})[/]"
    )
    if step.instances:
        console.print(_instance_table("", step.instances))


def _demo_summary(console: Console, result: DemoTranscript) -> None:
    """The steps were narrated as they ran: the table of a transcript is its summary."""
    made = sum(s.creations for s in result.steps)
    gone = sum(s.destructions for s in result.steps)
    console.print(
        f"\n[bold]{len(result.steps)} steps[/], {made} GI/CI create calls and {gone} destroy "
        "calls in all. Rehearse any of it with --sim PATH on every command."
    )


def wait_for_enter() -> None:
    with contextlib.suppress(EOFError):  # stdin closed: just go on
        input("press Enter for the next step ")


def _metrics(result: Metrics) -> None:
    if result.path is None:
        sys.stdout.write(result.text)
    else:
        text(f"wrote {result.series} series to {result.path}")
    for warning in result.warnings:  # stderr: never mixed into an exposition on stdout
        text(f"warning: {warning.file}: {warning.reason}", err=True)


def _console() -> Console:
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            # rich's own handler exits with status 1; the command's status must survive.
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "standard output is closed")

    console = PipeConsole(highlight=False, soft_wrap=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped or captured: never truncate what scripts may grep (COLUMNS still wins).
        console = PipeConsole(highlight=False, soft_wrap=False, width=250)
    return console


def _owner(inst: InstanceView) -> str:
    if inst.owner is None:
        return "-"
    return f"{inst.owner.namespace}/{inst.owner.name}"


def _instance_table(title: str, instances: tuple[InstanceView, ...]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", header_style="bold")
    for column in ("GPU", "MIG UUID", "PROFILE", "PLACEMENT", "GI", "CI", "STATE", "OWNER"):
        table.add_column(column, no_wrap=True)
    table.add_column("CDI", no_wrap=True, overflow="ellipsis", max_width=18)
    for inst in instances:
        style = STATE_STYLE.get(inst.state, "")
        table.add_row(
            str(inst.gpu_index),
            inst.mig_uuid or "-",
            inst.profile,
            str(inst.placement),
            "-" if inst.gpu_instance_id is None else str(inst.gpu_instance_id),
            "-" if inst.compute_instance_id is None else str(inst.compute_instance_id),
            (f"[{style}]{inst.state.value}[/]" if style else inst.state.value)
            + (" (busy)" if inst.processes else ""),
            _owner(inst),
            inst.cdi_device.rsplit("=", 1)[-1][:16] if inst.cdi_device else "-",
        )
    return table


def _instances(console: Console, title: str, instances: tuple[InstanceView, ...]) -> None:
    if not instances:
        console.print(f"{title}: none")
        return
    console.print(_instance_table(title, instances))


def _allocation(console: Console, result: Allocation) -> None:
    inst = result.instance
    how = "already held" if result.outcome is Outcome.UNCHANGED else result.outcome.value
    console.print(
        f"{how}: {inst.mig_uuid} ({inst.profile} at {inst.placement} on GPU {inst.gpu_index}) "
        f"for {_owner(inst)}"
    )
    if result.reclaimed:
        console.print("reclaimed to make room: " + ", ".join(result.reclaimed))
    if inst.cdi_device:
        console.print(f"CDI device: {inst.cdi_device}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")


def _release(console: Console, result: Release) -> None:
    _instances(console, "released (now Idle)", result.released)


def _reclaim(console: Console, result: Reclaim) -> None:
    title = "would reclaim (dry run)" if result.dry_run else "reclaimed"
    _instances(console, title, result.reclaimed)
    for skipped in result.skipped:
        console.print(f"skipped {skipped.mig_uuid}: {skipped.reason}")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")


def _actions(console: Console, result: ActionReport) -> None:
    from rich.table import Table

    title = f"{result.kind.lower()}{' (dry run: nothing changed)' if result.dry_run else ''}"
    if not result.actions:
        console.print(f"{title}: nothing to do")
    else:
        table = Table(title=title, title_justify="left", header_style="bold")
        for column in ("ACTION", "MIG UUID", "GPU", "PLACEMENT"):
            table.add_column(column, no_wrap=True)
        table.add_column("REASON", min_width=30)
        for a in result.actions:
            table.add_row(
                a.action,
                a.mig_uuid or "-",
                (a.gpu_uuid or "-")[:12],
                str(a.placement) if a.placement else "-",
                a.reason,
            )
        console.print(table)
    for skipped in result.skipped:
        console.print(f"skipped GPU {skipped.index} ({skipped.uuid}): {skipped.reason}")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")
    if result.failed:
        console.print(f"[bold red]failed:[/] {result.failed}")


def _config(console: Console, result: ConfigView) -> None:
    from rich.table import Table

    table = Table(title=f"configuration ({result.path})", title_justify="left", header_style="bold")
    for column in ("SETTING", "VALUE", "SOURCE"):
        table.add_column(column)
    for s in result.settings:
        value = json.dumps(s.value) if not isinstance(s.value, str) else s.value
        table.add_row(s.key, value, s.source)
    console.print(table)


def _detail(console: Console, result: InstanceDetail) -> None:
    from rich.table import Table

    inst = result.instance
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    style = STATE_STYLE.get(inst.state, "")
    rows = [
        ("MIG UUID", inst.mig_uuid or "-"),
        ("state", f"[{style}]{inst.state.value}[/]" if style else inst.state.value),
        ("GPU", f"{inst.gpu_index} ({inst.gpu_uuid})"),
        ("profile", inst.profile),
        ("placement", str(inst.placement)),
        ("GI / CI", f"{inst.gpu_instance_id} / {inst.compute_instance_id}"),
        ("owner", "-" if inst.owner is None else str(inst.owner)),
        ("processes", "-" if inst.processes is None else ("yes" if inst.processes else "none")),
        ("CDI device", inst.cdi_device or "-"),
        ("CDI spec", result.cdi_spec or "-"),
        ("record", result.record or "-"),
        ("error", inst.error or "-"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")


def _instance_list(console: Console, result: InstanceList) -> None:
    table = _instance_table("MIG instances", result.instances)
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
    for gpu in result.state.gpus:
        mig = "on" if gpu.mig_current else "off"
        if gpu.mig_current != gpu.mig_pending:
            mig += " (reset pending)"
        if not gpu.gis:
            table.add_row(str(gpu.index), gpu.model, mig, "-", "-", "-", "-", "-", "-")
        for gi in gpu.gis:
            cis: list[SimCi | None] = [*gi.cis] or [None]
            for ci in cis:
                busy = []
                if ci is not None and ci.busy:
                    busy.append("processes")
                if gi.held:
                    busy.append("GI held")
                table.add_row(
                    str(gpu.index),
                    gpu.model,
                    mig,
                    str(gi.id),
                    str(gi.profile_id),
                    f"{gi.start}:{gi.size}",
                    "-" if ci is None else str(ci.id),
                    "-" if ci is None else ci.mig_uuid,
                    ", ".join(busy) or "-",
                )
    console.print(table)
    for fault in result.state.faults:
        gpu_text = "" if fault.gpu is None else f" on GPU {fault.gpu}"
        console.print(
            f"fault: {fault.action} {fault.op} ({fault.error}) x{fault.times}, "
            f"skip {fault.skip}{gpu_text}"
        )
    if result.state.calls:
        calls = ", ".join(f"{k}={v}" for k, v in sorted(result.state.calls.items()))
        console.print(f"NVML calls: {calls}")


CHECK_STYLE = {
    CheckStatus.OK: "green",
    CheckStatus.WARN: "yellow",
    CheckStatus.FAIL: "bold red",
}


def _doctor(console: Console, result: DoctorReport) -> None:
    from rich.table import Table

    where = f"simulated node {result.sim}" if result.sim else "this node"
    table = Table(title=f"doctor: {where}", title_justify="left", header_style="bold")
    table.add_column("CHECK", no_wrap=True)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("DETAIL")
    table.add_column("FIX")
    for check in result.checks:
        style = CHECK_STYLE[check.status]
        table.add_row(
            check.name,
            f"[{style}]{check.status.value.upper()}[/]",
            _escape(check.message),
            _escape(check.hint) if check.hint else "-",
        )
    console.print(table)
    counts = {s: result.count(s) for s in CheckStatus}
    summary = f"{counts[CheckStatus.OK]} ok, {counts[CheckStatus.WARN]} warn, "
    summary += f"{counts[CheckStatus.FAIL]} fail"
    if result.exit_code:
        console.print(f"[bold red]{summary}: not healthy[/] (exit {result.exit_code})")
    elif counts[CheckStatus.WARN]:
        console.print(f"[yellow]{summary}: healthy, with warnings[/]")
    else:
        console.print(f"[green]{summary}: healthy[/]")


def _escape(text: str) -> str:
    """Paths and messages are data, not rich markup (`[` in a file name must print as is)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _forget(console: Console, result: Forget) -> None:
    """One short line per dropped file (the JSON has the paths)."""
    verb = "would forget" if result.dry_run else "forgot"
    for item in result.forgotten:
        if item.intent is not None:
            line = f"{verb} intent {item.intent}"
        else:
            files = "record and CDI spec" if item.cdi_spec else "record"
            line = f"{verb} {item.mig_uuid} ({item.state or 'unreadable'}): its {files}"
        if item.unreadable:
            line += f" [yellow](unreadable: {_escape(item.unreadable)})[/]"
        console.print(line)
        if item.note:
            console.print(f"[yellow]note:[/] {_escape(item.note)}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {_escape(warning.file)}: {_escape(warning.reason)}")
    if not result.dry_run:
        console.print("the hardware was not touched: see 'hamimig list'")


def _on_console(draw: Callable[[Console, _R], None]) -> Callable[[_R], None]:
    """A table drawn on a fresh console (made only when a table is drawn: rich loads late)."""

    def render(result: _R) -> None:
        draw(_console(), result)

    return render


# How a table shows each kind of result: the one registry `emit` dispatches through. Kinds whose
# modules load only for their own command (config, demo, recover and adopt) are spelled out
# rather than imported, so that other commands never pay for them.
_TABLES: dict[str, Callable[[Any], None]] = {
    InstanceList.kind: _on_console(_instance_list),
    ProfileList.kind: _on_console(_profile_list),
    InstanceDetail.kind: _on_console(_detail),
    SimView.kind: _on_console(_sim_view),
    Allocation.kind: _on_console(_allocation),
    Release.kind: _on_console(_release),
    Reclaim.kind: _on_console(_reclaim),
    ActionReport.kind: _on_console(_actions),
    "Recovery": _on_console(_actions),
    "Adoption": _on_console(_actions),
    DoctorReport.kind: _on_console(_doctor),
    Forget.kind: _on_console(_forget),
    Metrics.kind: _metrics,  # plain text: the exposition must reach stdout verbatim
    "Config": _on_console(_config),
    "DemoTranscript": _on_console(_demo_summary),
}
