"""What every table shows, declared once per result kind: a column is one `Col` line (its header,
the cell text of a row, where it shows, how it wraps and when a narrow terminal drops it), the
same names and values as the result's JSON keys; and the other text of the tables' pages. Text
and rich markup only: render.py draws them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from hamimig.engine.results import ActionReport, Forget, InstanceView
from hamimig.reports.views import CheckStatus, DoctorReport, GpuView, InstanceDetail, InstanceList
from hamimig.vocabulary import Outcome, State

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


class Look(NamedTuple):
    """How a table is drawn: `-o wide` (instance and event tables gain columns; every other
    table is as `-o table` draws it), `--no-headers`, whether the result is a dry run, the pods
    holding several of the instances shown, and the node's clock, read once and only when a
    cell shows an age (None: ages show as `-`)."""

    wide: bool = False
    headers: bool = True
    clock: Callable[[], float] | None = None
    dry_run: bool = False
    shared: frozenset[str] = frozenset()


LAST = 100
"""`Col.drop` from here on: dropped only below 80 columns, once the table has lost its rules."""


class Col(NamedTuple):
    """One column, declared as data so that every table fits a terminal by the same rules."""

    name: str
    get: Callable[[Any, Look], str]  # the plain text of a row's cell
    wide: bool | None = None  # True: only in `-o wide`; False: only in the plain table
    fold: int = 0  # wraps with long words folded, never cut (paths, names to copy); fitted as
    # at most this wide
    wrap: bool | None = None  # whether it wraps at all (default: fold columns do)
    cut: int | None = None  # cut to this width with `…`
    drop: int = 0  # the order a too narrow terminal leaves it out in (0: never), same ones together
    mark: Callable[[Any, str], str] | None = None  # rich markup around the escaped cell


_HEX_PREFIX = re.compile(r".{4}(?:[^0-9a-fA-F]*[0-9a-fA-F]){8}", re.DOTALL)
"""A MIG UUID's `MIG-` (any 4 characters) up to its 8th hex digit: the least a shortened MIG UUID
keeps, as many as a command that changes something wants of a prefix (a prefix unique today must
not name another instance tomorrow)."""


def short_uuids(uuids: list[str]) -> list[str]:
    """`uuids` cut to the shortest prefix unique among them (same length on every row, at least
    `_HEX_PREFIX`), with `…` for the rest, so a table row can be pasted into a command. Old-form
    UUIDs (`MIG-GPU-…`) stay whole: every instance on a GPU shares their digits."""
    known = sorted({u for u in uuids if u != "-"})
    if not known or any(u.startswith("MIG-GPU-") for u in known):
        return uuids

    def unique(length: int) -> bool:
        return len({u[:length] for u in known}) == len(known)

    def usable(uuid: str) -> int:
        """The length of the prefix of `uuid` that holds 8 hex digits after `MIG-`."""
        match = _HEX_PREFIX.match(uuid)
        return len(uuid) if match is None else match.end()

    length = max(usable(u) for u in known)
    while not unique(length) or any(u[length - 1 : length] == "-" for u in known):
        length += 1
        if length >= max(len(u) for u in known):
            return uuids
    return [u if u == "-" or len(u) <= length else u[:length] + "…" for u in uuids]


def uuid_floor(column: list[str]) -> int:
    """How wide a table keeps a MIG UUID column: its widest cell; half of it for UUIDs of
    drivers before R470, which fold onto two lines rather than take the table's width."""
    widest = max(map(len, column), default=0)
    return (widest + 1) // 2 if any(c.startswith("MIG-GPU-") for c in column) else widest


def owner(inst: InstanceView, slot: bool = False) -> str:
    """`ns/pod`, or `ns/pod[container/device]` with `slot`; for an instance a release just
    made (or found) Idle, the pod it was released from."""
    who = inst.owner
    if who is None and inst.outcome in (Outcome.RELEASED, Outcome.UNCHANGED):
        who = inst.last_owner
    if who is None:
        return "-"
    return str(who) if slot else f"{who.namespace}/{who.name}"


