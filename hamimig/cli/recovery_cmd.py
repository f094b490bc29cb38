"""`recover` and `adopt`: startup recovery and the adoption opt-in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli import options
from hamimig.cli.context import execute
from hamimig.cli.options import AssumeNoPods, DryRun, GpuFilter, Kube, LockTimeout, PodsFile
from hamimig.errors import UsageError

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


def recover(
    ctx: typer.Context,
    pods: PodsFile = None,
    kube: Kube = False,
    assume_no_pods: AssumeNoPods = False,
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt",
            help="HAMi exclusively owns the complete MIG layout: claim unmarked instances "
            "(the opt-in that adopt spells --exclusive-owner; in the config "
            "devices.nvidia.adoptExistingMIGInstances: true).",
        ),
    ] = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Startup recovery: restore what pods hold, reconcile records.

    Instances without a record are kept, unless adoption is enabled (--adopt); anything that
    cannot be verified exits 5 and changes nothing."""
    from hamimig.engine import recovery

    def action(node: Node) -> Result:
        return recovery.recover(node, options.needed_pod_source(node, ctx), adopt, dry_run)

    execute(ctx, action, "Recovery")


def adopt(
    ctx: typer.Context,
    pods: PodsFile = None,
    kube: Kube = False,
    assume_no_pods: AssumeNoPods = False,
    gpu: GpuFilter = None,
    exclusive_owner: Annotated[
        bool,
        typer.Option(
            "--exclusive-owner",
            help="HAMi exclusively owns the complete MIG layout on this node: the opt-in "
            "that recover spells --adopt (in the config "
            "devices.nvidia.adoptExistingMIGInstances: true).",
        ),
    ] = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Claim unmarked complete GI/CI pairs as Idle (needs opt-in).

    The opt-in: --exclusive-owner or devices.nvidia.adoptExistingMIGInstances: true."""
    from hamimig.engine import recovery

    def action(node: Node) -> Result:
        source = options.needed_pod_source(node, ctx)
        only = options.gpu_filter(gpu)
        try:
            return recovery.adopt_pairs(node, source, exclusive_owner, only, dry_run)
        except recovery.AdoptionNotEnabled as err:
            raise UsageError(
                "adopt needs the opt-in that HAMi exclusively owns the complete MIG layout on "
                "this node: --exclusive-owner or devices.nvidia.adoptExistingMIGInstances: true"
            ) from err

    execute(ctx, action, "Adoption")
