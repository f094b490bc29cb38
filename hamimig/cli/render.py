"""The one place that prints: JSON, YAML or rich tables for every result, and errors.

rich and yaml are imported only inside the functions that need them, so `hamimig --help` and
`-o json` never pay for rich's table machinery. What each table shows is declared in
`hamimig.cli.tables`; `_table` draws every table.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sys
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec

from hamimig.cli import tables
from hamimig.cli.tables import LAST, STATE_STYLE, Col, Look
from hamimig.cli.tables import short_uuids as _short_uuids
from hamimig.engine import results as r
from hamimig.errors import HamimigError
from hamimig.reports import views as v
from hamimig.vocabulary import Outcome

if TYPE_CHECKING:
    from rich.console import Console

    from hamimig.rehearsal.demo import DemoStep, DemoTranscript
    from hamimig.reports.settings import ConfigView


_P = ParamSpec("_P")


def _tolerates_closed_output(fn: Callable[_P, None]) -> Callable[_P, None]:
    """A reader that stops early (`| head`) is not a failure: the change is made whether or
    not anyone reads the report, so the exit status stays the command's own. Flushed here so a
    closed pipe shows up now, not as "Exception ignored" at exit."""

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
        with contextlib.suppress(OSError, ValueError):
            try:
                stream.flush()
            except BrokenPipeError:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)


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


@_tolerates_closed_output
def emit(
    result: r.Result, fmt: str, *, headers: bool = True, clock: Callable[[], float] | None = None
) -> None:
    """A result as JSON, YAML, or the table registered for its kind in `_TABLES` (`table`, or
    `wide`: see `Look`)."""
    if fmt in ("json", "yaml"):
        _dump(result.to_json(), fmt)
    elif fmt == "name" and result.kind in _NAMES:
        _names(result)
    elif result.kind in _TABLES:
        # A table `-o wide` changes, piped without COLUMNS, is drawn at its natural width.
        draw, wide = _TABLES[result.kind]
        clock = clock and functools.cache(clock)  # read once, and only if a cell shows an age
        look = Look(wide=bool(wide) and fmt == "wide", headers=headers, clock=clock)
        console = None if wide is None else _console(_UNBOUNDED if look.wide else _PIPED_WIDTH)
        draw(console, result, look)
    else:  # a result without a table of its own still shows everything it has
        _console().print_json(json.dumps(result.to_json()))


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
        _instances(console, "", step.instances, Look())


def _demo_summary(console: Console, result: DemoTranscript, look: Look) -> None:
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


def _metrics(_: None, result: v.Metrics, look: Look) -> None:
    if result.path is None:
        sys.stdout.write(result.text)
    else:
        text(f"wrote {result.series} series to {result.path}")
    for warning in result.warnings:  # stderr: never mixed into an exposition on stdout
        text(f"warning: {warning.file}: {warning.reason}", err=True)


_PIPED_WIDTH = 250
_UNBOUNDED = 10_000
"""A width no line reaches: a table this wide is drawn at its natural width, never cut."""


def _console(piped_width: int = _PIPED_WIDTH) -> Console:
    """A console as wide as the terminal (or COLUMNS), `piped_width` when piped or captured
    without COLUMNS (never truncate what scripts may grep)."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            # rich's own handler exits with status 1; the command's status must survive.
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "standard output is closed")

    console = PipeConsole(highlight=False, soft_wrap=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = PipeConsole(highlight=False, soft_wrap=False, width=piped_width)
    return console


_NARROW = 80
"""Below this width tables may lose their rules and, last, the columns dropped from `LAST` on."""
_UUID = "MIG UUID"
Cells = dict[str, list[str]]


def _fit(
    width: int, boxed: bool | None, cols: Sequence[Col], cells: Cells, keep: Collection[str]
) -> tuple[Cells, bool, bool]:
    """The columns a table shows on a console `width` wide, whether it has rules, and whether
    they fit (`keep` is never left out). Layouts go from fullest to narrowest (whole then short
    UUIDs, `drop` groups left out in turn, rules and `LAST` given up below `_NARROW`): the first
    that fits wins, else the last, so a table loses what matters least first."""
    drops, groups = _drop_groups(cols, cells, keep)
    shortened = {**cells, _UUID: _short_uuids(cells[_UUID])} if _UUID in cells else cells
    ruled = boxed is not False
    passes = [(ruled, cells, drops), (ruled, shortened, drops)]
    if ruled and (boxed is None or width < _NARROW):  # None: rules where they fit, any width
        passes += [(False, cells, drops), (False, shortened, drops)]
    if not boxed or width < _NARROW:  # without what is kept at 80 columns: where it must be
        passes.append((False, shortened, groups))
    shown = cells
    for ruled, candidate, dropping in passes:
        shown = dict(candidate)
        for group in ([], *dropping):
            shown = {name: column for name, column in shown.items() if name not in group}
            if _needed(cols, shown, ruled) <= width:
                return shown, ruled, True
    return shown, ruled, False


def _drop_groups(
    cols: Sequence[Col], cells: Cells, keep: Collection[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """The groups of columns a narrow table drops, in order: before `LAST` (a prefix of them, as
    the ranks are sorted), and all of them."""
    ranks = sorted({c.drop for c in cols if c.drop and c.name in cells and c.name not in keep})
    groups = [[c.name for c in cols if c.drop == n and c.name not in keep] for n in ranks]
    return groups[: sum(n < LAST for n in ranks)], groups


def _needed(cols: Sequence[Col], shown: Cells, ruled: bool) -> int:
    """How wide `shown` is: a folding column as its `fold` at most, any other as its widest."""
    from rich.cells import cell_len

    floor = {c.name: c.fold for c in cols if c.fold}
    if _UUID in shown:
        floor[_UUID] = max(tables.uuid_floor(shown[_UUID]), len(_UUID))
    natural = {name: max(map(cell_len, [name, *column])) for name, column in shown.items()}
    total = sum(min(width, floor.get(name, width)) for name, width in natural.items())
    return total + (3 * len(shown) + 1 if ruled else 2 * (len(shown) - 1))


def _table(
    console: Console,
    title: str,
    cols: Sequence[Col],
    items: Sequence[Any],
    look: Look,
    fit: bool = False,
    keep: Collection[str] = (),
    boxed: bool | None = True,
) -> Cells:
    """The one table builder: the columns of `cols` that `look` shows, as they declare, one row
    per item, under `title` (printed as lines of its own: rich would pad it with spaces to the
    table's width). With `fit`, the columns and rules `_fit` chooses for the console (`boxed`:
    rules if they fit). Returns the cells shown."""
    from rich.box import HEAVY_HEAD
    from rich.table import Table

    cols = [c for c in cols if c.wide in (None, look.wide)]
    cells = {c.name: [c.get(item, look) for item in items] for c in cols}
    ruled, fits = True, None
    if fit:  # no layout fits: all cells fold where folding ones would get under 10 columns
        cells, ruled, fits = _fit(console.width, boxed, cols, cells, keep)
        squeezed = [c._replace(fold=min(c.fold, 10)) for c in cols]
        fits = fits or _needed(squeezed, cells, ruled) <= console.width
    table = Table(header_style="bold", box=HEAVY_HEAD if ruled else None, pad_edge=ruled)
    cols = [c for c in cols if c.name in cells]
    for c in cols:
        table.add_column(c.name, **_column(c, cells[c.name], fits))
    for n, item in enumerate(items):
        row = [(c, _escape(cells[c.name][n])) for c in cols]
        table.add_row(*(c.mark(item, cell) if c.mark else cell for c, cell in row))
    if title:
        _wrapped(console, title, "table.title")
    console.print(table)
    return cells


def _column(c: Col, column: list[str], fits: bool | None) -> dict[str, Any]:
    """How rich draws `c`: where the layout `fits`, whole MIG UUIDs (or prefixes) keep their
    width; where none does, every cell and header folds; not fitted (None), what wraps folds."""
    from rich.cells import cell_len

    widest = max(map(cell_len, [c.name, *column]))
    whole = fits is True and c.name == _UUID and tables.uuid_floor(column) >= widest
    wraps = (bool(c.fold) if c.wrap is None else c.wrap) or (c.name == _UUID and not whole)
    no_wrap = fits is not False and not wraps  # `…` only in a `cut` column or one that fits
    overflow = "ellipsis" if c.cut or no_wrap else "fold"
    return dict(
        no_wrap=no_wrap, overflow=overflow, max_width=c.cut, min_width=widest if whole else None
    )


def _wrapped(console: Console, plain: str, style: str = "", indent: int = 0) -> None:
    """`plain` (not markup) wrapped to the console's width, long words folded, and without the
    space rich leaves at the end of each line it breaks; lines after the first indented by
    `indent`, so that one item of a list reads as one."""
    from rich.text import Text

    width = max(console.width - indent, 1)
    for n, line in enumerate(Text(plain, style=style).wrap(console, width, overflow="fold")):
        line.rstrip()
        console.print(Text(" " * indent) + line if n else line)


def _after(console: Console, result: Any) -> None:
    """What follows a result's table: what it skipped, its notes, warnings and failure."""
    for s in getattr(result, "skipped", ()):
        if isinstance(result, r.ActionReport):
            console.print(f"skipped GPU {s.index} ({s.uuid}): {s.reason}")
        else:
            _wrapped(console, f"skipped {s.mig_uuid}: {s.reason}", indent=2)
    for note in getattr(result, "notes", ()):
        console.print(f"[yellow]note:[/] {note}")
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {_escape(w.file)}: {_escape(w.reason)}")
    if getattr(result, "failed", None):
        console.print(f"[bold red]failed:[/] {result.failed}")


def _instance_cols(
    instances: Sequence[r.InstanceView], look: Look, age: bool
) -> tuple[list[Col], Look]:
    """The instance table's columns (`tables.INSTANCE`): OUTCOME only for what a command did,
    the plain table's AGE only with `age`; and `look` knowing the pods that hold several of
    `instances` (their owner shows its container and device index)."""
    pods = [f"{i.owner.namespace}/{i.owner.name}" for i in instances if i.owner is not None]
    outcomes = any(i.outcome is not None for i in instances)
    skip = {*(() if outcomes else ("OUTCOME",)), *(() if age or look.wide else ("AGE",))}
    cols = [c for c in tables.INSTANCE if c.name not in skip and c.wide in (None, look.wide)]
    return cols, look._replace(shared=frozenset(p for p in pods if pods.count(p) > 1))


def _instances(
    console: Console, title: str, instances: Sequence[r.InstanceView], look: Look, age: bool = False
) -> bool:
    """The instance table under `title`; whether it shortened MIG UUIDs to fit. `-o wide` shows
    more than the plain table, never less: it keeps every column the plain one keeps at that
    width, and leaves out only its own extras."""
    if not instances:
        console.print(f"{title}: none")
        return False
    cols, look = _instance_cols(instances, look, age)
    keep: set[str] = set()
    if look.wide:
        plain = look._replace(wide=False)
        plain_cols, _ = _instance_cols(instances, plain, age)
        shown = {c.name: [c.get(i, plain) for i in instances] for c in plain_cols}
        fitted, _, _ = _fit(console.width, True, plain_cols, shown, ())
        keep = {"CDI DEVICE" if name == "CDI" else name for name in fitted}
        if look.headers and any(i.processes for i in instances):
            keep.add("PROCESSES")  # the plain table's `(busy)`
    cells = _table(console, title, cols, instances, look, True, keep, not look.wide)
    return _UUID in cells and cells[_UUID] != [i.mig_uuid or "-" for i in instances]


_ACTED = {  # a kind's title: in a dry run, in a real one
    r.Release.kind: ("would release (dry run): these go Idle", "released (now Idle)"),
    r.Reclaim.kind: (
        "would reclaim (dry run: nothing changed)",
        "reclaimed (destroyed: no longer on the node)",
    ),
}


def _acted(console: Console, result: r.Release | r.Reclaim, look: Look) -> None:
    """What release or reclaim did (OUTCOME) or would do. A table too narrow for whole MIG
    UUIDs is followed by the ones acted on, whole, so that a prefix given on the command line
    is never all the operator sees of what was changed."""
    shown, release = _NAMES[result.kind](result), isinstance(result, r.Release)
    title = _ACTED[result.kind][not result.dry_run]
    verb = tables.outcome(Outcome.RELEASED if release else Outcome.RECLAIMED, result.dry_run)
    if release and all(i.outcome is Outcome.UNCHANGED for i in shown):
        title = "already released (Idle): nothing changed" if shown else title
    if _instances(console, title, shown, look._replace(dry_run=result.dry_run)):
        for inst in shown:
            if inst.mig_uuid:
                _wrapped(console, f"{verb} {inst.mig_uuid}")
    for inst in shown:
        if inst.outcome is Outcome.FAILED:
            _wrapped(console, f"failed {inst.mig_uuid}: {inst.error}", indent=2)
    _after(console, result)


def _allocation(console: Console, result: r.Allocation, look: Look) -> None:
    """The sentence, then the instance table (its OUTCOME: created, reused or unchanged)."""
    inst, dry_run = result.instance, result.dry_run
    held = result.outcome is Outcome.UNCHANGED
    how = "already held" if held else tables.outcome(result.outcome, dry_run)
    console.print(
        f"{how}: {inst.mig_uuid or 'a new instance'} ({inst.profile} at {inst.placement} on "
        f"GPU {inst.gpu_index}) for {tables.owner(inst)}"
        + (" (dry run: nothing changed)" if dry_run else "")
    )
    _instances(console, "", result.instances, look._replace(dry_run=dry_run))
    if result.reclaimed:
        first = "would reclaim first" if dry_run else "reclaimed to make room"
        console.print(f"{first}: " + ", ".join(result.reclaimed))
    if inst.cdi_device:
        console.print(f"CDI device: {inst.cdi_device}")
    _after(console, result)


def _actions(console: Console, result: r.ActionReport, look: Look) -> None:
    title = f"{result.kind.lower()}{' (dry run: nothing changed)' if result.dry_run else ''}"
    if not result.actions:
        console.print(f"{title}: nothing to change")
    else:
        _table(console, title, tables.ACTIONS, result.actions, Look(dry_run=result.dry_run), True)
        _wrapped(console, tables.action_summary(result))
    _after(console, result)


def _config(console: Console, result: ConfigView, look: Look) -> None:
    # What `config show` exists to show is never cut: keys stay on one line where VALUE and
    # SOURCE keep room beside them (10 characters each, and the rules).
    widest = max((len(s.key) for s in result.settings), default=0)
    cols = tables.config_columns(fits=console.width >= widest + 30)
    _table(console, f"configuration ({result.path})", cols, result.settings, look)


def _detail(console: Console, result: v.InstanceDetail, look: Look) -> None:
    """`show`: every field of one instance, one a line; paths and CDI names fold, never cut."""
    from rich.table import Table

    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    style = STATE_STYLE.get(result.instance.state, "")
    for key, value in tables.detail(result).items():
        mark = key == "state" and style
        table.add_row(key, f"[{style}]{value}[/]" if mark else _escape(value))
    console.print(table)
    _after(console, result)


def _instance_list(console: Console, result: v.InstanceList, look: Look) -> None:
    instances = result.instances
    if not look.headers:
        return _rows_only(result, look)
    if instances:
        _instances(console, "MIG instances", instances, look, age=True)
    else:
        console.print("no MIG instances")
    if not console.is_terminal:  # piped: one greppable line per GPU
        for gpu in result.gpus:
            console.print(f"GPU {gpu.index} {gpu.uuid} {gpu.model} {tables.mig_modes(gpu)}")
    else:
        for gpu in result.gpus:
            on_gpu = [i for i in instances if i.gpu_index == gpu.index]
            console.print(tables.slice_map(gpu, on_gpu, _escape))
        enabled = {gpu.index for gpu in result.gpus if gpu.mig_mode.value == "enabled"}
        if enabled:
            _wrapped(console, tables.slice_legend([i for i in instances if i.gpu_index in enabled]))
    _after(console, result)
    if result.queued_removals:
        _wrapped(console, tables.queued_note(result))


def _rows_only(result: v.InstanceList, look: Look) -> None:
    """`list --no-headers`: one instance a line, every cell one word, for awk and cut; the rest
    goes to stderr."""
    if not result.instances:
        text("no MIG instances", err=True)
    else:
        cols, look = _instance_cols(result.instances, look, True)
        columns = [[c.get(i, look) for i in result.instances] for c in cols]
        widths = [max(map(len, column)) for column in columns]
        rows = zip(*columns, strict=True)
        lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
        text("\n".join(line.rstrip() for line in lines))
    for warning in result.warnings:
        text(f"warning: {warning.file}: {warning.reason}", err=True)
    if result.queued_removals:
        text(tables.queued_note(result), err=True)


def _profile_list(console: Console, result: v.ProfileList, look: Look) -> None:
    for gpu in result.gpus:
        title = f"GPU {gpu.index}  {gpu.model}  {gpu.uuid}"
        _table(console, title, tables.PROFILES, gpu.profiles, look)
    _after(console, result)


def _sim_view(console: Console, result: v.SimView, look: Look) -> None:
    if result.message:  # a change: say what happened; `sim show` prints the whole node
        console.print(result.message)
        return
    state = result.state
    _table(console, f"simulated node {result.path}", tables.SIM, tables.sim_rows(state), look)
    for f in state.faults:
        on = "" if f.gpu is None else f" on GPU {f.gpu}"
        console.print(f"fault: {f.action} {f.op} ({f.error}) x{f.times}, skip {f.skip}{on}")
    if state.calls:
        calls = ", ".join(f"{k}={n}" for k, n in sorted(state.calls.items()))
        console.print(f"NVML calls: {calls}")


def _doctor(console: Console, result: v.DoctorReport, look: Look) -> None:
    where = f"simulated node {result.sim}" if result.sim else "this node"
    _table(console, f"doctor: {where}", tables.DOCTOR, result.checks, look)
    console.print(tables.doctor_summary(result))


def _escape(text: str) -> str:
    """Paths and messages are data, not rich markup (`[` in a file name must print as is)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _forget(console: Console, result: r.Forget, look: Look) -> None:
    """The instance table of what was forgotten (OUTCOME `forgotten`), then one short line per
    dropped file (the JSON has the paths)."""
    if result.instances:
        title = "would forget (dry run: nothing changed)"
        if not result.dry_run:
            title = "forgotten (ownership dropped; a live instance is now Unmanaged)"
        _instances(console, title, result.instances, look._replace(dry_run=result.dry_run))
    for line in tables.forgotten(result, _escape):
        console.print(line)
    _after(console, result)
    if not result.dry_run:
        console.print("the hardware was not touched: see 'hamimig list'")


def _events(console: Console, result: v.EventList, look: Look) -> None:
    events = result.events
    if not events:
        console.print(f"no events{f' in {result.path}' if result.path else ''} match")
    else:
        _table(console, "", tables.EVENTS, events, look, True, boxed=None)
        if result.matched > len(events):
            older = f"{result.matched - len(events)} older matching event(s) not shown"
            console.print(f"{older}: --limit N, a filter or -o json")
    _after(console, result)


def _names(result: Any) -> None:
    """`-o name`: the MIG UUID of each instance shown, one a line on stdout (an orphan GI, or
    the instance a dry run would create, has none and no line); warnings go to stderr."""
    for inst in _NAMES[result.kind](result):
        if inst.mig_uuid:
            text(inst.mig_uuid)
    for warning in getattr(result, "warnings", ()):
        text(f"warning: {warning.file}: {warning.reason}", err=True)


# The instances each kind of result shows (see options.NAME_COMMANDS).
_NAMES: dict[str, Callable[[Any], tuple[r.InstanceView, ...]]] = {
    v.InstanceList.kind: lambda result: result.instances,
    v.InstanceDetail.kind: lambda result: (result.instance,),
    r.Allocation.kind: lambda result: result.instances,
    r.Release.kind: lambda result: result.released,
    r.Reclaim.kind: lambda result: result.reclaimed,
    r.Forget.kind: lambda result: result.instances,
}

# How a table shows each kind of result, and whether `-o wide` changes it (None: plain text,
# without a console): the one registry `emit` dispatches through. Kinds whose modules load only
# for their own command (config, demo, recover, adopt) are spelled out rather than imported.
_TABLES: dict[str, tuple[Callable[..., None], bool | None]] = {
    v.InstanceList.kind: (_instance_list, True),
    v.ProfileList.kind: (_profile_list, False),
    v.InstanceDetail.kind: (_detail, False),
    v.SimView.kind: (_sim_view, False),
    r.Allocation.kind: (_allocation, True),
    r.Release.kind: (_acted, True),
    r.Reclaim.kind: (_acted, True),
    r.ActionReport.kind: (_actions, False),
    "Recovery": (_actions, False),
    "Adoption": (_actions, False),
    v.DoctorReport.kind: (_doctor, False),
    r.Forget.kind: (_forget, True),
    v.EventList.kind: (_events, True),
    "Config": (_config, False),
    "DemoTranscript": (_demo_summary, False),
    v.Metrics.kind: (_metrics, None),  # the exposition must reach stdout verbatim
}
