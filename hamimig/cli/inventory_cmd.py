"""`list` and `profiles`: what is on the node, read-only."""

from __future__ import annotations

from typing import Annotated

import typer

from hamimig.cli import options
from hamimig.cli.context import execute
from hamimig.cli.options import GpuFilter
from hamimig.vocabulary import State


def list_(
    ctx: typer.Context,
    gpu: GpuFilter = None,
    state: Annotated[
        State | None,
        typer.Option(
            case_sensitive=False,
            metavar="STATE",
            help="Only instances in this state: " + ", ".join(s.value for s in State) + ".",
        ),
    ] = None,
) -> None:
    """Every MIG instance on the node: records joined with the live layout."""
    from hamimig.reports import inventory

    execute(
        ctx,
        lambda node: inventory.list_instances(
            node, None if gpu is None else options.gpu_ref(gpu), state
        ),
    )


def profiles(ctx: typer.Context, gpu: GpuFilter = None) -> None:
    """GI profiles and legal placements per GPU (like nvidia-smi mig -lgip -lgipp)."""
    from hamimig.reports import inventory

    execute(
        ctx,
        lambda node: inventory.list_profiles(
            node.hardware(), None if gpu is None else options.gpu_ref(gpu)
        ),
    )


def register(app: typer.Typer) -> None:
    app.command("list")(list_)
    app.command("profiles")(profiles)
