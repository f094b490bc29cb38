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
from collections.abc import Callable, Collection
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
    EventList,
    GpuView,
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
    State.UNREADABLE: "bold red",
}
STATE_GLYPH = {
    State.ACTIVE: "A",
    State.IDLE: "I",
    State.CREATING: "C",
    State.RECLAIMING: "R",
    State.ERROR: "E",
    State.UNMANAGED: "U",
    State.ORPHAN_GI: "O",
    State.MISSING: "M",
    State.UNREADABLE: "X",
}
"""The letter that marks each state on the slice map, where colour alone would not tell them
apart (NO_COLOR, a monochrome terminal, a screenshot in a ticket)."""
OUTCOME_STYLE = {
    Outcome.CREATED: "bold green",
    Outcome.REUSED: "bold green",
    Outcome.RELEASED: "cyan",
    Outcome.RECLAIMED: "bold yellow",
    Outcome.FORGOTTEN: "bold yellow",
    Outcome.UNCHANGED: "dim",
    Outcome.FAILED: "bold red",
}
WOULD = {
    Outcome.CREATED: "would create",
    Outcome.REUSED: "would reuse",
    Outcome.RELEASED: "would release",
    Outcome.RECLAIMED: "would reclaim",
    Outcome.FORGOTTEN: "would forget",
}
"""A dry run's OUTCOME cell: what the command would do (its JSON keeps the `outcome` value)."""
_GONE = (Outcome.RECLAIMED, Outcome.FORGOTTEN)
"""Outcomes after which the instance's last state no longer holds: its STATE is dimmed."""


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
def error(err: HamimigError, fmt: str, within: dict[str, Any] | None = None) -> None:
    """A failure: one JSON/YAML object on stdout (with the error's structured `detail`, such
    as a conflict's `blockers`), or one line on stderr. `within`: the refused dry run's plan
    object, which carries the error in place of `kind: Error`."""
    message = one_line(printable(err.message))
    if err.setting is not None:
        from hamimig.cli.options import SETTING_FLAGS

        message += f" ({err.setting.value}: {SETTING_FLAGS[err.setting]})"
    if fmt in ("json", "yaml"):
        body: dict[str, Any] = {"code": err.code, "message": message, **err.detail()}
        _dump({**(within or {"kind": "Error"}), "error": body}, fmt)
    else:
        text(f"hamimig: error: {message}", err=True)


class Look:
    """How a table is drawn: `-o wide` (instance tables gain columns; every other table is as
    `-o table` draws it), `--no-headers`, and the node's clock, read once and only when a table
    shows ages (None: ages show as `-`)."""

    def __init__(
        self, wide: bool = False, headers: bool = True, clock: Callable[[], float] | None = None
    ) -> None:
        self.wide = wide
        self.headers = headers
        self._clock = clock
        self._now: float | None = None

    def now(self) -> float | None:
        if self._now is None and self._clock is not None:
            self._now = self._clock()
        return self._now

    def plain(self) -> Look:
        """This look as `-o table` draws it, on the same reading of the clock."""
        plain = Look(headers=self.headers)
        plain._now = self.now()
        return plain


@_tolerates_closed_output
def emit(
    result: Result,
    fmt: str,
    *,
    headers: bool = True,
    clock: Callable[[], float] | None = None,
) -> None:
    """A result as JSON, YAML, or the table registered for its kind in `_TABLES` (`table`, or
    `wide`: see `Look`)."""
    if fmt in ("json", "yaml"):
        _dump(result.to_json(), fmt)
        return
    if fmt == "name" and result.kind in _NAMES:
        _names(result)
        return
    table = _TABLES.get(result.kind)
    if table is None:  # a result without a table of its own still shows everything it has
        _console().print_json(json.dumps(result.to_json()))
        return
    table(result, Look(wide=fmt == "wide", headers=headers, clock=clock))


@_tolerates_closed_output
def demo_step(step: DemoStep) -> None:
    """One narrated demo step: title, story, the equivalent command, outcome, NVML cost."""
    from rich.rule import Rule

    console = _console()
    # A rule is as wide as the terminal: the piped width (kept wide for grep) would be a line
    # of 240 dashes.
    _console(piped_width=80).print(Rule(f"[bold]{step.number}. {step.title}[/]", align="left"))
    console.print(step.narration)
    console.print(f"[dim]$ {step.command}[/]")
    style = "green" if step.exit_code == 0 else "yellow"
    console.print(f"[{style}]→ {step.outcome}[/] (exit {step.exit_code})")
    console.print(
        f"[dim]NVML calls: {step.nvml_calls} (GI/CI create calls: {step.creations}, "
        f"destroy calls: {step.destructions})[/]"
    )
    if step.instances:
        console.print(_instance_table(console, step.instances))


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


_PIPED_WIDTH = 250
_UNBOUNDED = 10_000
"""A width no line reaches: a table this wide is drawn at its natural width, never cut."""