def _age(inst: InstanceView, look: Look) -> str:
    """`5m`, `3h12m`, `2d`, like kubectl's AGE (see `InstanceView.since`); `-` when unknown."""
    from hamimig.durations import format_duration, parse_time

    since = inst.since()
    start = None if since is None else parse_time(since)
    now = None if look.clock is None else look.clock()
    if start is None or now is None:
        return "-"
    if start > now + 1:  # a timestamp ahead of this node's clock: a skew to see, not "0s"
        return "<invalid>"
    return format_duration(now - start)


def processes(inst: InstanceView) -> str:
    """How many processes (compute, graphics, MPS) run on the MIG device (`-` when NVML could
    not say)."""
    if inst.processes is None:
        return "-"
    if not inst.processes:
        return "none"
    return str(inst.process_count) if inst.process_count is not None else "yes"


def _state(inst: InstanceView, look: Look) -> str:
    # STATE stays one plain word without headers (awk '$7=="Active"'); `-o wide` has a
    # PROCESSES column for that.
    busy = not look.wide and look.headers and inst.processes
    return inst.state.value + (" (busy)" if busy else "")


def _state_mark(inst: InstanceView, cell: str) -> str:
    # An instance reclaimed or forgotten is no longer what its last state says: dimmed.
    style = "dim" if inst.outcome in _GONE else STATE_STYLE.get(inst.state, "")
    return f"[{style}]{inst.state.value}[/]{cell[len(inst.state.value) :]}" if style else cell


def outcome(value: Outcome | None, dry_run: bool) -> str:
    if value is None:
        return "-"
    return WOULD.get(value, value.value) if dry_run else value.value


def _owner_cell(inst: InstanceView, look: Look) -> str:
    pod = None if inst.owner is None else f"{inst.owner.namespace}/{inst.owner.name}"
    return owner(inst, slot=look.wide or pod in look.shared)


def _opt(value: object) -> str:
    return "-" if value is None else str(value)


INSTANCE = (
    Col("GPU", lambda i, _: str(i.gpu_index)),
    Col("MIG UUID", lambda i, _: i.mig_uuid or "-"),
    Col("PROFILE", lambda i, _: i.profile, drop=LAST + 2),
    Col("PLACEMENT", lambda i, _: str(i.placement), drop=LAST + 1),
    Col("GI", lambda i, _: _opt(i.gpu_instance_id), drop=2),
    Col("CI", lambda i, _: _opt(i.compute_instance_id), drop=2),
    Col("STATE", _state, mark=_state_mark),
    Col(
        "OUTCOME",
        lambda i, look: outcome(i.outcome, look.dry_run),
        fold=len(Outcome.RECLAIMED.value),  # a dry run's `would …` wraps: laid out as the run
        mark=lambda i, c: c if i.outcome is None else f"[{OUTCOME_STYLE[i.outcome]}]{c}[/]",
    ),
    Col("OWNER", _owner_cell, fold=20),
    Col("CDI", lambda i, _: (i.cdi_device or "-").rsplit("=", 1)[-1][:16], False, cut=18, drop=1),
    Col("AGE", _age, drop=5),
    Col("POD UID", lambda i, _: (i.owner and i.owner.uid) or "-", True, drop=3),
    Col("PROCESSES", lambda i, _: processes(i), True, drop=4),
    Col("CDI DEVICE", lambda i, _: i.cdi_device or "-", True, fold=20, drop=1),
)
"""The instance table (`list`, `allocate`, `release`, `reclaim`, `forget`, demo steps): GPU, MIG
UUID (shortened where it must), STATE and OWNER always stay; OUTCOME only for what a command
did; AGE in the plain table only for `list`, always in `-o wide`, which is laid out like
kubectl's (no rules) and shows the owner's container and device index."""


def _changed(a: Any, look: Look) -> str:
    return "failed" if a.failed else ("would" if look.dry_run else "yes") if a.changed else "no"


