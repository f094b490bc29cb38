"""`forget`: drop one ownership record (with its CDI spec) or one intent, hardware untouched."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli import completion
from hamimig.cli.context import execute
from hamimig.cli.options import DryRun, LockTimeout
from hamimig.errors import UsageError

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


def forget(
    ctx: typer.Context,
    mig_uuid: Annotated[
        str | None,
        typer.Argument(
            metavar="MIG_UUID",
            help=(
                "The instance whose record to drop: its MIG UUID, a unique prefix of it (MIG- "
                "and at least 8 hex digits), its CDI device name (mig-<sha256>) or a unique "
                "prefix of that, or the record's file name (hami-owned-....json); a record that "
                "cannot be read by its device or file name, as doctor names it."
            ),
            autocompletion=completion.instances,
        ),
    ] = None,
    intent: Annotated[
        str | None, typer.Option(metavar="ID", help="Drop the intent <state-dir>/intent-ID.json.")
    ] = None,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Drop one record (and its CDI spec) or one intent.

    For when recovery refuses; the hardware is untouched (a live instance then shows as
    Unmanaged and recover preserves it)."""
    from hamimig.engine import forget as forgetting
    from hamimig.engine.requests import ByIntent, ByUuid

    def action(node: Node) -> Result:
        if (mig_uuid is None) == (intent is None):
            raise UsageError("say what to forget: MIG_UUID or --intent ID (exactly one)")
        target = ByUuid(mig_uuid) if mig_uuid is not None else ByIntent(intent or "")
        return forgetting.forget(node, target, dry_run)

    execute(ctx, action, "Forget")
