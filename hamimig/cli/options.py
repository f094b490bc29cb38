"""The options several commands share, declared once, and the parsing of option values into the
engine's typed values.

The engine never sees a flag: it takes an `Owner`, a GPU reference, a `PlacementSpec`, a
reclaim target or a `PodSource`. Which flags may be combined, and what a bad value is called in
an error message, is decided here and in the command modules.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hamimig.errors import UsageError
from hamimig.vocabulary import Setting

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.podsource import PodSource
    from hamimig.engine.requests import Owner, PlacementSpec
    from hamimig.engine.results import Result


SETTING_FLAGS = {
    Setting.NODE_NAME: "--node NAME or NODE_NAME",
    Setting.POD_LIST: "--pods FILE",
    Setting.SIMULATED_NODE: "--sim PATH or HAMIMIG_SIM",
}
"""How the CLI sets each node-wide input that a lower layer may find wrong."""


class ArgumentsCommand(typer.core.TyperCommand):
    """A command with positional arguments, whose help names them as options name their values:
    `hamimig show [OPTIONS] MIG_UUID`, not `{MIG_UUID}`, and `MIG_UUID` in the Arguments list,
    not `MIG_UUID <str>`."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        opts: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((param.metavar or record[0], record[1]))
            else:
                opts.append(record)
        for title, rows in (("Arguments", arguments), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class Output(str, enum.Enum):
    """`-o/--output`: how a result is printed. `wide` is a table with more columns where a
    result shows instances (list, release, reclaim), and the plain table everywhere else."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


LockTimeout = Annotated[
    float,
    typer.Option(
        "--lock-timeout", metavar="SECONDS", help="How long to wait for the node lock (exit 7)."
    ),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]
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
GpuFilter = Annotated[
    str | None,
    typer.Option("--gpu", metavar="GPU", help="Only this GPU: NVML index or GPU UUID."),
]
Gpu = Annotated[str, typer.Option("--gpu", metavar="GPU", help="NVML index or GPU UUID.")]
GpuOrNone = Annotated[
    str | None, typer.Option("--gpu", metavar="GPU", help="NVML index or GPU UUID.")
]
MigUuid = Annotated[
    str | None,
    typer.Option(
        "--mig-uuid",
        metavar="MIG_UUID",
        help=(
            "One instance: its MIG UUID, a unique prefix of it (MIG- and at least 8 hex "
            "digits) or its CDI device name (mig-<sha256> or KIND=mig-<sha256>)."
        ),
    ),
]
PLACEMENT = "PLACEMENT"
"""The metavariable of every `--placement`: START or START:SIZE, in memory slices."""
POD = "NS/NAME"
"""The metavariable of every `--pod`: the pod's namespace and name."""
PROFILE = "PROFILE"
"""The metavariable of every `--profile`: a GI profile name such as 1g.10gb."""


def locked(
    timeout: float, action: Callable[[Node], Result], dry_run: bool = False
) -> Callable[[Node], Result]:
    """Wrap a mutating command: its lock wait, and directories checked before any hardware.

    A dry run takes no lock (the engine plans on a snapshot without it, and creates neither
    the state directory nor the lock file) and the node is marked read-only, so a step it
    tried to apply would fail before changing anything. `--lock-timeout` is still checked
    and the directories still judged: a dry run refuses what the real run would refuse.
    """

    def run(node: Node) -> Result:
        from hamimig.engine import validate

        timeout_s = validate.timeout(timeout, "--lock-timeout")
        node.check_dirs()
        if dry_run:
            node.read_only = True
        else:
            node.lock_timeout = timeout_s
        return action(node)

    return run


def pod_source(
    node: Node, pods: str | None, kube: bool, assume_no_pods: bool, required: bool
) -> PodSource | None:
    """The one pod source the flags name, or None; usage errors before the lock is taken.

    `recover` and `adopt` require one: acting without knowing which instances running pods
    hold is exactly how a tenant's slice gets handed to another.
    """
    from hamimig.engine.podsource import PodSource

    given = sum((pods is not None, kube, assume_no_pods))
    if given > 1:
        offered = (
            "--pods FILE|-, --kube or --assume-no-pods" if required else "--pods FILE|- or --kube"
        )
        raise UsageError(f"give only one pod source: {offered}")
    if given == 0:
        if required:
            raise UsageError(
                "a pod source is required: --pods FILE|- (kubectl get pods -o json), --kube, "
                "or --assume-no-pods when no pod on this node holds a MIG instance"
            )
        return None
    if pods is not None:
        if pods == "":
            raise UsageError("--pods needs a file name, or '-' for stdin")
        return PodSource.pod_list(pods)
    if kube:
        if not node.node_name:
            raise UsageError("--kube needs this node's name: --node NAME or NODE_NAME")
        return PodSource.kube_api()
    return PodSource.no_pods()


def owner(
    pod: str, pod_uid: str | None = None, container_index: int = 0, device_index: int = 0
) -> Owner:
    """`--pod NAMESPACE/NAME` with its optional uid and slot, checked as Kubernetes would."""
    from hamimig.engine import validate
    from hamimig.engine.requests import Owner

    namespace, name = pod_ref(pod)
    validate.index(container_index, "--container-index")
    validate.index(device_index, "--device-index")
    uid = None if pod_uid is None else validate.pod_uid(pod_uid, "--pod-uid")
    return Owner(namespace, name, uid, container_index, device_index)


def pod_ref(text: str) -> tuple[str, str]:
    """`NAMESPACE/NAME` as Kubernetes spells them (a DNS-1123 label and subdomain)."""
    from hamimig.engine import validate

    parts = text.split("/")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"invalid pod {text!r}: use NAMESPACE/NAME")
    return validate.namespace(parts[0]), validate.pod_name(parts[1])


def gpu_ref(text: str) -> int | str:
    """`--gpu`: an NVML index or a GPU UUID."""
    from hamimig.engine.node import parse_gpu_ref

    return parse_gpu_ref(text)


def placement(text: str | None) -> PlacementSpec | None:
    """`--placement START` or `START:SIZE` (memory slices)."""
    from hamimig.engine.node import parse_placement

    return None if text is None else parse_placement(text)


def mig_uuid(value: str | None, flag: str = "--mig-uuid") -> str | None:
    """An empty MIG UUID is a mistake (an unset variable), not a lookup that finds nothing."""
    from hamimig.engine import validate

    return None if value is None else validate.nonempty(value, flag)


def duration(text: str, flag: str) -> int:
    """A duration option (`90s`, `30m`, `1h30m`, or whole seconds), in whole seconds."""
    from hamimig.durations import DurationError, parse_duration

    try:
        return parse_duration(text)
    except DurationError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def instant(text: str, flag: str) -> float:
    """An RFC 3339 time with its offset (`2026-12-01T10:00:00Z`), in seconds since the epoch."""
    from hamimig.durations import parse_time

    parsed = parse_time(text)
    if parsed is None:
        raise UsageError(
            f"{flag}: {text!r} is not an RFC 3339 time with an offset (2026-12-01T10:00:00Z)"
        )
    return parsed
