"""Shell completions and the man page, generated from the Typer application itself.

Both are static text derived from the command tree, so they work without calling back into
hamimig (fast, and usable on a node where the tool is broken), and a test regenerates them to
catch staleness. `scripts/gen-docs.py` writes them to `completions/` and `man/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

from hamimig import __version__
from hamimig.cli.complete_cmd import COMMAND as COMPLETE
from hamimig.cli.complete_cmd import board_profiles
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
    suggested: tuple[str, ...] = ()
    """Values completion offers that are not the only ones accepted (`--profile`'s)."""
    from_records: str | None = None
    """The `hamimig __complete` kind that lists this option's values from the records."""


@dataclass(frozen=True)
class Cmd:
    path: tuple[str, ...]
    help: str
    options: tuple[Opt, ...]
    arguments: tuple[str, ...]
    children: tuple[Cmd, ...]
    description: tuple[str, ...] = ()
    """The paragraphs of the help after its one-line summary `help`."""

    @property
    def argument_from_records(self) -> str | None:
        """The `__complete` kind that lists the values of the command's positional argument."""
        return next((FROM_RECORDS[a] for a in self.arguments if a in FROM_RECORDS), None)


FROM_RECORDS = {"--profile": "profiles", "--mig-uuid": "mig-uuids", "MIG_UUID": "mig-uuids"}
"""Options (by name) and arguments (by metavariable) that completion fills from the records
through the hidden `hamimig __complete KIND` (cheap: records only, no NVML, no lock)."""


def _suggested() -> dict[str, tuple[str, ...]]:
    return {"--profile": board_profiles()}


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
    suggested = _suggested()
    for param in command.params:
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
                suggested=next((suggested[n] for n in names if n in suggested), ()),
                from_records=next((FROM_RECORDS[n] for n in names if n in FROM_RECORDS), None),
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


def _key(cmd: Cmd) -> str:
    return " ".join(cmd.path)


def _choices_by_name(root: Cmd) -> list[tuple[str, tuple[str, ...]]]:
    """Each option name that takes one of a fixed list of values, with the list; one name
    means one list wherever it appears (completion only sees the word before the cursor)."""
    found: dict[str, tuple[str, ...]] = {}
    for cmd in _all(root):
        for opt in cmd.options:
            for name in opt.names if opt.choices else ():
                assert found.get(name, opt.choices) == opt.choices, f"{name}: two choice lists"
                found[name] = opt.choices
    return sorted(found.items())


def _record_values_by_name(root: Cmd) -> list[tuple[str, tuple[str, ...], str]]:
    """Each option name whose values completion asks the records for: the name, the values
    every node knows (written into the script) and the `__complete` kind."""
    found: dict[str, tuple[tuple[str, ...], str]] = {}
    for cmd in _all(root):
        for opt in cmd.options:
            for name in opt.names if opt.from_records else ():
                entry = (opt.suggested, opt.from_records or "")
                assert found.get(name, entry) == entry, f"{name}: two value lists"
                found[name] = entry
    return [(name, suggested, kind) for name, (suggested, kind) in sorted(found.items())]


def _record_arguments(root: Cmd) -> list[tuple[str, list[str]]]:
    """Each `__complete` kind a positional argument takes, with the commands that take it."""
    kinds: dict[str, list[str]] = {}
    for cmd in _all(root):
        if cmd.argument_from_records:
            kinds.setdefault(cmd.argument_from_records, []).append(_key(cmd))
    return sorted(kinds.items())


# --- bash ------------------------------------------------------------------------------------

_BASH_RECORDS = [
    "_hamimig_records() {",
    "    # One value a line from the ownership records (hamimig __complete: no NVML, no lock);",
    "    # the state directory is the one the command line names (or its --sim node's), else",
    "    # HAMIMIG_STATE_DIR's.",
    "    local i v statedir=()",
    "    for ((i=1; i<COMP_CWORD; i++)); do",
    '        case "${COMP_WORDS[i]}" in',
    "            --state-dir|--sim)",
    '                v="${COMP_WORDS[i+1]}"',
    '                [[ "$v" == "=" ]] && v="${COMP_WORDS[i+2]}"',
    '                statedir+=("${COMP_WORDS[i]}" "${v/#\\~/$HOME}");;',
    '            --state-dir=*|--sim=*) statedir+=("${COMP_WORDS[i]}");;',
    "        esac",
    "    done",
    f'    "${{COMP_WORDS[0]}}" "${{statedir[@]}}" {COMPLETE} "$1" 2>/dev/null',
    "}",
]


def bash_completion(root: Cmd) -> str:
    transitions = sorted(
        f'"{_key(cmd)}:{child.path[-1]}"' for cmd in _all(root) for child in cmd.children
    )
    valued = sorted(
        {n for cmd in _all(root) for o in cmd.options if o.takes_value for n in o.names}
    )
    chosen = _choices_by_name(root)
    lines = [
        "# bash completion for hamimig, generated from the CLI by scripts/gen-docs.py: do not edit",
        *_BASH_RECORDS,
        "_hamimig() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local path="" w i',
        '    case "$prev" in',
        *(
            f'        {name}) COMPREPLY=($(compgen -W "{" ".join(values)}" -- "$cur")); return;;'
            for name, values in chosen
        ),
        *(
            f'        {name}) COMPREPLY=($(compgen -W "{" ".join((*known, ""))}'
            f'$(_hamimig_records {kind})" -- "$cur")); return;;'
            for name, known, kind in _record_values_by_name(root)
        ),
        f"        {'|'.join(valued)}) COMPREPLY=(); return;;",
        "    esac",
        "    for ((i=1; i<COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        case "$path:$w" in',
        f'            {"|".join(transitions)}) path="${{path:+$path }}$w";;',
        "        esac",
        "    done",
        "    local words",
        '    case "$path" in',
    ]
    for cmd in _all(root):
        words = [n for o in cmd.options for n in o.names] + [c.path[-1] for c in cmd.children]
        lines.append(f'        "{_key(cmd)}") words="{" ".join(words)}";;')
    lines.append("    esac")
    for kind, keys in _record_arguments(root):
        quoted = "|".join(f'"{k}"' for k in keys)
        lines += [
            '    case "$path" in',
            f"        {quoted})",
            f'            [[ "$cur" == -* ]] || words="$words $(_hamimig_records {kind})";;',
            "    esac",
        ]
    lines += [
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "complete -o default -F _hamimig hamimig",
        "",
    ]
    return "\n".join(lines)


# --- zsh -------------------------------------------------------------------------------------


def _zsh_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace(":", "\\:").replace("'", "'\\''")


def zsh_completion(root: Cmd) -> str:
    chosen = _choices_by_name(root)
    transitions = sorted(
        f'"{_key(cmd)}:{child.path[-1]}"' for cmd in _all(root) for child in cmd.children
    )
    lines = [
        "#compdef hamimig",
        "# zsh completion for hamimig, generated from the CLI by scripts/gen-docs.py: do not edit",
        "_hamimig_records() {",
        "    # One value a line from the ownership records (hamimig __complete: no NVML, no lock);",
        "    # the state directory is the one the command line names (or its --sim node's), else",
        "    # HAMIMIG_STATE_DIR's.",
        "    local i",
        "    local -a statedir",
        "    for ((i=2; i<CURRENT; i++)); do",
        '        case "${words[i]}" in',
        '            --state-dir|--sim) statedir+=("${words[i]}" "${words[i+1]/#\\~/$HOME}");;',
        '            --state-dir=*|--sim=*) statedir+=("${words[i]}");;',
        "        esac",
        "    done",
        f'    "${{words[1]}}" "${{statedir[@]}}" {COMPLETE} "$1" 2>/dev/null',
        "}",
        "_hamimig() {",
        '    local cmdpath="" w i',
        "    local -a items found",
        '    case "${words[CURRENT-1]}" in',
        *(f"        {name}) compadd -- {' '.join(values)}; return;;" for name, values in chosen),
        *(
            f"        {name}) found=({' '.join((*known, ''))}"
            f'${{(f)"$(_hamimig_records {kind})"}}); compadd -a found; return;;'
            for name, known, kind in _record_values_by_name(root)
        ),
        "    esac",
        "    for ((i=2; i<CURRENT; i++)); do",
        "        w=${words[i]}",
        '        case "$cmdpath:$w" in',
        f'            {"|".join(transitions)}) cmdpath="${{cmdpath:+$cmdpath }}$w";;',
        "        esac",
        "    done",
        '    case "$cmdpath" in',
    ]
    for cmd in _all(root):
        items = [f"'{_zsh_quote(c.path[-1])}:{_zsh_quote(c.help)}'" for c in cmd.children]
        items += [f"'{_zsh_quote(n)}:{_zsh_quote(o.help)}'" for o in cmd.options for n in o.names]
        lines.append(f'        "{_key(cmd)}") items=({" ".join(items)});;')
    lines += ["    esac", "    _describe 'hamimig' items"]
    for kind, keys in _record_arguments(root):
        quoted = "|".join(f'"{k}"' for k in keys)
        lines += [
            '    case "$cmdpath" in',
            f"        {quoted})",
            '            [[ "${words[CURRENT]}" == -* ]] && return',
            f'            found=(${{(f)"$(_hamimig_records {kind})"}}); compadd -a found;;',
            "    esac",
        ]
    lines += [
        "}",
        '_hamimig "$@"',
        "",
    ]
    return "\n".join(lines)


# --- fish ------------------------------------------------------------------------------------


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish_completion(root: Cmd) -> str:
    lines = [
        "# fish completion for hamimig, generated from the CLI by scripts/gen-docs.py: do not edit",
        "function __hamimig_path",
        "    set -l tokens (commandline -opc)",
        "    set -l path",
        "    for t in $tokens[2..-1]",
        "        if contains -- (string join -- ' ' $path $t) $__hamimig_commands",
        "            set path $path $t",
        "        end",
        "    end",
        "    string join ' ' $path",
        "end",
        "function __hamimig_at",
        "    # An empty path must still be one word for test: quote it.",
        "    set -l path (__hamimig_path)",
        '    test "$path" = "$argv[1]"',
        "end",
        "function __hamimig_records",
        "    # One value a line from the ownership records (hamimig __complete: no NVML, no lock);",
        "    # the state directory is the one the command line names (or its --sim node's), else",
        "    # HAMIMIG_STATE_DIR's.",
        "    set -l tokens (commandline -opc)",
        "    set -l statedir",
        "    for i in (seq 2 (count $tokens))",
        "        switch $tokens[$i]",
        "            case --state-dir --sim",
        "                set -l next (math $i + 1)",
        "                if test $next -le (count $tokens)",
        "                    set -a statedir $tokens[$i] $tokens[$next]",
        "                end",
        "            case '--state-dir=*' '--sim=*'",
        "                set -a statedir $tokens[$i]",
        "        end",
        "    end",
        f"    $tokens[1] $statedir {COMPLETE} $argv[1] 2>/dev/null",
        "end",
        "set -g __hamimig_commands " + " ".join(_fish_quote(_key(c)) for c in _all(root) if c.path),
        "complete -c hamimig -f",
    ]
    for cmd in _all(root):
        cond = f"-n \"__hamimig_at '{_key(cmd)}'\""
        for child in cmd.children:
            lines.append(
                f"complete -c hamimig {cond} -a {child.path[-1]} -d {_fish_quote(child.help)}"
            )
        if cmd.argument_from_records:
            lines.append(
                f"complete -c hamimig {cond} -a '(__hamimig_records {cmd.argument_from_records})'"
            )
        for opt in cmd.options:
            flags = []
            for name in opt.names:
                if name.startswith("--"):
                    flags.append(f"-l {name[2:]}")
                else:
                    flags.append(f"-s {name[1:]}")
            value = " -r" if opt.takes_value else ""
            if opt.choices:  # -x: these values, no file names
                value = f" -x -a {_fish_quote(' '.join(opt.choices))}"
            elif opt.from_records:
                known = " ".join((*opt.suggested, f"(__hamimig_records {opt.from_records})"))
                value = f" -x -a {_fish_quote(known)}"
            lines.append(
                f"complete -c hamimig {cond} {' '.join(flags)}{value} -d {_fish_quote(opt.help)}"
            )
    lines.append("")
    return "\n".join(lines)


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


def generate(app: typer.Typer) -> dict[str, str]:
    """Relative path -> content, for everything `scripts/gen-docs.py` writes."""
    root = command_tree(app)
    return {
        "completions/hamimig.bash": bash_completion(root),
        "completions/_hamimig": zsh_completion(root),
        "completions/hamimig.fish": fish_completion(root),
        "man/hamimig.1": man_page(root),
    }