ACTIONS = (
    Col("ACTION", lambda a, _: a.action),
    Col("CHANGED", _changed, drop=LAST),
    Col("MIG UUID", lambda a, _: a.mig_uuid or "-"),
    Col("GPU UUID", lambda a, _: a.gpu_uuid or "-", fold=12, drop=1),
    Col("PLACEMENT", lambda a, _: str(a.placement) if a.placement else "-", drop=2),
    Col("REASON", lambda a, _: a.reason, fold=30),
)
"""The plan or report of recover, adopt and reconcile."""


def _visible(text: str) -> str:
    """`text` with control characters (a terminal's escape sequences among them) shown as
    escapes: the journal is a file, and what a file says must not drive the terminal."""
    return "".join(c if " " <= c != "\x7f" else c.encode("unicode_escape").decode() for c in text)


def _event_time(event: dict[str, object], look: Look) -> str:
    """An event's time to the second (UTC, `Z`); `-o wide` shows it as the journal has it."""
    import datetime

    from hamimig.durations import parse_time

    text = _visible(str(event.get("time")))
    when = parse_time(text)
    if look.wide or when is None:
        return text
    try:
        moment = datetime.datetime.fromtimestamp(when, datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):  # a valid time whose UTC year is not 1-9999
        return text
    return f"{moment.year:04d}" + moment.strftime("-%m-%dT%H:%M:%SZ")


def _field(key: str) -> Callable[[dict[str, object], Look], str]:
    def cell(event: dict[str, object], _: Look) -> str:
        value = event.get(key)
        if value is None or value == "":
            return "-"
        if key == "placement" and isinstance(value, dict):
            return _visible(f"{value.get('start')}:{value.get('size')}")
        return _visible(str(value))

    return cell


def _event_reason(event: dict[str, object], look: Look) -> str:
    reason = _field("reason")(event, look)
    if event.get("outcome") == "failed":
        error = _visible(str(event.get("error") or ""))
        reason = f"FAILED: {error}" if reason == "-" else f"{reason}; FAILED: {error}"
    if event.get("cdi") == "queued" and "queued" not in reason:
        reason = f"{reason} (CDI spec removal queued)"  # said even where CDI is left out
    return reason


def _failed(event: dict[str, object], cell: str) -> str:
    return f"[bold red]{cell}[/]" if event.get("outcome") == "failed" else cell


EVENTS = (
    Col("TIME", _event_time),
    # A failed step's ACTION is red, and its REASON starts `FAILED:` (said without colour too).
    Col("ACTION", _field("action"), mark=_failed),
    Col("MIG UUID", _field("migUUID")),
    Col("GPU", _field("gpuIndex"), drop=7),
    Col("PROFILE", _field("profile"), drop=5),
    Col("PLACEMENT", _field("placement"), drop=4),
    Col("POD", _field("pod"), fold=20),
    Col("STATE", _field("state"), drop=8),
    Col("CDI", _field("cdi"), drop=6),
    Col("COMMAND", _field("command"), drop=3),
    Col("REASON", _event_reason, fold=20),
    Col("PID", _field("pid"), True, drop=2),
    Col("GPU UUID", _field("gpuUUID"), True, drop=1),
)
"""`events`: TIME, ACTION, MIG UUID (shortened), POD and REASON always stay."""


def _wrapping(*cols: Col) -> tuple[Col, ...]:
    """A table whose every column wraps (its cells fold where the width runs out)."""
    return tuple(c._replace(wrap=True) for c in cols)


PROFILES = _wrapping(
    Col("PROFILE", lambda p, _: p.name),
    Col("ID", lambda p, _: str(p.id)),
    # `3g.40gb` takes 3 of the GPU's compute slices but 4 of its memory slices (`0:4`).
    Col("COMPUTE SLICES", lambda p, _: str(p.slice_count)),
    Col("MEMORY MiB", lambda p, _: str(p.memory_mb)),
    Col("FREE/TOTAL", lambda p, _: f"{p.free_instances}/{p.max_instances}"),  # as nvidia-smi
    Col("MEMORY SLICES (placement start:size)", lambda p, _: " ".join(map(str, p.placements))),
)


