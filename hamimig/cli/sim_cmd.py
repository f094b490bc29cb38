"""`sim …`: build and manipulate a simulated node (docs/simulator.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli import completion, options
from hamimig.cli.context import execute
from hamimig.cli.options import Gpu, GpuFilter, choices
from hamimig.errors import UsageError
from hamimig.sim.ops import (
    DRIVER_VERSION,
    MAX_FAULT_CALLS,
    MAX_SIM_GPUS,
    SIMULATED_NVML,
    BusyKind,
    FaultAction,
    FaultOp,
    SimModel,
)
from hamimig.vocabulary import FileOpName

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.reports.views import SimView

# Help without rich, as every command's: the root's rich_markup_mode holds for its groups.
app = typer.Typer(help="Manage a simulated MIG node (needs --sim PATH).", no_args_is_help=True)
fault_app = typer.Typer(
    help="Inject or clear NVML and file-operation faults.", no_args_is_help=True
)
app.add_typer(fault_app, name="fault")


def _sim(node: Node) -> Path:
    if node.sim is None:
        raise UsageError("sim commands need --sim PATH (or HAMIMIG_SIM)")
    return node.sim


@app.command("init")
def init(
    ctx: typer.Context,
    model: Annotated[
        SimModel, typer.Option(metavar="MODEL", help=f"The GPU board: {choices(SimModel)}.")
    ],
    count: Annotated[
        int, typer.Option(metavar="N", help=f"Number of GPUs (1 to {MAX_SIM_GPUS}).")
    ] = 1,
    driver_version: Annotated[
        str,
        typer.Option(
            metavar="VERSION",
            help="The driver NVML reports; before 470, MIG UUIDs read MIG-GPU-<uuid>/<gi>/<ci>.",
        ),
    ] = DRIVER_VERSION,
) -> None:
    """Create the simulated node: N GPUs of MODEL, MIG enabled.

    The GPUs start with no instances."""
    from hamimig.rehearsal import simulator

    def action(node: Node) -> SimView:
        if not 1 <= count <= MAX_SIM_GPUS:
            raise UsageError(f"--count must be between 1 and {MAX_SIM_GPUS}, not {count}")
        return simulator.sim_init(_sim(node), model.value, count, driver_version)

    execute(ctx, action)


@app.command("show")
def show(ctx: typer.Context) -> None:
    """GPUs, GI/CI layout, busy marks, faults and NVML call counts."""
    from hamimig.rehearsal import simulator

    execute(ctx, lambda node: simulator.sim_show(_sim(node)))


@app.command("create")
def create(
    ctx: typer.Context,
    gpu: Gpu,
    profile: Annotated[
        str,
        typer.Option(
            metavar=options.PROFILE,
            help="Profile, e.g. 1g.10gb.",
            autocompletion=completion.profiles,
        ),
    ],
    placement: Annotated[
        str, typer.Option(metavar=options.PLACEMENT, help="Memory slices: START or START:SIZE.")
    ],
    no_ci: Annotated[bool, typer.Option("--no-ci", help="Create only the GI.")] = False,
    ci_slices: Annotated[
        int | None, typer.Option(metavar="N", help="Compute slices per CI (default: all).")
    ] = None,
    ci_count: Annotated[int, typer.Option(metavar="N", help="How many CIs in the GI.")] = 1,
) -> None:
    """Make an instance behind hamimig's back.

    As an external tool or a leftover from before would: no record, no CDI spec."""
    from hamimig.rehearsal import simulator

    execute(
        ctx,
        lambda node: simulator.sim_create(
            _sim(node), gpu, profile, placement, no_ci, ci_slices, ci_count
        ),
    )


@app.command("busy")
def busy(
    ctx: typer.Context,
    mig_uuid: Annotated[
        str,
        typer.Option(
            metavar="MIG_UUID",
            help=(
                "The instance: its MIG UUID, a unique prefix of it (MIG- and at least 8 hex "
                "digits) or its CDI device name (mig-<sha256>) or a unique prefix of that."
            ),
            autocompletion=completion.instances,
        ),
    ],
    kind: Annotated[
        BusyKind | None,
        typer.Option(
            metavar="KIND",
            help=f"The kind of process NVML lists on the instance: {choices(BusyKind)} "
            "(default compute; with --clear, only that kind's mark goes).",
        ),
    ] = None,
    gi_only: Annotated[
        bool, typer.Option("--gi-only", help="Only the GI is held (a monitoring client).")
    ] = False,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the busy marks.")] = False,
) -> None:
    """A process holds the instance: destroying it fails with IN_USE."""
    from hamimig.rehearsal import simulator

    def action(node: Node) -> SimView:
        if gi_only and kind is not None:
            raise UsageError("--gi-only holds the GI and runs no process: drop --kind")
        uuid = options.mig_uuid(mig_uuid)
        assert uuid is not None
        return simulator.sim_busy(
            _sim(node), uuid, gi_only, clear, kind, lambda: node.config().cdi_kind
        )

    execute(ctx, action)


@app.command("reset")
def reset(ctx: typer.Context, gpu: Gpu) -> None:
    """Every instance on the GPU vanishes, as after a GPU reset."""
    from hamimig.rehearsal import simulator

    execute(ctx, lambda node: simulator.sim_reset(_sim(node), gpu))


@app.command("mig-mode")
def mig_mode(
    ctx: typer.Context,
    gpu: Gpu,
    enable: Annotated[
        bool | None, typer.Option("--enable/--disable", help="Turn MIG on or off.")
    ] = None,
    pending: Annotated[
        bool, typer.Option("--pending", help="Only request the change (it waits for a GPU reset).")
    ] = False,
) -> None:
    """Set MIG mode."""
    from hamimig.rehearsal import simulator

    def action(node: Node) -> SimView:
        if enable is None:
            raise UsageError("say --enable or --disable")
        return simulator.sim_mig_mode(_sim(node), gpu, enable, pending)

    execute(ctx, action)


@app.command("clock")
def clock(
    ctx: typer.Context,
    advance: Annotated[
        str | None,
        typer.Option(metavar="DURATION", help="Move the clock forward: 90s, 30m, 2h, 1h30m."),
    ] = None,
    set_to: Annotated[
        str | None,
        typer.Option("--set", metavar="TIME", help="Set the clock: 2026-12-01T10:00:00Z."),
    ] = None,
) -> None:
    """Read or move the node's clock without waiting.

    The clock that idle ages and timestamps on this simulated node follow."""
    from hamimig.rehearsal import simulator

    def action(node: Node) -> SimView:
        if advance is not None and set_to is not None:
            raise UsageError("--advance and --set exclude each other: give one")
        seconds = None if advance is None else options.duration(advance, "--advance")
        moment = None if set_to is None else options.instant(set_to, "--set")
        return simulator.sim_clock(_sim(node), seconds, moment)

    execute(ctx, action)


@fault_app.command(
    "add", epilog="NVML functions the simulator implements: " + ", ".join(SIMULATED_NVML) + "."
)
def fault_add(
    ctx: typer.Context,
    op: Annotated[
        FaultOp,
        typer.Option(
            metavar="OP",
            help=f"A file operation ({choices(FileOpName)}) or an NVML function the simulator "
            "implements (listed below).",
        ),
    ],
    error: Annotated[
        str | None,
        typer.Option(
            metavar="ERROR",
            help="An NVML error name (IN_USE, UNKNOWN and the like) or an errno name (EIO).",
        ),
    ] = None,
    action: Annotated[
        FaultAction,
        typer.Option(
            metavar="ACTION", help=f"What the fault does when it fires: {choices(FaultAction)}."
        ),
    ] = FaultAction.RAISE,
    times: Annotated[int, typer.Option(metavar="N", help="Fire on this many matching calls.")] = 1,
    skip: Annotated[
        int, typer.Option(metavar="N", help="Let this many matching calls pass first.")
    ] = 0,
    gpu: GpuFilter = None,
) -> None:
    """Inject a fault: a matching call fails or the process dies.

    The process dies before or after the call with --action crash-before or crash-after."""
    from hamimig.rehearsal import simulator

    def add(node: Node) -> SimView:
        if not 1 <= times <= MAX_FAULT_CALLS:
            raise UsageError(f"--times must be between 1 and {MAX_FAULT_CALLS}, not {times}")
        if not 0 <= skip <= MAX_FAULT_CALLS:
            raise UsageError(f"--skip must be between 0 and {MAX_FAULT_CALLS}, not {skip}")
        if error == "":
            raise UsageError("--error must not be empty: name an NVML error or an errno")
        return simulator.sim_fault_add(_sim(node), op.value, error, action.value, times, skip, gpu)

    execute(ctx, add)


@fault_app.command("clear")
def fault_clear(ctx: typer.Context) -> None:
    """Remove all faults."""
    from hamimig.rehearsal import simulator

    execute(ctx, lambda node: simulator.sim_fault_clear(_sim(node)))