def _console(width: int | None = None, piped_width: int = _PIPED_WIDTH) -> Console:
    """A console `width` wide; without one, the terminal's (or COLUMNS), and `piped_width`
    when piped or captured without COLUMNS."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            # rich's own handler exits with status 1; the command's status must survive.
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "standard output is closed")

    console = PipeConsole(highlight=False, soft_wrap=False, width=width)
    if width is None and not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped or captured: never truncate what scripts may grep (COLUMNS still wins).
        console = PipeConsole(highlight=False, soft_wrap=False, width=piped_width)
    return console


def _owner(inst: InstanceView, slot: bool = False) -> str:
    """`ns/pod`, or `ns/pod[container/device]` with `slot`; for an instance a release just
    made (or found) Idle, the pod it was released from."""
    owner = inst.owner
    if owner is None and inst.outcome in (Outcome.RELEASED, Outcome.UNCHANGED):
        owner = inst.last_owner
    if owner is None:
        return "-"
    if slot:
        return str(owner)
    return f"{owner.namespace}/{owner.name}"


def _age(inst: InstanceView, now: float | None) -> str:
    """`5m`, `3h12m`, `2d`, like kubectl's AGE (see `InstanceView.since`); `-` when unknown."""
    from hamimig.durations import format_duration, parse_time

    since = inst.since()
    start = None if since is None else parse_time(since)
    if start is None or now is None:
        return "-"
    if start > now + 1:  # a timestamp ahead of this node's clock: a skew to see, not "0s"
        return "<invalid>"
    return format_duration(now - start)


def _processes(inst: InstanceView) -> str:
    """How many processes (compute, graphics, MPS) run on the MIG device (`-` when NVML could
    not say)."""
    if inst.processes is None:
        return "-"
    if not inst.processes:
        return "none"
    return str(inst.process_count) if inst.process_count is not None else "yes"


_PLAIN = Look()

_FOLD_FLOOR = {"OWNER": 20, "POD": 20, "CDI DEVICE": 20, "REASON": 30}
"""Columns that wrap (folded mid-word where a word is longer than the column, never cut), and
the width below which a layout would rather drop another column than squeeze them further."""
_INSTANCE_DROPS = (("CDI", "CDI DEVICE"), ("GI", "CI"), ("POD UID",), ("PROCESSES",), ("AGE",))
"""What an instance table leaves out, in this order, where the console is too narrow; GPU, MIG
UUID (shortened), PROFILE, PLACEMENT, STATE and OWNER always stay."""
_NARROW = 80
"""Below this width tables may lose their rules and, last, columns kept at 80."""
_LAST_RESORT = (("PLACEMENT",), ("PROFILE",))
"""Below 80 columns, when even the kept columns do not fit without rules: then these go too
(`show` names them), so that MIG UUID prefixes stay unique and the owner readable."""
_ACTION_DROPS = (("GPU",), ("PLACEMENT",))
"""What the action table leaves out where the console is too narrow: ACTION, MIG UUID
(shortened) and REASON always stay."""
_UUID = "MIG UUID"
_PREFIX_HEX = 8
"""Hex digits a shortened MIG UUID keeps at least: as many as a command that changes something
wants of a prefix (a prefix unique today must not name another instance tomorrow)."""


def _short_uuids(uuids: list[str]) -> list[str]:
    """`uuids` cut to the shortest prefix unique among them, with `…` for what was left out.

    A prefix keeps at least `_PREFIX_HEX` hex digits after `MIG-` (and an old-style `GPU-`),
    never ends on a dash, and is the same length on every row; `-` (no MIG device) stays."""
    known = sorted({u for u in uuids if u != "-"})
    if not known:
        return uuids

    def unique(length: int) -> bool:
        return len({u[:length] for u in known}) == len(known)

    def usable(uuid: str) -> int:
        """The length of the prefix of `uuid` that holds `_PREFIX_HEX` hex digits."""
        head = len("MIG-") + (len("GPU-") if uuid.startswith("MIG-GPU-") else 0)
        digits = 0
        for n, c in enumerate(uuid[head:], start=head + 1):
            digits += c in "0123456789abcdefABCDEF"
            if digits == _PREFIX_HEX:
                return n
        return len(uuid)

    length = max(usable(u) for u in known)
    while not unique(length) or any(u[length - 1 : length] == "-" for u in known):
        length += 1
        if length >= max(len(u) for u in known):
            return uuids
    return [u if u == "-" or len(u) <= length else u[:length] + "…" for u in uuids]