def sim_rows(state: Any) -> list[tuple[Any, Any, Any]]:
    """`sim show`'s rows: (GPU, GI, CI), None where a GPU has no GI or a GI no CI."""
    return [
        (gpu, gi, ci)
        for gpu in state.gpus
        for gi in [*gpu.gis] or [None]
        for ci in [*(gi.cis if gi else ())] or [None]
    ]


def _busy(row: tuple[Any, Any, Any], _: Look) -> str:
    from hamimig.sim.ops import BusyKind

    _, gi, ci = row
    busy = [f"{k.value} processes" for k in BusyKind if ci is not None and k in ci.busy]
    return ", ".join([*busy, *(["GI held"] if gi and gi.held else [])]) or "-"


def _mig(row: tuple[Any, Any, Any], _: Look) -> str:
    pending = " (reset pending)" if row[0].mig_current != row[0].mig_pending else ""
    return ("on" if row[0].mig_current else "off") + pending


def _of(n: int, get: Callable[[Any], object]) -> Callable[[tuple[Any, ...], Look], str]:
    """The cell of part `n` of a `sim show` row (GPU, GI, CI), `-` where there is none."""
    return lambda row, _: "-" if row[n] is None else str(get(row[n]))


SIM = _wrapping(
    Col("GPU", _of(0, lambda g: g.index)),
    Col("MODEL", _of(0, lambda g: g.model)),
    Col("MIG", _mig),
    Col("GI", _of(1, lambda gi: gi.id)),
    Col("PROFILE ID", _of(1, lambda gi: gi.profile_id)),
    Col("PLACEMENT", _of(1, lambda gi: f"{gi.start}:{gi.size}")),
    Col("CI", _of(2, lambda ci: ci.id)),
    Col("MIG UUID", _of(2, lambda ci: ci.mig_uuid)),  # wraps, as MIG UUIDs do in any table
    Col("BUSY", _busy),
)
"""`sim show`: one row per compute instance (per GI without one, per GPU without GIs)."""

CHECK_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skipped": "dim"}

DOCTOR = (
    # Check names, paths and commands are copied: they fold where the width runs out, never cut.
    Col("CHECK", lambda c, _: c.name, fold=1),
    Col(
        "STATUS",
        lambda c, _: c.status.value.upper(),
        mark=lambda c, cell: f"[{CHECK_STYLE[c.status.value]}]{cell}[/]",
    ),
    Col("DETAIL", lambda c, _: c.message, fold=1),
    Col("FIX", lambda c, _: c.hint or "-", fold=1),
)


def detail(result: InstanceDetail) -> dict[str, str]:
    """`show`'s fields, in order."""
    inst = result.instance
    return {
        "MIG UUID": inst.mig_uuid or "-",
        "state": inst.state.value,
        "GPU": f"{inst.gpu_index} ({inst.gpu_uuid})",
        "profile": inst.profile,
        "placement": str(inst.placement),
        "GI / CI": f"{inst.gpu_instance_id} / {inst.compute_instance_id}",
        "owner": "-" if inst.owner is None else str(inst.owner),
        "pod UID": (inst.owner and inst.owner.uid) or "-",
        "processes": processes(inst),
        "created": inst.created_at or "-",
        "updated": inst.updated_at or "-",
        "idle since": inst.idle_since or "-",
        "CDI device": inst.cdi_device or "-",
        "CDI spec": result.cdi_spec or "-",
        "record": result.record or "-",
        "error": inst.error or "-",
    }


def doctor_summary(result: DoctorReport) -> str:
    ok, warn, fail, skipped = (result.count(s) for s in CheckStatus)
    summary = f"{ok} ok, {warn} warn, {fail} fail" + (f", {skipped} skipped" if skipped else "")
    if result.exit_code:
        return f"[bold red]{summary}: not healthy[/] (exit {result.exit_code})"
    if warn:
        return f"[yellow]{summary}: healthy, with warnings[/]"
    return f"[green]{summary}: healthy[/]"


