"""`events`: the event journal (why an instance appeared, moved or went), read-only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli import completion, options
from hamimig.cli.context import execute, globals_of
from hamimig.cli.options import GpuFilter
from hamimig.errors import UsageError

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


def events(
    ctx: typer.Context,
    mig_uuid: Annotated[
        str | None,
        typer.Option(
            metavar="MIG_UUID",
            help=(
                "Only this instance: its MIG UUID, a prefix of it or its CDI device name "
                "(mig-<sha256>) or a prefix of that; it may be long gone."
            ),
            autocompletion=completion.instances,
        ),
    ] = None,
    pod: Annotated[
        str | None,
        typer.Option(
            metavar=options.POD,
            help="Only events of this pod and of the instances it held (their reclaim too).",
        ),
    ] = None,
    gpu: GpuFilter = None,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION|TIME",
            help="Only events this recent (90s, 30m, 2h, 1h30m) or since an RFC 3339 time.",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="Only the newest N of the events that match (a table: 500 unless given).",
        ),
    ] = None,
) -> None:
    """Lifecycle events from the journal, oldest first.

    Every change hamimig made to an instance: created, reused, released, reclaimed (and for
    which request), destroyed, failed, restored, adopted, forgotten; its CDI spec written,
    removed or queued. Read-only: takes no lock and needs no GPU. A GPU index matches the
    index the event recorded (indexes can change across reboots; GPU UUIDs do not)."""
    from hamimig.reports import events as journal

    def run(node: Node) -> Result:
        if limit is not None and not 0 <= limit <= journal.MAX_LIMIT:
            raise UsageError(f"--limit must be between 0 and {journal.MAX_LIMIT}, not {limit}")
        if mig_uuid is not None and not mig_uuid.strip():
            raise UsageError("--mig-uuid must not be empty")
        shown = limit
        if shown is None and globals_of(ctx).output in ("table", "wide"):
            shown = journal.TABLE_LIMIT  # a table of 100,000 rows helps nobody: the newest
        query = journal.EventQuery(
            mig_uuid=mig_uuid,
            pod=None if pod is None else "/".join(options.pod_ref(pod)),
            gpu=options.gpu_filter(gpu),
            since=None if since is None else _since(node, since),
            limit=shown,
        )
        return journal.list_events(node, query)

    execute(ctx, run)


def _since(node: Node, text: str) -> float:
    """`--since`: a duration back from the node's clock, or an RFC 3339 time."""
    from hamimig.durations import DurationError, parse_duration, parse_time

    when = parse_time(text)
    if when is not None:
        return when
    try:
        return node.now() - parse_duration(text)
    except DurationError as exc:
        if text.strip()[:1].isdigit() and "-" not in text and ":" not in text:
            raise UsageError(f"--since: {exc}") from None  # a duration, but a bad one
        raise UsageError(
            f"--since: {text!r} is neither a duration (90s, 30m, 2h, 1h30m) nor an RFC 3339 "
            "time with an offset (2026-12-01T10:00:00Z)"
        ) from None
