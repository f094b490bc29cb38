"""Shell completions generated from the Typer application itself (and the man page, from
`manpage`).

The scripts are static text derived from the command tree, so they work without calling back into
hamimig (fast, and usable on a node where the tool is broken), and a test regenerates them to
catch staleness. `scripts/gen-docs.py` writes them to `completions/` and `man/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

from hamimig.cli.complete_cmd import COMMAND as COMPLETE
from hamimig.cli.complete_cmd import board_profiles
from hamimig.cli.manpage import man_page


@dataclass(frozen=True)
class Opt:
    names: tuple[str, ...]
    help: str
    takes_value: bool
    choices: tuple[str, ...] = ()
    """The values an option accepts, when they are a fixed list (an `Enum` option)."""
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
        choices = _choices(param) if takes_value else ()
        options.append(
            Opt(
                names,
                _first_line(param.help),
                takes_value,
                choices,
                suggested=next((suggested[n] for n in names if n in suggested), ()),
                from_records=next((FROM_RECORDS[n] for n in names if n in FROM_RECORDS), None),
            )
        )
    options.append(Opt(("-h", "--help"), "Show the help and exit.", False))
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


def generate(app: typer.Typer) -> dict[str, str]:
    """Relative path -> content, for everything `scripts/gen-docs.py` writes."""
    root = command_tree(app)
    return {
        "completions/hamimig.bash": bash_completion(root),
        "completions/_hamimig": zsh_completion(root),
        "completions/hamimig.fish": fish_completion(root),
        "man/hamimig.1": man_page(app),
    }