def forgotten(result: Forget, escape: Callable[[str], str]) -> list[str]:
    """One short line (markup) per dropped file, and its note (the JSON has the paths)."""
    verb = "would forget" if result.dry_run else "forgot"
    lines = []
    for item in result.forgotten:
        if item.intent is not None:
            line = f"{verb} intent {item.intent}"
        else:
            files = "record and CDI spec" if item.cdi_spec else "record"
            named = item.mig_uuid or (item.record or "").rsplit("/", 1)[-1]  # by file name
            line = f"{verb} {named} ({item.state or 'unreadable'}): its {files}"
        if item.unreadable:
            line += f" [yellow](unreadable: {escape(item.unreadable)})[/]"
        lines += [line, *([f"[yellow]note:[/] {escape(item.note)}"] if item.note else [])]
    return lines


def _value(setting: Any, _: Look) -> str:
    return setting.value if isinstance(setting.value, str) else json.dumps(setting.value)


def config_columns(fits: bool) -> tuple[Col, ...]:
    """`config show`: what it exists to show is never cut: keys stay on one line where the
    terminal `fits` them beside VALUE and SOURCE, and everything folds where the width runs
    out."""
    return (
        Col("SETTING", lambda s, _: s.key, fold=1, wrap=not fits),
        Col("VALUE", _value, fold=1),
        Col("SOURCE", lambda s, _: s.source, fold=1),
    )


_DONE_WORDS = {"restore-idle": "restored Idle", "restore-active": "restored Active"}
"""How the summary names a restore that changed something (in a real run)."""


def action_summary(result: ActionReport) -> str:
    """The one summary line under the action table (its wording: docs/formats.md, "States and
    actions"); a failed action is never counted as changed."""
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


STATE_GLYPH = {s: "X" if s is State.UNREADABLE else s.value[0] for s in State}
"""The letter that marks each state on the slice map, where colour alone would not tell them
apart (NO_COLOR, a monochrome terminal, a screenshot in a ticket)."""


def queued_note(result: InstanceList) -> str:
    names = ", ".join(q.mig_uuid for q in result.queued_removals)
    return (
        f"note: the CDI specs of {len(result.queued_removals)} destroyed instance(s) are still "
        f"published, their removal queued ({names}): 'hamimig reconcile' retries it"
    )


def mig_modes(gpu: GpuView) -> str:
    """`MIG enabled`, and the mode after the next GPU reset when that differs."""
    now = f"MIG {gpu.mig_mode.value}"
    if gpu.mig_pending is gpu.mig_mode:
        return now
    return f"{now}, {gpu.mig_pending.value} after the next GPU reset"


def slice_map(gpu: GpuView, instances: list[InstanceView], escape: Callable[[str], str]) -> str:
    """Three lines per GPU under its title: the memory slices' numbers; the GI occupying each
    slice (`GI4` on its first slice, `…` on the others, `·` when free); and the state of that
    GI as a letter (`STATE_GLYPH`), so that the map reads the same without colour (NO_COLOR).
    `slice_legend` explains the glyphs."""
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
    title = f"[bold]GPU {gpu.index}[/] {escape(gpu.model)} ({mig_modes(gpu)})"
    if gpu.mig_mode.value != "enabled":
        return title
    lines = [title, f"  memory slice {header.rstrip()}", f"{'':15}{'|'.join(cells)}"]
    if instances:
        lines.append(f"  {'state':13}{' '.join(states).rstrip()}")
    return "\n".join(lines)


def slice_legend(instances: list[InstanceView]) -> str:
    """The slice maps' key: what a cell shows, and the letter of each state on the maps."""
    shown = [s for s in State if any(i.state is s for i in instances)]
    states = ", ".join(f"{STATE_GLYPH[s]}={s.value}" for s in shown)  # a pair never wraps
    return "legend: GI<n>=GPU instance n starts here, …=it goes on, ·=free" + (
        f"; state: {states}" if states else ""
    )
