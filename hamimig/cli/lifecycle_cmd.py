"""`allocate`, `release`, `reclaim`, `reconcile` and `show`: the lifecycle commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli import completion, options
from hamimig.cli.context import execute
from hamimig.cli.options import (
    AssumeNoPods,
    DryRun,
    Gpu,
    GpuOrNone,
    Kube,
    LockTimeout,
    MigUuid,
    PodsFile,
)
from hamimig.errors import UsageError

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


def allocate(
    ctx: typer.Context,
    pod: Annotated[
        str, typer.Option(metavar=options.POD, help="The requesting pod: namespace/name.")
    ],
    gpu: Gpu,
    profile: Annotated[
        str,
        typer.Option(
            metavar=options.PROFILE,
            help="GI profile, e.g. 1g.10gb.",
            autocompletion=completion.profiles,
        ),
    ],
    placement: Annotated[
        str | None,
        typer.Option(
            metavar=options.PLACEMENT,
            help="Memory slices: START or START:SIZE; chosen when omitted.",
        ),
    ] = None,
    pod_uid: Annotated[str | None, typer.Option(metavar="UID", help="The pod's UID.")] = None,
    container_index: Annotated[
        int, typer.Option(metavar="N", help="Container index in the pod.")
    ] = 0,
    device_index: Annotated[
        int, typer.Option(metavar="N", help="Device index in the container.")
    ] = 0,
    pods: PodsFile = None,
    kube: Kube = False,
    assume_no_pods: AssumeNoPods = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Reuse an exact Idle match, else make room and create one.

    Making room reclaims only the Idle instances in the way; Active, Unmanaged and OrphanGI
    instances, and those a pod's annotation claims, are never touched (exit 3)."""
    from hamimig.engine import allocate as allocation
    from hamimig.engine.requests import AllocateRequest

    def action(node: Node) -> Result:
        request = AllocateRequest(
            owner=options.owner(pod, pod_uid, container_index, device_index),
            gpu=options.gpu_ref(gpu),
            profile=profile,
            placement=options.placement(placement),
        )
        return allocation.allocate(node, request, options.needed_pod_source(node, ctx), dry_run)

    execute(ctx, action, "Allocation")


def release(
    ctx: typer.Context,
    pod: Annotated[
        str | None, typer.Option(metavar=options.POD, help="Release every instance of this pod.")
    ] = None,
    pod_uid: Annotated[
        str | None,
        typer.Option(
            metavar="UID",
            help=(
                "With --pod: only this incarnation's instances (needed when the pod was "
                "recreated under the same name)."
            ),
        ),
    ] = None,
    mig_uuid: MigUuid = None,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Confirmed release: Active -> Idle, kept for reuse.

    The GI/CI and the CDI spec stay; the next matching request reuses them. Releasing again
    what is already released is exit 0, unchanged."""
    from hamimig.engine.release import release
    from hamimig.engine.requests import ByPod, ByUuid

    def action(node: Node) -> Result:
        uuid = options.mig_uuid(mig_uuid)
        if pod is not None and uuid is not None:
            raise UsageError("--pod and --mig-uuid exclude each other: give one")
        if pod is None and uuid is None:
            raise UsageError("say which instance to release: --pod NS/NAME or --mig-uuid UUID")
        if pod_uid is not None and pod is None:
            raise UsageError("--pod-uid names an incarnation of --pod NS/NAME: give --pod too")
        if uuid is not None:
            return release(node, ByUuid(uuid), dry_run)
        assert pod is not None
        owner = options.owner(pod, pod_uid)
        return release(node, ByPod(owner.namespace, owner.name, owner.uid), dry_run)

    execute(ctx, action, "Release")


def reclaim(
    ctx: typer.Context,
    mig_uuid: MigUuid = None,
    gpu: GpuOrNone = None,
    placement: Annotated[
        str | None,
        typer.Option(
            metavar=options.PLACEMENT, help="Memory slices on --gpu: START or START:SIZE."
        ),
    ] = None,
    all_idle: Annotated[
        bool, typer.Option("--all-idle", help="Every Idle (and Error) instance on --gpu.")
    ] = False,
    idle_older_than: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="The Idle instances on --gpu idle longer than this: 90s, 30m, 2h, 1h30m.",
        ),
    ] = None,
    pods: PodsFile = None,
    kube: Kube = False,
    assume_no_pods: AssumeNoPods = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """Destroy Idle or Error instances that no pod or process holds.

    One by --mig-uuid, or on --gpu those in a placement, all of them, or those idle too long."""
    from hamimig.engine.reclaim import reclaim
    from hamimig.engine.requests import AllIdle, ByUuid, IdleOlderThan, ReclaimTarget, Window

    def action(node: Node) -> Result:
        uuid = options.mig_uuid(mig_uuid)
        selectors = "--placement P, --all-idle or --idle-older-than DURATION"
        given = sum((placement is not None, all_idle, idle_older_than is not None))
        if uuid is not None and gpu is not None:
            raise UsageError("--mig-uuid and --gpu exclude each other: give one")
        if uuid is None and gpu is None:
            raise UsageError(f"say what to reclaim: --mig-uuid UUID, or --gpu GPU with {selectors}")
        target: ReclaimTarget
        if uuid is not None:
            if given:
                raise UsageError(
                    "--mig-uuid names one instance: drop --placement/--all-idle/--idle-older-than"
                )
            target = ByUuid(uuid)
        else:
            assert gpu is not None
            if given != 1:
                raise UsageError(f"with --gpu, give exactly one of {selectors}")
            window = options.placement(placement)
            ref = options.gpu_ref(gpu)
            if idle_older_than is not None:
                target = IdleOlderThan(ref, options.duration(idle_older_than, "--idle-older-than"))
            else:
                target = AllIdle(ref) if window is None else Window(ref, window)
        return reclaim(node, target, options.needed_pod_source(node, ctx), dry_run)

    execute(ctx, action, "Reclaim")


def reconcile(
    ctx: typer.Context,
    pods: PodsFile = None,
    kube: Kube = False,
    dry_run: DryRun = False,
    lock_timeout: LockTimeout = 60.0,
) -> None:
    """One maintenance pass: releases, retries, the idle policy.

    Release instances whose pods are gone (with pods), retry queued CDI removals and the
    destruction of Error instances; with pods, apply the idle policy (idleTTL,
    maxIdleInstancesPerGPU)."""
    from hamimig.engine.reconcile import reconcile

    def action(node: Node) -> Result:
        return reconcile(node, dry_run, options.pod_source(node, ctx))

    execute(ctx, action, "Reconcile")


def show(
    ctx: typer.Context,
    mig_uuid: Annotated[
        str,
        typer.Argument(
            metavar="MIG_UUID",
            help=(
                "The instance: its MIG UUID, a unique prefix of it, or its CDI device name "
                "(mig-<sha256> or KIND=mig-<sha256>) or a unique prefix of that."
            ),
            autocompletion=completion.instances,
        ),
    ],
) -> None:
    """One instance: record, live identity, CDI spec and owner.

    With the pod UID, the created, updated and idle-since times, and whether processes run on
    it."""
    from hamimig.engine import validate
    from hamimig.reports import inventory

    execute(
        ctx, lambda node: inventory.show_instance(node, validate.nonempty(mig_uuid, "MIG_UUID"))
    )
