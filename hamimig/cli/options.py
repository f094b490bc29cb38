"""The options several commands share, declared once, and their parsing into the engine's typed
values: the engine never sees a flag, so which flags combine and how an error names a bad value
is decided here and in the command modules.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hamimig.cli import completion
from hamimig.cli.context import given_words
from hamimig.errors import UsageError
from hamimig.vocabulary import Setting

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.podsource import PodSource
    from hamimig.engine.requests import Owner, PlacementSpec


SETTING_FLAGS = {
    Setting.NODE_NAME: "--node NAME or NODE_NAME",
    Setting.POD_LIST: "--pods FILE|- or --kube",
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
    """`-o/--output`: how a result is printed (docs/reference.md); `name` is taken only by
    `NAME_COMMANDS`."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"
    NAME = "name"


def choices(values: Iterable[enum.Enum]) -> str:
    """An enumeration's values as an option's help lists them: `a, b, c`."""
    return ", ".join(v.value for v in values)


NAME_COMMANDS = ("list", "show", "allocate", "release", "reclaim", "forget")
"""The commands whose results are instances, the only ones `-o name` can print."""


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
    typer.Option(
        "--gpu",
        metavar="GPU",
        help="Only this GPU: NVML index or GPU UUID.",
        autocompletion=completion.gpus,
    ),
]
_GPU = typer.Option(
    "--gpu", metavar="GPU", help="NVML index or GPU UUID.", autocompletion=completion.gpus
)
Gpu = Annotated[str, _GPU]
GpuOrNone = Annotated[str | None, _GPU]
MigUuid = Annotated[
    str | None,
    typer.Option(
        metavar="MIG_UUID",
        help=(
            "One instance: its MIG UUID, a unique prefix of it (MIG- and at least 8 hex "
            "digits) or its CDI device name (mig-<sha256> or KIND=mig-<sha256>) or a unique "
            "prefix of that (mig- and at least 8 hex digits)."
        ),
        autocompletion=completion.instances,
    ),
]
PLACEMENT = "PLACEMENT"
"""The metavariable of every `--placement`: START or START:SIZE, in memory slices."""
POD = "NS/NAME"
"""The metavariable of every `--pod`: the pod's namespace and name."""
PROFILE = "PROFILE"
"""The metavariable of every `--profile`: a GI profile name such as 1g.10gb."""


def pod_source(node: Node, ctx: typer.Context) -> PodSource | None:
    """The pod source the flags name, else the configured default, else None; usage errors
    come before the lock. Commands taking `--assume-no-pods` require one, whatever the plan:
    only the pods say who holds an instance the records call Idle or Error."""
    from hamimig.engine.podsource import PodSource

    pods: str | None = ctx.params.get("pods")
    kube, assume_no_pods = (bool(ctx.params.get(n)) for n in ("kube", "assume_no_pods"))
    required = "assume_no_pods" in ctx.params
    given = sum((pods is not None, kube, assume_no_pods))
    if given > 1:
        offered = (
            "--pods FILE|-, --kube or --assume-no-pods" if required else "--pods FILE|- or --kube"
        )
        raise UsageError(f"give only one pod source: {offered}")
    if given == 0 and node.config().pod_source is None:  # else the default: kube
        if required:
            raise UsageError(_needs_pods(node, ctx))
        return None
    if pods == "":
        raise UsageError("--pods needs a file name, or '-' for stdin")
    if pods is not None:
        return PodSource.pod_list(pods)
    if assume_no_pods:
        return PodSource.no_pods()
    if not node.node_name and kube:
        raise UsageError("--kube needs this node's name: --node NAME or NODE_NAME")
    if not node.node_name:
        from hamimig.config import POD_SOURCE

        where = node.config().sources.get(POD_SOURCE, POD_SOURCE)
        raise UsageError(
            f"the default pod source (kube, from {where}) needs this node's name: "
            "--node NAME or NODE_NAME"
        )
    return PodSource.kube_api()


def needed_pod_source(node: Node, ctx: typer.Context) -> PodSource:
    """`pod_source` for a command that takes `--assume-no-pods`, which requires one."""
    source = pod_source(node, ctx)
    assert source is not None
    return source


def _needs_pods(node: Node, ctx: typer.Context) -> str:
    """The refusal, with a line that works on the node: the same command, with the options
    given on its command line (those choosing the node included), fed this node's pods."""
    import shlex

    name = shlex.quote(node.node_name) if node.node_name else "NODE"
    line = " ".join([*given_words(ctx.find_root()), ctx.info_name or "", *given_words(ctx)])
    return (
        "a pod source is required: --pods FILE|- (kubectl get pods -o json), --kube, or "
        "--assume-no-pods when no pod on this node holds a MIG instance the records call Idle "
        "or Error (HAMi's plugin hands those out by writing only the pod's annotation); e.g. "
        f"kubectl get pods -A -o json --field-selector spec.nodeName={name} | "
        f"hamimig --node {name} {line} --pods -"
    )


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


def gpu_filter(text: str | None) -> int | str | None:
    """`--gpu` where it filters: None for every GPU."""
    return None if text is None else gpu_ref(text)


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
