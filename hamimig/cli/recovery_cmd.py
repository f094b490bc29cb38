"""`recover` and `adopt`: startup recovery and the adoption opt-in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli.context import execute
from hamimig.cli.lifecycle_cmd import DryRun, LockTimeout, locked

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.views import Result

PodsFile = Annotated[
    str | None,
    typer.Option(
        "--pods",
        metavar="FILE|-",
        help="Pods as 'kubectl get pods -o json|yaml' prints them; '-' reads stdin.",
    ),
]
Kube = Annotated[
    bool, typer.Option("--kube", help="List this node's pods through the Kubernetes API.")
]
AssumeNoPods = Annotated[
    bool,
    typer.Option("--assume-no-pods", help="Assert that no pod on this node holds a MIG instance."),
]


def recover(
    ctx: typer.Context,
    pods: PodsFile = None,
    kube: Kube = False,
    assume_no_pods: AssumeNoPods = False,
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt",
            help="HAMi exclusively owns the complete MIG layout: claim unmarked instances.",
        ),
    ] = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Startup recovery: restore what pods hold, reconcile records, keep unknown instances."""
    from hamimig.engine import recovery
    from hamimig.engine.podsource import PodSource

    def action(node: Node) -> Result:
        return recovery.recover(node, PodSource(pods, kube, assume_no_pods), adopt, dry_run)

    execute(ctx, locked(lock_timeout, action))


def adopt(
    ctx: typer.Context,
    pods: PodsFile = None,
    kube: Kube = False,
    assume_no_pods: AssumeNoPods = False,
    gpu: Annotated[str | None, typer.Option(help="Only this GPU: index or UUID.")] = None,
    exclusive_owner: Annotated[
        bool,
        typer.Option(
            "--exclusive-owner",
            help="HAMi exclusively owns the complete MIG layout on this node (the opt-in).",
        ),
    ] = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Claim unmarked complete GI/CI pairs as Idle (needs the adoption opt-in)."""
    from hamimig.engine import recovery
    from hamimig.engine.podsource import PodSource

    def action(node: Node) -> Result:
        source = PodSource(pods, kube, assume_no_pods)
        return recovery.adopt_pairs(node, source, exclusive_owner, gpu, dry_run)

    execute(ctx, locked(lock_timeout, action))


def register(app: typer.Typer) -> None:
    app.command("recover")(recover)
    app.command("adopt")(adopt)