def _fit(
    width: int,
    boxed: bool,
    columns: dict[str, list[str]],
    drops: tuple[tuple[str, ...], ...],
    last_resort: tuple[tuple[str, ...], ...] = (),
    keep: Collection[str] = (),
) -> tuple[dict[str, list[str]], bool]:
    """The columns (name: plain cells, in order) a table shows on a console `width` wide;
    those in `keep` are never left out (the groups of `drops` and `last_resort` lose them).

    The first layout that fits wins: every column with whole MIG UUIDs, then without each group
    of `drops` in turn; then the same with MIG UUIDs shortened (`_short_uuids`); then both
    again without rules (kubectl's look); then, shortened and without rules, also without the
    groups of `last_resort`; else the narrowest of them. Returns the columns and whether the
    table has rules. A column in `_FOLD_FLOOR` counts as wide as its floor (it wraps); any
    other as wide as its widest cell or header (it never wraps). `boxed`: rich's default box
    (a rule between columns and at both edges); else kubectl's look (two spaces apart)."""
    from rich.cells import cell_len

    def needed_as(shown: dict[str, list[str]], ruled: bool) -> int:
        total = 0
        for name, cells in shown.items():
            natural = max([cell_len(name), *(cell_len(c) for c in cells)])
            total += min(natural, _FOLD_FLOOR[name]) if name in _FOLD_FLOOR else natural
        n = len(shown)
        return total + (3 * n + 1 if ruled else 2 * (n - 1))

    drops, last_resort = (
        tuple(g for g in (tuple(n for n in group if n not in keep) for group in groups) if g)
        for groups in (drops, last_resort)
    )
    shortened = dict(columns)
    if _UUID in columns:
        shortened[_UUID] = _short_uuids(columns[_UUID])
    passes = [(boxed, columns, drops), (boxed, shortened, drops)]
    if not boxed or width < _NARROW:
        # Without rules, then without what is kept at 80 columns: only where it must be.
        if boxed:
            passes += [(False, columns, drops), (False, shortened, drops)]
        passes.append((False, shortened, (*drops, *last_resort)))
    shown, ruled = columns, boxed
    for ruled, candidate, groups in passes:
        shown = dict(candidate)
        for group in ((), *groups):
            shown = {name: cells for name, cells in shown.items() if name not in group}
            if needed_as(shown, ruled) <= width:
                return shown, ruled
    return shown, ruled  # the narrowest: its folding columns give the rest


def _fitted_table(columns: dict[str, list[str]], ruled: bool) -> Any:
    """An empty table with the columns `_fit` chose: folding ones wrap (owners, reasons, the
    whole CDI device), CDI is cut to its short form, a MIG UUID (whole or a unique prefix) is
    never cut further, the rest never wrap; without rules where `_fit` found it must be."""
    from rich.cells import cell_len
    from rich.table import Table

    table = Table(header_style="bold")
    if not ruled:
        table.box = None
        table.pad_edge = False
    for name, cells in columns.items():
        if name in _FOLD_FLOOR:
            table.add_column(name, overflow="fold")
        elif name == "CDI":
            table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=18)
        elif name == _UUID:
            widest = max(cell_len(c) for c in [name, *cells])
            table.add_column(name, no_wrap=True, min_width=widest)
        else:
            table.add_column(name, no_wrap=True)
    return table


def _titled(console: Console, title: str, table: Any) -> None:
    """`table` under its title, the title printed as lines of its own (`_wrapped`): rich would
    pad it with spaces to the table's width."""
    if title:
        _wrapped(console, title, "table.title")
    console.print(table)


def _wrapped(console: Console, plain: str, style: str = "", indent: int = 0) -> None:
    """`plain` (not markup) wrapped to the console's width, long words folded, and without the
    space rich leaves at the end of each line it breaks; lines after the first indented by
    `indent`, so that one item of a list reads as one."""
    from rich.text import Text

    width = max(console.width - indent, 1)
    for n, line in enumerate(Text(plain, style=style).wrap(console, width, overflow="fold")):
        line.rstrip()
        console.print(Text(" " * indent) + line if n else line)


def _instance_rows(
    instances: tuple[InstanceView, ...], look: Look, age: bool, dry_run: bool = False
) -> tuple[list[str], list[list[str]]]:
    """The instance table's column names and plain cells (see `_instance_table`)."""
    names = ["GPU", "MIG UUID", "PROFILE", "PLACEMENT", "GI", "CI", "STATE", "OWNER"]
    outcomes = any(i.outcome is not None for i in instances)
    if outcomes:  # the results of allocate, release, reclaim and forget
        names.insert(names.index("STATE") + 1, "OUTCOME")
    if look.wide:
        names += ["AGE", "POD UID", "PROCESSES", "CDI DEVICE"]
    else:
        names += ["CDI", "AGE"] if age else ["CDI"]
    pods = [(i.owner.namespace, i.owner.name) for i in instances if i.owner is not None]
    now = look.now() if age or look.wide else None
    rows: list[list[str]] = []
    for inst in instances:
        # STATE stays one plain word without headers (awk '$7=="Active"'); `-o wide` has a
        # PROCESSES column for that.
        busy = "" if look.wide or not look.headers or not inst.processes else " (busy)"
        shared = inst.owner is not None and pods.count((inst.owner.namespace, inst.owner.name)) > 1
        cells = [
            str(inst.gpu_index),
            inst.mig_uuid or "-",
            inst.profile,
            str(inst.placement),
            "-" if inst.gpu_instance_id is None else str(inst.gpu_instance_id),
            "-" if inst.compute_instance_id is None else str(inst.compute_instance_id),
            inst.state.value + busy,
            _owner(inst, slot=look.wide or shared),
        ]
        if outcomes:
            cells.insert(names.index("OUTCOME"), _outcome(inst.outcome, dry_run))
        if look.wide:
            uid = inst.owner.uid if inst.owner is not None else None
            cells += [_age(inst, now), uid or "-", _processes(inst), inst.cdi_device or "-"]
        else:
            cells.append(inst.cdi_device.rsplit("=", 1)[-1][:16] if inst.cdi_device else "-")
            if age:
                cells.append(_age(inst, now))
        rows.append(cells)
    return names, rows


