"""The man page, generated from the Typer application itself, and the shell completion
scripts Typer generates (they call back into hamimig: `cli/completion.py`); a test regenerates
them to catch staleness. `scripts/gen-docs.py` writes them to `completions/` and `man/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

from hamimig import __version__
from hamimig.cli.completion import COMPLETE_VAR
from hamimig.cli.context import GLOBAL_OPTIONS
from hamimig.config import ENV_OVERRIDES

EXIT_CODES = (
    (0, "done (also a --dry-run whose plan the real run would carry out)"),
    (1, "internal error (a bug)"),
    (
        2,
        "usage: bad arguments, unknown GPU or profile, illegal placement, invalid pod file, "
        "missing opt-in or pod source, unusable state or CDI directory",
    ),
    (
        3,
        "conflict: the placement is blocked by an Active, Unmanaged or Error instance that "
        "cannot be destroyed; the pod's request clashes with another owner",
    ),
    (4, "hardware or I/O: an NVML call or a write failed; rolled back or left in Error"),
    (5, "unverifiable: state that cannot be verified; nothing was changed"),
    (6, "not found: no such MIG UUID or pod allocation"),
    (7, "busy: the node lock could not be taken in time"),
)


@dataclass(frozen=True)
class Opt:
    names: tuple[str, ...]
    help: str
    takes_value: bool
    metavar: str
    envvar: str | None
    choices: tuple[str, ...] = ()
    """The values an option accepts, when they are a fixed list (an `Enum` option)."""
    default: str | None = None
    """The default shown in the man page (none for flags and options without one)."""


@dataclass(frozen=True)
class Cmd:
    path: tuple[str, ...]
    help: str
    options: tuple[Opt, ...]
    arguments: tuple[str, ...]
    children: tuple[Cmd, ...]
    description: tuple[str, ...] = ()
    """The paragraphs of the help after its one-line summary `help`."""


def _first_line(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def _paragraphs(text: str | None) -> tuple[str, ...]:
    return tuple(" ".join(p.split()) for p in (text or "").strip().split("\n\n")[1:] if p.strip())


def _default(param: Any, takes_value: bool) -> str | None:
    value = param.default
    if not takes_value or value is None or isinstance(value, bool) or value in ((), []):
        return None
    return str(getattr(value, "value", value))


def _walk(command: Any, path: tuple[str, ...]) -> Cmd:
    options: list[Opt] = []
    arguments: list[str] = []
    for param in command.params:
        if path and param.name in GLOBAL_OPTIONS:
            continue  # documented once, under GLOBAL OPTIONS
        if type(param).__name__.endswith("Argument"):
            arguments.append((param.metavar or param.name or "ARG").upper())
            continue
        names = tuple(param.opts) + tuple(param.secondary_opts or ())
        takes_value = not getattr(param, "is_flag", False) and not param.secondary_opts
        envvar = param.envvar if isinstance(param.envvar, str) else None
        metavar = param.metavar or (param.name or "value").upper().replace("_", "-")
        choices = _choices(param) if takes_value else ()
        options.append(
            Opt(
                names,
                _first_line(param.help),
                takes_value,
                metavar,
                envvar,
                choices,
                default=_default(param, takes_value),
            )
        )
    options.append(Opt(("-h", "--help"), "Show the help and exit.", False, "", None))
    children = tuple(
        _walk(sub, (*path, name))
        for name, sub in sorted(getattr(command, "commands", {}).items())
        if not sub.hidden  # a hidden command is for scripts, not for people
    )
    return Cmd(
        path,
        _first_line(command.help),
        tuple(options),
        tuple(arguments),
        children,
        _paragraphs(command.help),
    )


def _choices(param: Any) -> tuple[str, ...]:
    described = getattr(param, "type_descriptor", None)
    if described is None or not described.is_choice or not described.choices:
        return ()
    return tuple(str(getattr(c, "value", c)) for c in described.choices)


def command_tree(app: typer.Typer) -> Cmd:
    return _walk(typer.main.get_command(app), ())


def _all(cmd: Cmd) -> list[Cmd]:
    out = [cmd]
    for child in cmd.children:
        out.extend(_all(child))
    return out


# --- man page --------------------------------------------------------------------------------


def _roff(text: str) -> str:
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def man_page(root: Cmd) -> str:
    out = [
        f'.TH HAMIMIG 1 "" "hamimig {__version__}" "User Commands"',
        ".SH NAME",
        "hamimig \\- administer HAMi's dynamic MIG instance lifecycle on a GPU node",
        ".SH SYNOPSIS",
        ".B hamimig",
        "[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
        ".br",
        ".B python \\-m hamimig",
        "[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
        ".SH DESCRIPTION",
        _roff(
            "hamimig implements the dynamic MIG instance lifecycle of HAMi on one GPU node: "
            "released instances stay Idle and are reused by the next request with the same "
            "GPU, placement and profile; durable ownership records, crash-safe allocation and "
            "reclamation, fail-closed restart recovery, opt-in adoption and one CDI spec per "
            "instance. Every command works on a simulated node with --sim PATH."
        ),
        ".SH GLOBAL OPTIONS",
        _roff(
            "They may also follow the command name, as kubectl's flags do; given twice, the "
            "last one wins."
        ),
    ]
    out += _man_options(root.options)
    out.append(".SH COMMANDS")
    for cmd in _all(root)[1:]:
        synopsis = " ".join(["hamimig", *cmd.path, *(f"\\fI{a}\\fR" for a in cmd.arguments)])
        out.append(f'.SS "{_roff(synopsis)}"')
        out.append(_roff(cmd.help) or "Command group.")
        for paragraph in cmd.description:
            out += [".PP", _roff(paragraph)]
        if cmd.children:
            out.append(".PP")
            out.append(_roff("Commands: " + ", ".join(c.path[-1] for c in cmd.children) + "."))
        out += _man_options(cmd.options)
    out.append(".SH EXIT STATUS")
    for code, text in EXIT_CODES:
        out += [".TP", f".B {code}", _roff(text)]
    out += [
        ".SH FILES",
        ".TP",
        ".I /var/run/hami/dynamic\\-mig\\-state/hami\\-owned\\-mig\\-<sha256>.json",
        _roff(
            "Ownership records (HAMi v1 format, mode 0600, directory 0750); intents, the CDI "
            "removal queue and the node lock live beside them."
        ),
        ".TP",
        ".I /var/run/cdi/hami\\-dynamic\\-mig\\-mig\\-<sha256>.json",
        _roff("One CDI spec per MIG instance (mode 0644)."),
        ".TP",
        ".I /etc/hamimig/config.yaml",
        _roff("Configuration; a missing file means defaults."),
        ".SH ENVIRONMENT",
    ]
    for opt in root.options:
        if opt.envvar:
            default = f" Default: {opt.default}." if opt.default else ""
            out += [
                ".TP",
                f".B {_roff(opt.envvar)}",
                _roff(f"Same as {max(opt.names, key=len)}.{default}"),
            ]
    for name, text in environment():
        out += [".TP", f".B {_roff(name)}", _roff(text)]
    out.append(".SH EXAMPLES")
    for comment, commands in EXAMPLES:
        out += [".PP", _roff(comment), ".PP", ".RS", ".nf"]
        out += [_roff(command) for command in commands]
        out += [".fi", ".RE"]
    out += [".SH SEE ALSO", "nvidia\\-smi(1), kubectl(1)", ""]
    return "\n".join(out)


_CONFIG_OVERRIDE_HELP = {
    "devices.nvidia.adoptExistingMIGInstances": (
        "true or false: the opt-in that HAMi exclusively owns the node's whole MIG layout "
        "(recover then adopts unmarked instances, adopt may run)"
    ),
    "cdi.enabled": "true or false; false is the legacy non-CDI mode: no spec files at all",
    "cdi.kind": "the CDI kind of the per-instance specs",
    "cdi.annotations": "true or false: write HAMi's device annotations (cdiVersion 0.6.0)",
    "cdi.baseSpec": (
        "auto, an absolute path or none: where the driver's container edits come from"
    ),
    "devices.nvidia.idleTTL": (
        "90s, 30m, 1h30m or whole seconds (0: off): reconcile reclaims Idle instances idle "
        "longer than this"
    ),
    "devices.nvidia.maxIdleInstancesPerGPU": (
        "a whole number (0: keep none): reconcile keeps at most this many Idle instances per GPU"
    ),
    "events.maxBytes": (
        "a size in bytes, 4Ki to 1Gi (16777216, 512Ki, 16Mi): the event journal rotates when an "
        "append would pass it"
    ),
    "pods.source": (
        "kube (the only default a pod source may have): the commands that take a pod source "
        "list the node's pods through the Kubernetes API unless one is given"
    ),
}


def environment() -> list[tuple[str, str]]:
    """Every environment variable hamimig reads besides the global options' own, with what it
    does (a test checks that the man page names every HAMIMIG_ variable the code reads)."""
    overrides = [
        (var, f"Overrides the config file's {key}: {_CONFIG_OVERRIDE_HELP[key]}.")
        for var, key in ENV_OVERRIDES.items()
    ]
    return [
        *overrides,
        (
            COMPLETE_VAR,
            "Set by the shell completion scripts in completions/ (complete_bash, complete_zsh "
            "or complete_fish): hamimig prints what completes the command line the script hands "
            "it, read from the records and a simulated node's file only, and changes nothing.",
        ),
        (
            "HAMIMIG_DEBUG",
            "Set and not empty: an internal error (exit 1) shows its Python traceback instead "
            "of the one-line message.",
        ),
        (
            "KUBECONFIG",
            "The kubeconfig that --kube reads outside a pod (default ~/.kube/config); it is "
            "never written.",
        ),
        (
            "KUBERNETES_SERVICE_HOST",
            "Set inside a pod: --kube uses the pod's service account instead of a kubeconfig.",
        ),
        (
            "COLUMNS",
            "The width that tables and the help fit; a table piped without it is as wide as "
            "its content.",
        ),
        (
            "NO_COLOR",
            "Set: no colour (the slice map's state letters and legend read the same without).",
        ),
        (
            "FORCE_COLOR",
            "Set: print as to a terminal (colour, the slice map) even when piped.",
        ),
    ]


EXAMPLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "What is on the node, and one instance in detail (a unique prefix of its MIG UUID "
        "will do):",
        ("hamimig list", "hamimig show MIG-24cc07bc"),
    ),
    (
        "One instance a line for scripts, filtered:",
        (
            "hamimig list --no-headers --state Active --state Idle",
            "hamimig list --no-headers --pod team-a/train-1 | awk '{print $2, $8}'",
        ),
    ),
    (
        "Startup recovery in the device plugin's init container, planned first:",
        (
            "hamimig --node gpu-1 recover --pods pods.json --dry-run",
            "NODE_NAME=gpu-1 hamimig recover --kube",
        ),
    ),
    (
        "Scripted maintenance: a dry run first (as JSON), then the real runs:",
        (
            "hamimig -o json reclaim --gpu 0 --all-idle --dry-run",
            "hamimig reclaim --gpu 0 --idle-older-than 2h",
            "hamimig reconcile --pods pods.json",
            "hamimig metrics --textfile /var/lib/node-exporter/hamimig.prom",
        ),
    ),
    (
        "Allocate and release by hand:",
        (
            "hamimig allocate --pod team-c/infer-2 --gpu 0 --profile 1g.10gb --dry-run",
            "hamimig release --pod team-c/infer-2",
        ),
    ),
    (
        "When recovery refuses a record that is simply wrong:",
        ("hamimig forget MIG-7e307a65-38c4-47cf-b8f4-fcf56ea6175e --dry-run",),
    ),
    (
        "Without a GPU: a simulated node with two H100s, or the narrated demo:",
        (
            "hamimig --sim /tmp/node.json sim init --model H100-SXM5-80GB --count 2",
            "hamimig --sim /tmp/node.json sim create --gpu 0 --profile 1g.10gb --placement 3",
            "hamimig demo",
        ),
    ),
)
"""The man page's EXAMPLES: commands of the README's runbook."""


def _man_options(options: tuple[Opt, ...]) -> list[str]:
    out: list[str] = []
    for opt in options:
        names = ", ".join(f"\\fB{_roff(n)}\\fR" for n in opt.names)
        if opt.takes_value:
            names += f" \\fI{_roff(opt.metavar)}\\fR"
        help_text = opt.help
        if opt.choices and not all(choice in opt.help for choice in opt.choices):
            help_text += f" One of: {', '.join(opt.choices)}."
        extra = [f"environment: {opt.envvar}"] if opt.envvar else []
        extra += [f"default: {opt.default}"] if opt.default else []
        if extra:
            help_text += f" [{'; '.join(extra)}]"
        out += [".TP", names, _roff(help_text)]
    return out


COMPLETIONS = {"bash": "hamimig.bash", "zsh": "_hamimig", "fish": "hamimig.fish"}
"""Each shell's completion script, by the file name its completion system looks for."""


def generate(app: typer.Typer) -> dict[str, str]:
    """Relative path -> content, for everything `scripts/gen-docs.py` writes."""
    from typer._completion_shared import get_completion_script

    scripts = {
        f"completions/{name}": get_completion_script(
            prog_name="hamimig", complete_var=COMPLETE_VAR, shell=shell
        )
        + "\n"
        for shell, name in COMPLETIONS.items()
    }
    return {**scripts, "man/hamimig.1": man_page(command_tree(app))}
