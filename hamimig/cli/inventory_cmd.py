"""`list` and `profiles`: what is on the node, read-only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli import completion, options
from hamimig.cli.context import execute
from hamimig.cli.options import GpuFilter, choices
from hamimig.errors import UsageError
from hamimig.vocabulary import State

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


def list_(
    ctx: typer.Context,
    gpu: GpuFilter = None,
    state: Annotated[
        list[State] | None,
        typer.Option(
            case_sensitive=False,
            metavar="STATE",
            help=f"Only instances in this state (repeat for any of several): {choices(State)}.",
        ),
    ] = None,
    pod: Annotated[
        str | None, typer.Option(metavar=options.POD, help="Only the instances this pod holds.")
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            metavar=options.PROFILE,
            help="Only this GI profile (1g.10gb).",
            autocompletion=completion.profiles,
        ),
    ] = None,
    no_headers: Annotated[
        bool,
        typer.Option(
            "--no-headers", help="Tables without title, header row or borders: one instance a line."
        ),
    ] = False,
) -> None:
    """Every MIG instance: records joined with the live layout.

    Each with its owner, state, CDI device and age, on every GPU of the node.
    Filters combine: an instance is listed when it passes all of them."""
    from hamimig.reports import inventory

    def run(node: Node) -> Result:
        if profile is not None and not profile.strip():
            raise UsageError("--profile must not be empty")
        wanted = inventory.ListFilter(
            states=frozenset(state or ()),
            pod=None if pod is None else options.pod_ref(pod),
            profile=profile,
        )
        return inventory.list_instances(node, options.gpu_filter(gpu), wanted)

    execute(ctx, run, headers=not no_headers)


def profiles(ctx: typer.Context, gpu: GpuFilter = None) -> None:
    """GI profiles and legal placements per GPU.

    What nvidia-smi mig -lgip -lgipp shows: how many more of each fit (FREE/TOTAL), and the
    memory and compute slices of each."""
    from hamimig.reports import inventory

    execute(ctx, lambda node: inventory.list_profiles(node.hardware(), options.gpu_filter(gpu)))