def _outcome(outcome: Outcome | None, dry_run: bool) -> str:
    if outcome is None:
        return "-"
    return WOULD.get(outcome, outcome.value) if dry_run else outcome.value


def _instance_table(
    console: Console, instances: tuple[InstanceView, ...], look: Look = _PLAIN, age: bool = False
) -> Any:
    return _instance_table_fitted(console, instances, look, age)[0]


def _instance_table_fitted(
    console: Console,
    instances: tuple[InstanceView, ...],
    look: Look = _PLAIN,
    age: bool = False,
    dry_run: bool = False,
) -> tuple[Any, bool]:
    """The instance table (`list`, `release`, `reclaim`, demo steps), with AGE when `age`, and
    whether it shortened the MIG UUIDs to fit.

    The owner shows its container and device index (`ns/pod[0/1]`) where one pod holds several
    of `instances`. `-o wide` is laid out like kubectl's (no rules) and adds AGE, the pod UID,
    whether processes run and the whole CDI device, folded onto more lines where the width runs
    out; it always shows the owner's index. Where `console` is too narrow for every column the
    table leaves some out and shortens MIG UUIDs (see `_fit`); the owner wraps, never cut.
    `-o wide` shows more than the plain table, never less: it keeps every column the plain one
    keeps at that width, and leaves out only its own extras."""

    columns, ruled = _instance_columns(console.width, instances, look, age, dry_run)
    table = _fitted_table(columns, ruled)
    for r, inst in enumerate(instances):
        shown = []
        for name, cells in columns.items():
            cell = _escape(cells[r])
            # An instance reclaimed or forgotten is no longer what its last state says: dimmed.
            style = "dim" if inst.outcome in _GONE else STATE_STYLE.get(inst.state, "")
            if name == "OUTCOME" and inst.outcome is not None:
                cell = f"[{OUTCOME_STYLE[inst.outcome]}]{cell}[/]"
            if name == "STATE" and style:
                rest = cells[r][len(inst.state.value) :]
                cell = f"[{style}]{inst.state.value}[/]{rest}"
            shown.append(cell)
        table.add_row(*shown)
    shortened = _UUID in columns and columns[_UUID] != [i.mig_uuid or "-" for i in instances]
    return table, shortened


def _instance_columns(
    width: int, instances: tuple[InstanceView, ...], look: Look, age: bool, dry_run: bool = False
) -> tuple[dict[str, list[str]], bool]:
    """The instance table's columns and whether it has rules (see `_fit`)."""
    names, rows = _instance_rows(instances, look, age, dry_run)
    keep: set[str] = set()
    if look.wide:
        plain, _ = _instance_columns(width, instances, look.plain(), age, dry_run)
        keep = {"CDI DEVICE" if name == "CDI" else name for name in plain}
        if look.headers and any(i.processes for i in instances):
            keep.add("PROCESSES")  # the plain table's `(busy)`
    return _fit(
        width,
        not look.wide,
        {name: [row[i] for row in rows] for i, name in enumerate(names)},
        _INSTANCE_DROPS,
        _LAST_RESORT,
        keep,
    )


def _plain_rows(instances: tuple[InstanceView, ...], look: Look, age: bool) -> str:
    """`list --no-headers`: one instance a line, columns two spaces apart, every cell one word,
    nothing cut, no colours and no trailing spaces (for awk and cut)."""
    _, rows = _instance_rows(instances, look, age)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def _table_console(look: Look) -> Console:
    """`-o wide` piped without COLUMNS is drawn at its natural width: never folded."""
    return _console(piped_width=_UNBOUNDED if look.wide else _PIPED_WIDTH)


def _instances(
    console: Console,
    title: str,
    instances: tuple[InstanceView, ...],
    look: Look = _PLAIN,
    acted: str = "",
    dry_run: bool = False,
) -> None:
    """The instance table under `title`. With `acted` (a verb), a table too narrow for whole
    MIG UUIDs is followed by the ones acted on, whole, so that a prefix given on the command
    line is never all the operator sees of what was changed."""
    if not instances:
        console.print(f"{title}: none")
        return
    table, shortened = _instance_table_fitted(console, instances, look, dry_run=dry_run)
    _titled(console, title, table)
    if acted and shortened:
        for inst in instances:
            if inst.mig_uuid:
                _wrapped(console, f"{acted} {inst.mig_uuid}")


def _allocation(console: Console, result: Allocation, look: Look) -> None:
    """The sentence, then the instance table (its OUTCOME: created, reused or unchanged)."""
    inst = result.instance
    how = "already held" if result.outcome is Outcome.UNCHANGED else result.outcome.value
    if result.dry_run and result.outcome is not Outcome.UNCHANGED:
        how = "would reuse" if result.outcome is Outcome.REUSED else "would create"
    what = inst.mig_uuid or "a new instance"
    dry = " (dry run: nothing changed)" if result.dry_run else ""
    console.print(
        f"{how}: {what} ({inst.profile} at {inst.placement} on GPU {inst.gpu_index}) "
        f"for {_owner(inst)}{dry}"
    )
    _instances(console, "", result.instances, look, dry_run=result.dry_run)
    if result.reclaimed:
        first = "would reclaim first" if result.dry_run else "reclaimed to make room"
        console.print(f"{first}: " + ", ".join(result.reclaimed))
    if inst.cdi_device:
        console.print(f"CDI device: {inst.cdi_device}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")


