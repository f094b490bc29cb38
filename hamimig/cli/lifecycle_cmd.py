"""`allocate`, `release`, `reclaim`, `reconcile` and `show`: the lifecycle commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli.context import execute

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.views import Result

LockTimeout = Annotated[
    float,
    typer.Option(
        "--lock-timeout", metavar="SECONDS", help="How long to wait for the node lock (exit 7)."
    ),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]


def locked(timeout: float, action: Callable[[Node], Result]) -> Callable[[Node], Result]:
    """Wrap a mutating command: its lock wait, and directories checked before any hardware."""

    def run(node: Node) -> Result:
        from hamimig.engine import validate

        node.lock_timeout = validate.timeout(timeout, "--lock-timeout")
        node.check_dirs()
        return action(node)

    return run


def _mig_uuid(value: str | None) -> str | None:
    """`--mig-uuid ""` is a mistake (an unset variable), not a lookup that finds nothing."""
    from hamimig.engine import validate

    return None if value is None else validate.nonempty(value, "--mig-uuid")


def allocate(
    ctx: typer.Context,
    pod: Annotated[str, typer.Option(help="The requesting pod, NAMESPACE/NAME.")],
    gpu: Annotated[str, typer.Option(help="NVML index or GPU UUID.")],
    profile: Annotated[str, typer.Option(help="GI profile name, e.g. 1g.10gb.")],
    placement: Annotated[
        str | None, typer.Option(help="START or START:SIZE; chosen when omitted.")
    ] = None,
    pod_uid: Annotated[str | None, typer.Option(help="The pod's UID.")] = None,
    container_index: Annotated[int, typer.Option(help="Container index in the pod.")] = 0,
    device_index: Annotated[int, typer.Option(help="Device index in the container.")] = 0,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Reuse an exact Idle match, else reclaim only the Idle instances in the way and create."""
    from hamimig.engine import allocate as allocation

    def action(node: Node) -> Result:
        request = allocation.make_request(
            pod, pod_uid, container_index, device_index, gpu, profile, placement
        )
        return allocation.allocate(node, request)

    execute(ctx, locked(lock_timeout, action))


def release(
    ctx: typer.Context,
    pod: Annotated[
        str | None, typer.Option(help="Release every instance of NAMESPACE/NAME.")
    ] = None,
    mig_uuid: Annotated[
        str | None, typer.Option("--mig-uuid", help="Release one instance.")
    ] = None,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Confirmed release: Active -> Idle; the GI/CI and CDI spec stay for reuse."""
    from hamimig.engine import allocate as allocation
    from hamimig.engine import maintenance

    def action(node: Node) -> Result:
        parsed = allocation.parse_pod(pod) if pod is not None else None
        return maintenance.release(node, parsed, _mig_uuid(mig_uuid))

    execute(ctx, locked(lock_timeout, action))


def reclaim(
    ctx: typer.Context,
    mig_uuid: Annotated[str | None, typer.Option("--mig-uuid", help="One instance.")] = None,
    gpu: Annotated[str | None, typer.Option(help="NVML index or GPU UUID.")] = None,
    placement: Annotated[
        str | None, typer.Option(help="Memory slices START or START:SIZE on --gpu.")
    ] = None,
    all_idle: Annotated[
        bool, typer.Option("--all-idle", help="Every Idle (and Error) instance on --gpu.")
    ] = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Destroy Idle (or Error) instances; never Active, never unmanaged ones."""
    from hamimig.engine import maintenance

    execute(
        ctx,
        locked(
            lock_timeout,
            lambda node: maintenance.reclaim(
                node, _mig_uuid(mig_uuid), gpu, placement, all_idle, dry_run
            ),
        ),
    )


def reconcile(
    ctx: typer.Context,
    pods: Annotated[
        str | None,
        typer.Option("--pods", metavar="FILE|-", help="Pods (kubectl -o json|yaml); '-' = stdin."),
    ] = None,
    kube: Annotated[bool, typer.Option("--kube", help="List pods through the API.")] = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """One pass: release instances whose pods are gone (with pods), retry queued CDI
    removals and the destruction of Error instances."""
    from hamimig.engine import maintenance
    from hamimig.engine.podsource import PodSource

    def action(node: Node) -> Result:
        return maintenance.reconcile(node, dry_run, PodSource(pods, kube))

    execute(ctx, locked(lock_timeout, action))


def show(
    ctx: typer.Context,
    mig_uuid: Annotated[str, typer.Argument(metavar="MIG_UUID", help="The instance.")],
) -> None:
    """One instance: record, live identity, CDI spec, owner."""
    from hamimig.engine import inventory, validate

    execute(
        ctx, lambda node: inventory.show_instance(node, validate.nonempty(mig_uuid, "MIG_UUID"))
    )


def register(app: typer.Typer) -> None:
    app.command("show")(show)
    app.command("allocate")(allocate)
    app.command("release")(release)
    app.command("reclaim")(reclaim)
    app.command("reconcile")(reconcile)
