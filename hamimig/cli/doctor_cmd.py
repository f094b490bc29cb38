"""`doctor`: what an operator checks before trusting a node, read-only."""

from __future__ import annotations

import typer

from hamimig.cli.context import execute


def doctor(ctx: typer.Context) -> None:
    """Check NVML, MIG modes, the state and CDI directories, records, specs and queues.

    Each check is ok, warn or fail with a one-line fix. Exits 0 when nothing fails; otherwise 4
    when a failing check is a hardware or I/O failure, else 5 (state that cannot be trusted).
    Changes nothing and takes no lock.
    """
    from hamimig.engine import doctor as checks

    execute(ctx, checks.run_checks)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