def _release(console: Console, result: Release, look: Look) -> None:
    title = "would release (dry run): these go Idle" if result.dry_run else "released (now Idle)"
    if result.released and all(i.outcome is Outcome.UNCHANGED for i in result.released):
        title = "already released (Idle): nothing changed"
    acted = "would release" if result.dry_run else "released"
    _instances(console, title, result.released, look, acted, result.dry_run)
    _failures(console, result.released)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")


def _failures(console: Console, instances: tuple[InstanceView, ...]) -> None:
    for inst in instances:
        if inst.outcome is Outcome.FAILED:
            _wrapped(console, f"failed {inst.mig_uuid}: {inst.error}", indent=2)


def _reclaim(console: Console, result: Reclaim, look: Look) -> None:
    title = (
        "would reclaim (dry run: nothing changed)"
        if result.dry_run
        else "reclaimed (destroyed: no longer on the node)"
    )
    acted = "would reclaim" if result.dry_run else "reclaimed"
    _instances(console, title, result.reclaimed, look, acted, result.dry_run)
    _failures(console, result.reclaimed)
    for skipped in result.skipped:
        _wrapped(console, f"skipped {skipped.mig_uuid}: {skipped.reason}", indent=2)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")


def _actions(console: Console, result: ActionReport) -> None:

    title = f"{result.kind.lower()}{' (dry run: nothing changed)' if result.dry_run else ''}"
    if not result.actions:
        console.print(f"{title}: nothing to change")
    else:
        acts = result.actions
        yes = "would" if result.dry_run else "yes"
        columns, ruled = _fit(
            console.width,
            True,
            {
                "ACTION": [a.action for a in acts],
                "CHANGED": ["failed" if a.failed else yes if a.changed else "no" for a in acts],
                _UUID: [a.mig_uuid or "-" for a in acts],
                "GPU": [(a.gpu_uuid or "-")[:12] for a in acts],
                "PLACEMENT": [str(a.placement) if a.placement else "-" for a in acts],
                "REASON": [a.reason for a in acts],
            },
            _ACTION_DROPS,
        )
        table = _fitted_table(columns, ruled)
        for r in range(len(acts)):
            table.add_row(*(_escape(cells[r]) for cells in columns.values()))
        _titled(console, title, table)
        _wrapped(console, action_summary(result))
    for skipped in result.skipped:
        console.print(f"skipped GPU {skipped.index} ({skipped.uuid}): {skipped.reason}")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")
    if result.failed:
        console.print(f"[bold red]failed:[/] {result.failed}")


_DONE_WORDS = {"restore-idle": "restored Idle", "restore-active": "restored Active"}
"""How the summary names a restore that changed something (in a real run)."""


def action_summary(result: ActionReport) -> str:
    """One line under the action table: the actions counted by what they did (a restore that
    changed nothing is `verified`), how many changed something, how many failed (never counted
    as changed) and the files written or removed; `nothing to change` when no action changed
    anything or failed.

    `summary: 4 verified, 1 restored Idle, 1 preserve-unmanaged; 1 changed, 1 file changed`
    """
    counts: dict[str, int] = {}
    for a in result.actions:
        if a.failed:
            word = f"{a.action} failed"
        elif a.verified:
            word = "verified"
        elif a.changed and not result.dry_run:
            word = _DONE_WORDS.get(a.action, a.action)
        else:
            word = a.action
        counts[word] = counts.get(word, 0) + 1
    parts = ", ".join(f"{n} {word}" for word, n in counts.items())
    changed, failed, files = result.changed, result.failed_actions, result.files_changed
    if not changed and not failed:
        tail = "nothing to change"
        if not result.dry_run:
            tail += f" (0 changed, {files} files changed)"
    elif result.dry_run:
        tail = f"{changed} would change (dry run: nothing changed)"
    else:
        failures = f"{failed} failed, " if failed else ""
        tail = f"{changed} changed, {failures}{files} file{'' if files == 1 else 's'} changed"
    return f"summary: {parts}; {tail}"


_CONFIG_ROOM = 30
"""What `config show`'s keys leave of the width for the rules and the other two columns (at
least 10 characters each)."""


def _config(console: Console, result: ConfigView) -> None:
    from rich.table import Table

    table = Table(header_style="bold")
    # What `config show` exists to show is never cut: keys stay on one line where VALUE and
    # SOURCE keep room beside them, and everything folds where the width runs out.
    widest = max((len(s.key) for s in result.settings), default=0)
    table.add_column("SETTING", overflow="fold", no_wrap=console.width >= widest + _CONFIG_ROOM)
    table.add_column("VALUE", overflow="fold")
    table.add_column("SOURCE", overflow="fold")
    for s in result.settings:
        value = json.dumps(s.value) if not isinstance(s.value, str) else s.value
        table.add_row(_escape(s.key), _escape(value), _escape(s.source))
    _titled(console, f"configuration ({result.path})", table)


