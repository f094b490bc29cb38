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

EXIT_CODES = (
    (0, "done (also a --dry-run that found a valid plan)"),
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


@dataclass(frozen=True)
class Cmd:
    path: tuple[str, ...]
    help: str
    options: tuple[Opt, ...]
    arguments: tuple[str, ...]
    children: tuple[Cmd, ...]


def _first_line(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def _walk(command: Any, path: tuple[str, ...]) -> Cmd:
    options: list[Opt] = []
    arguments: list[str] = []
    for param in command.params:
        if type(param).__name__.endswith("Argument"):
            arguments.append((param.metavar or param.name or "ARG").upper())
            continue
        names = tuple(param.opts) + tuple(param.secondary_opts or ())
        takes_value = not getattr(param, "is_flag", False) and not param.secondary_opts
        envvar = param.envvar if isinstance(param.envvar, str) else None
        metavar = param.metavar or (param.name or "value").upper().replace("_", "-")
        choices = _choices(param) if takes_value else ()
        options.append(Opt(names, _first_line(param.help), takes_value, metavar, envvar, choices))
    options.append(Opt(("-h", "--help"), "Show the help and exit.", False, "", None))
    children = tuple(
        _walk(sub, (*path, name)) for name, sub in sorted(getattr(command, "commands", {}).items())
    )
    return Cmd(path, _first_line(command.help), tuple(options), tuple(arguments), children)


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


# --- bash ------------------------------------------------------------------------------------


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
        "_hamimig() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local path="" w i',
        '    case "$prev" in',
        *(
            f'        {name}) COMPREPLY=($(compgen -W "{" ".join(values)}" -- "$cur")); return;;'
            for name, values in chosen
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
    lines += [
        "    esac",
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
        "_hamimig() {",
        '    local cmdpath="" w i',
        "    local -a items",
        '    case "${words[CURRENT-1]}" in',
        *(f"        {name}) compadd -- {' '.join(values)}; return;;" for name, values in chosen),
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
    lines += [
        "    esac",
        "    _describe 'hamimig' items",
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
        "        if contains -- (string join ' ' $path $t) $__hamimig_commands",
        "            set path $path $t",
        "        end",
        "    end",
        "    string join ' ' $path",
        "end",
        "set -g __hamimig_commands " + " ".join(_fish_quote(_key(c)) for c in _all(root) if c.path),
        "complete -c hamimig -f",
    ]
    for cmd in _all(root):
        cond = f"-n \"test (__hamimig_path) = '{_key(cmd)}'\""
        for child in cmd.children:
            lines.append(
                f"complete -c hamimig {cond} -a {child.path[-1]} -d {_fish_quote(child.help)}"
            )
        for opt in cmd.options:
            flags = []
            for name in opt.names:
                if name.startswith("--"):
                    flags.append(f"-l {name[2:]}")
                else:
                    flags.append(f"-s {name[1:]}")
            value = " -r" if opt.takes_value else ""
            if opt.choices:
                value += f" -a {_fish_quote(' '.join(opt.choices))}"
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
            out += [".TP", f".B {_roff(opt.envvar)}", _roff(f"Same as {opt.names[-1]}.")]
    out += [".SH SEE ALSO", "nvidia\\-smi(1)", ""]
    return "\n".join(out)


def _man_options(options: tuple[Opt, ...]) -> list[str]:
    out: list[str] = []
    for opt in options:
        names = ", ".join(f"\\fB{_roff(n)}\\fR" for n in opt.names)
        if opt.takes_value:
            names += f" \\fI{_roff(opt.metavar)}\\fR"
        help_text = opt.help
        if opt.choices and not all(choice in opt.help for choice in opt.choices):
            help_text += f" One of: {', '.join(opt.choices)}."
        if opt.envvar:
            help_text += f" [environment: {opt.envvar}]"
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
