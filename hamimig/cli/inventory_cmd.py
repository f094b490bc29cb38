"""`list` and `profiles`: what is on the node, read-only."""

from __future__ import annotations

from typing import Annotated

import typer

from hamimig.cli.context import execute

GpuOption = Annotated[
    str | None, typer.Option("--gpu", help="Only this GPU: NVML index or GPU UUID.")
]


def list_(
    ctx: typer.Context,
    gpu: GpuOption = None,
    state: Annotated[
        str | None,
        typer.Option(help="Only instances in this state (Active, Idle, Unmanaged, ...)."),
    ] = None,
) -> None:
    """Every MIG instance on the node: records joined with the live layout."""
    from hamimig.engine import inventory

    execute(ctx, lambda node: inventory.list_instances(node, gpu, state))


def profiles(ctx: typer.Context, gpu: GpuOption = None) -> None:
    """GI profiles and legal placements per GPU (like nvidia-smi mig -lgip -lgipp)."""
    from hamimig.engine import inventory

    execute(ctx, lambda node: inventory.list_profiles(node.hardware(), gpu))


def register(app: typer.Typer) -> None:
    app.command("list")(list_)
    app.command("profiles")(profiles)