def _detail(console: Console, result: InstanceDetail) -> None:
    from rich.table import Table

    inst = result.instance
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")  # paths and CDI names wrap whole, never cut
    style = STATE_STYLE.get(inst.state, "")
    rows = [
        ("MIG UUID", inst.mig_uuid or "-"),
        ("state", f"[{style}]{inst.state.value}[/]" if style else inst.state.value),
        ("GPU", f"{inst.gpu_index} ({inst.gpu_uuid})"),
        ("profile", inst.profile),
        ("placement", str(inst.placement)),
        ("GI / CI", f"{inst.gpu_instance_id} / {inst.compute_instance_id}"),
        ("owner", "-" if inst.owner is None else str(inst.owner)),
        ("pod UID", _escape((inst.owner.uid if inst.owner is not None else None) or "-")),
        ("processes", _processes(inst)),
        ("created", inst.created_at or "-"),
        ("updated", inst.updated_at or "-"),
        ("idle since", inst.idle_since or "-"),
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


def _instance_list(console: Console, result: InstanceList, look: Look) -> None:
    if not look.headers:  # rows only, on stdout; the rest goes to stderr
        if result.instances:
            text(_plain_rows(result.instances, look, age=True))
        else:
            text("no MIG instances", err=True)
        for warning in result.warnings:
            text(f"warning: {warning.file}: {warning.reason}", err=True)
        if result.queued_removals:
            text(_queued_note(result), err=True)
        return
    if result.instances:
        _titled(console, "MIG instances", _instance_table(console, result.instances, look, True))
    else:
        console.print("no MIG instances")
    if console.is_terminal:
        mapped: list[InstanceView] = []
        for gpu in result.gpus:
            on_gpu = [i for i in result.instances if i.gpu_index == gpu.index]
            console.print(_slice_map(gpu, on_gpu))
            if gpu.mig_mode.value == "enabled":
                mapped += on_gpu
        if any(gpu.mig_mode.value == "enabled" for gpu in result.gpus):
            _wrapped(console, _slice_legend(mapped))
    else:
        for gpu in result.gpus:
            console.print(f"GPU {gpu.index} {gpu.uuid} {gpu.model} {_mig_modes(gpu)}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")
    if result.queued_removals:
        _wrapped(console, _queued_note(result))


def _queued_note(result: InstanceList) -> str:
    names = ", ".join(q.mig_uuid for q in result.queued_removals)
    return (
        f"note: the CDI specs of {len(result.queued_removals)} destroyed instance(s) are still "
        f"published, their removal queued ({names}): 'hamimig reconcile' retries it"
    )


def _mig_modes(gpu: GpuView) -> str:
    """`MIG enabled`, and the mode after the next GPU reset when that differs."""
    now = f"MIG {gpu.mig_mode.value}"
    if gpu.mig_pending is gpu.mig_mode:
        return now
    return f"{now}, {gpu.mig_pending.value} after the next GPU reset"


def _slice_map(gpu: GpuView, instances: list[InstanceView]) -> str:
    """Three lines per GPU under its title: the memory slices' numbers; the GI occupying each
    slice (`GI4` on its first slice, `…` on the others, `·` when free); and the state of that
    GI as a letter (`STATE_GLYPH`), so that the map reads the same without colour (NO_COLOR).
    `_slice_legend` explains the glyphs."""
    cells: list[str] = []
    states: list[str] = []
    width = 7
    for s in range(gpu.memory_slices):
        owner = next((i for i in instances if i.placement.start <= s < i.placement.end), None)
        if owner is None:
            cells.append("[dim]" + "·".center(width) + "[/]")
            states.append(" " * width)
            continue
        label = f"GI{owner.gpu_instance_id}" if s == owner.placement.start else "…"
        style = STATE_STYLE.get(owner.state, "")
        cells.append(f"[{style}]{label.center(width)}[/]")
        pad = " " * ((width - 1) // 2)  # outside the markup: the line's end can be stripped
        states.append(f"{pad}[{style}]{STATE_GLYPH[owner.state]}[/]{pad}")
    header = " ".join(str(s).center(width) for s in range(gpu.memory_slices))  # under each cell
    title = f"[bold]GPU {gpu.index}[/] {_escape(gpu.model)} ({_mig_modes(gpu)})"
    if gpu.mig_mode.value != "enabled":
        return title
    lines = [title, f"  memory slice {header.rstrip()}", f"{'':15}{'|'.join(cells)}"]
    if instances:
        lines.append(f"  {'state':13}{' '.join(states).rstrip()}")
    return "\n".join(lines)


def _slice_legend(instances: list[InstanceView]) -> str:
    """The slice maps' key: what a cell shows, and the letter of each state on the maps."""
    shown = [s for s in State if any(i.state is s for i in instances)]
    states = ", ".join(f"{STATE_GLYPH[s]}={s.value}" for s in shown)  # a pair never wraps
    return "legend: GI<n>=GPU instance n starts here, …=it goes on, ·=free" + (
        f"; state: {states}" if states else ""
    )


def _profile_list(console: Console, result: ProfileList) -> None:
    from rich.table import Table

    for gpu in result.gpus:
        table = Table(header_style="bold")
        table.add_column("PROFILE", no_wrap=True)
        table.add_column("ID", no_wrap=True)
        # `3g.40gb` takes 3 of the GPU's compute slices but 4 of its memory slices (`0:4`).
        table.add_column("COMPUTE SLICES")
        table.add_column("MEMORY MiB")
        table.add_column("FREE/TOTAL", no_wrap=True)  # as nvidia-smi mig -lgip
        table.add_column("MEMORY SLICES (placement start:size)")
        for p in gpu.profiles:
            table.add_row(
                p.name,
                str(p.id),
                str(p.slice_count),
                str(p.memory_mb),
                f"{p.free_instances}/{p.max_instances}",
                " ".join(str(pl) for pl in p.placements),
            )
        _titled(console, f"GPU {gpu.index}  {gpu.model}  {gpu.uuid}", table)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning.file}: {warning.reason}")


def _sim_view(console: Console, result: SimView) -> None:
    from rich.table import Table

    from hamimig.sim.ops import BusyKind

    if result.message:  # a change: say what happened; `sim show` prints the whole node
        console.print(result.message)
        return
    table = Table(header_style="bold")
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
                busy: list[str] = []
                if ci is not None:
                    busy.extend(f"{k.value} processes" for k in BusyKind if k in ci.busy)
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
    _titled(console, f"simulated node {result.path}", table)
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
    CheckStatus.SKIPPED: "dim",
}


def _doctor(console: Console, result: DoctorReport) -> None:
    from rich.table import Table

    where = f"simulated node {result.sim}" if result.sim else "this node"
    table = Table(header_style="bold")
    # Check names, paths and commands are copied: they fold where the width runs out, never cut.
    table.add_column("CHECK", overflow="fold")
    table.add_column("STATUS", no_wrap=True)
    table.add_column("DETAIL", overflow="fold")
    table.add_column("FIX", overflow="fold")
    for check in result.checks:
        style = CHECK_STYLE[check.status]
        table.add_row(
            check.name,
            f"[{style}]{check.status.value.upper()}[/]",
            _escape(check.message),
            _escape(check.hint) if check.hint else "-",
        )
    _titled(console, f"doctor: {where}", table)
    counts = {s: result.count(s) for s in CheckStatus}
    summary = f"{counts[CheckStatus.OK]} ok, {counts[CheckStatus.WARN]} warn, "
    summary += f"{counts[CheckStatus.FAIL]} fail"
    if counts[CheckStatus.SKIPPED]:
        summary += f", {counts[CheckStatus.SKIPPED]} skipped"
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


def _forget(console: Console, result: Forget, look: Look) -> None:
    """The instance table of what was forgotten (OUTCOME `forgotten`), then one short line per
    dropped file (the JSON has the paths)."""
    verb = "would forget" if result.dry_run else "forgot"
    if result.instances:
        title = (
            "would forget (dry run: nothing changed)"
            if result.dry_run
            else "forgotten (ownership dropped; a live instance is now Unmanaged)"
        )
        _instances(console, title, result.instances, look, dry_run=result.dry_run)
    for item in result.forgotten:
        if item.intent is not None:
            line = f"{verb} intent {item.intent}"
        else:
            files = "record and CDI spec" if item.cdi_spec else "record"
            named = item.mig_uuid or (item.record or "").rsplit("/", 1)[-1]  # by file name
            line = f"{verb} {named} ({item.state or 'unreadable'}): its {files}"
        if item.unreadable:
            line += f" [yellow](unreadable: {_escape(item.unreadable)})[/]"
        console.print(line)
        if item.note:
            console.print(f"[yellow]note:[/] {_escape(item.note)}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {_escape(warning.file)}: {_escape(warning.reason)}")
    if not result.dry_run:
        console.print("the hardware was not touched: see 'hamimig list'")


_EVENT_DROPS = (
    ("GPU UUID",),
    ("PID",),
    ("COMMAND",),
    ("PLACEMENT",),
    ("PROFILE",),
    ("CDI",),
    ("GPU",),
    ("STATE",),
)
"""What the event table leaves out where the console is too narrow: TIME, ACTION, MIG UUID
(shortened), POD and REASON always stay."""


def _event_time(value: object, wide: bool) -> str:
    """An event's time to the second (UTC, `Z`); `-o wide` shows it as the journal has it."""
    from hamimig.durations import parse_time

    text = _visible(str(value))
    when = parse_time(text)
    if wide or when is None:
        return text
    import datetime

    try:
        moment = datetime.datetime.fromtimestamp(when, datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):  # a valid time whose UTC year is not 1-9999
        return text
    return f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%SZ")


def _visible(text: str) -> str:
    """`text` with control characters (a terminal's escape sequences among them) shown as
    escapes: the journal is a file, and what a file says must not drive the terminal."""
    if all(" " <= c != "\x7f" for c in text):
        return text
    return "".join(c if " " <= c != "\x7f" else c.encode("unicode_escape").decode() for c in text)


def _event_cell(event: dict[str, object], key: str) -> str:
    value = event.get(key)
    if value is None or value == "":
        return "-"
    if key == "placement" and isinstance(value, dict):
        return _visible(f"{value.get('start')}:{value.get('size')}")
    if key == "action" and event.get("outcome") == "failed":
        return _visible(f"{value} (failed)")
    return _visible(str(value))


def _event_reason(event: dict[str, object]) -> str:
    reason = _event_cell(event, "reason")
    if event.get("outcome") == "failed":
        error = _visible(str(event.get("error") or ""))
        reason = f"FAILED: {error}" if reason == "-" else f"{reason}; FAILED: {error}"
    if event.get("cdi") == "queued" and "queued" not in reason:
        reason = f"{reason} (CDI spec removal queued)"  # said even where CDI is left out
    return reason


def _events(console: Console, result: EventList, look: Look) -> None:
    events = result.events
    if not events:
        where = f" in {result.path}" if result.path else ""
        console.print(f"no events{where} match")
    else:
        columns: dict[str, list[str]] = {
            "TIME": [_event_time(e.get("time"), look.wide) for e in events],
            "ACTION": [_event_cell(e, "action") for e in events],
            _UUID: [_event_cell(e, "migUUID") for e in events],
            "GPU": [_event_cell(e, "gpuIndex") for e in events],
            "PROFILE": [_event_cell(e, "profile") for e in events],
            "PLACEMENT": [_event_cell(e, "placement") for e in events],
            "POD": [_event_cell(e, "pod") for e in events],
            "STATE": [_event_cell(e, "state") for e in events],
            "CDI": [_event_cell(e, "cdi") for e in events],
            "COMMAND": [_event_cell(e, "command") for e in events],
            "REASON": [_event_reason(e) for e in events],
        }
        if look.wide:
            columns["PID"] = [_event_cell(e, "pid") for e in events]
            columns["GPU UUID"] = [_event_cell(e, "gpuUUID") for e in events]
        shown, ruled = _fit(console.width, True, columns, _EVENT_DROPS)
        table = _fitted_table(shown, ruled)
        for r in range(len(events)):
            table.add_row(*(_escape(cells[r]) for cells in shown.values()))
        console.print(table)
        if result.matched > len(events):
            older = result.matched - len(events)
            console.print(
                f"{older} older matching event(s) not shown: --limit N, a filter or -o json"
            )
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {_escape(warning.file)}: {_escape(warning.reason)}")


def _on_console(draw: Callable[[Console, _R], None]) -> Callable[[_R, Look], None]:
    """A table drawn on a fresh console (made only when a table is drawn: rich loads late);
    `-o wide` draws it as `-o table` does."""

    def render(result: _R, look: Look) -> None:
        draw(_console(), result)

    return render


def _with_look(draw: Callable[[Console, _R, Look], None]) -> Callable[[_R, Look], None]:
    """A table that `-o wide` or `--no-headers` changes, on a console fit for it."""

    def render(result: _R, look: Look) -> None:
        draw(_table_console(look), result, look)

    return render


def _names(result: Any) -> None:
    """`-o name`: the MIG UUID of each instance shown, one a line on stdout (an orphan GI, or
    the instance a dry run would create, has none and no line); warnings go to stderr."""
    for inst in _NAMES[result.kind](result):
        if inst.mig_uuid:
            text(inst.mig_uuid)
    for warning in getattr(result, "warnings", ()):
        text(f"warning: {warning.file}: {warning.reason}", err=True)


# The instances each kind of result shows (see options.NAME_COMMANDS).
_NAMES: dict[str, Callable[[Any], tuple[InstanceView, ...]]] = {
    InstanceList.kind: lambda result: result.instances,
    InstanceDetail.kind: lambda result: (result.instance,),
    Allocation.kind: lambda result: result.instances,
    Release.kind: lambda result: result.released,
    Reclaim.kind: lambda result: result.reclaimed,
    Forget.kind: lambda result: result.instances,
}

# How a table shows each kind of result: the one registry `emit` dispatches through. Kinds whose
# modules load only for their own command (config, demo, recover and adopt) are spelled out
# rather than imported, so that other commands never pay for them.
_TABLES: dict[str, Callable[[Any, Look], None]] = {
    InstanceList.kind: _with_look(_instance_list),
    ProfileList.kind: _on_console(_profile_list),
    InstanceDetail.kind: _on_console(_detail),
    SimView.kind: _on_console(_sim_view),
    Allocation.kind: _with_look(_allocation),
    Release.kind: _with_look(_release),
    Reclaim.kind: _with_look(_reclaim),
    ActionReport.kind: _on_console(_actions),
    "Recovery": _on_console(_actions),
    "Adoption": _on_console(_actions),
    DoctorReport.kind: _on_console(_doctor),
    Forget.kind: _with_look(_forget),
    EventList.kind: _with_look(_events),
    # plain text: the exposition must reach stdout verbatim
    Metrics.kind: lambda result, look: _metrics(result),
    "Config": _on_console(_config),
    "DemoTranscript": _on_console(_demo_summary),
}
