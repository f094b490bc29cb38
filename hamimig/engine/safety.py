"""Refusing to act on a node whose durable state others can forge or shadow (docs/design.md
"Trust model", docs/formats.md): a forged record hands a tenant's slice to someone else, and a
foreign spec defining one of our device names makes runtimes drop or shadow a pod's device.
One set of findings serves `doctor`, the refusals (exit 5) and every command's warnings.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hamimig.engine.node import Node
from hamimig.engine.results import Warning_
from hamimig.errors import HamimigError, UnverifiableError
from hamimig.store.cdi import SPEC_PREFIX, CdiStore, spec_file_name
from hamimig.store.cdi_base import read_spec_file, spec_files
from hamimig.store.records import Record

SYSTEM_CDI_DIR = Path("/etc/cdi")
"""The runtimes' other CDI directory; `--cdi-dir` (default /var/run/cdi) is the first one."""


@dataclass(frozen=True)
class CdiScan:
    """Which files define which qualified device names, over every CDI directory searched."""

    definers: dict[str, tuple[Path, ...]]
    searched: tuple[str, ...]
    read: int
    unreadable: tuple[tuple[Path, str], ...] = ()
    """Files runtimes may load that hamimig could not parse, and why: each may define any
    device name, ours included, so no conflict check can clear them."""


def read_any_spec(path: Path) -> Any:
    """A spec file of anyone's, parsed as runtimes parse it; None when runtimes cannot load it
    either (gone, or a directory). Read with bounds (non-blocking, size, YAML expansion) so a
    FIFO or alias bomb planted there cannot hang a command; ValueError when beyond them, since
    runtimes, which have no bounds, may still load it."""
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            return None
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):  # a link to nothing, or in a loop
            return None
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    return read_spec_file(path)


def qualified_names(spec: Any) -> Iterator[str]:
    """`kind=name` of each device a spec defines (none when it is not shaped as a spec)."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if isinstance(devices, list) and isinstance(spec.get("kind"), str):
        for device in devices:
            if isinstance(device, dict) and isinstance(device.get("name"), str):
                yield f"{spec['kind']}={device['name']}"


def scan_cdi_dirs(dirs: Sequence[Path], cache: dict[str, object]) -> CdiScan:
    """Every device name defined in the CDI directories, read once per command (`cache` is
    the node's per-command cache: a command may ask several times)."""
    key = tuple(os.path.abspath(d) for d in dirs)
    cache_key = "cdi-scan:" + "\0".join(key)
    if cache_key not in cache:
        cache[cache_key] = _scan(key)
    return cast("CdiScan", cache[cache_key])


def _scan(key: tuple[str, ...]) -> CdiScan:
    definers: dict[str, list[Path]] = {}
    searched: list[str] = []
    unreadable: list[tuple[Path, str]] = []
    read = 0
    for directory, paths in spec_files(Path(d) for d in key):
        searched.append(str(directory))
        for path in paths:
            try:
                spec = read_any_spec(path)
            except ValueError as exc:
                why = str(exc)
                for named in (f"{path} ", f"cannot read {path}: "):
                    why = why.removeprefix(named)
                unreadable.append((path, why))
                continue
            if spec is None:
                continue
            read += 1
            for qualified in qualified_names(spec):
                definers.setdefault(qualified, []).append(path)
    definer = {k: tuple(v) for k, v in definers.items()}
    return CdiScan(definer, tuple(searched), read, tuple(unreadable))


def default_cdi_dirs(node: Node) -> tuple[Path, ...]:
    """The CDI directories searched for other specs: /etc/cdi and `--cdi-dir`; a simulated
    node's own stand-in for /etc/cdi instead (never the host's files)."""
    own = node.files().cdi_base_dir
    return (SYSTEM_CDI_DIR if own is None else own, node.cdi_dir)


def unreadable_spec_problem(path: Path, why: str) -> Warning_:
    return Warning_(
        file=str(path),
        reason=f"hamimig cannot read the CDI file {path} ({why}), which runtimes may load: "
        "whether it defines one of our devices cannot be verified",
        fix=f"fix or remove {shlex.quote(str(path))}",
    )


def unreadable_specs(cdi: CdiStore, scan: CdiScan) -> list[Warning_]:
    """The files of `scan` that hamimig could not parse, except a damaged spec of our own
    (its own check reports it, and repair-cdi rewrites it)."""
    return [unreadable_spec_problem(p, why) for p, why in scan.unreadable if not _ours(p, cdi)]


def _ours(path: Path, cdi: CdiStore) -> bool:
    """A per-instance spec in our CDI directory (ours or HAMi's: the names are the same)."""
    return path.parent == Path(os.path.abspath(cdi.directory)) and path.name.startswith(SPEC_PREFIX)


def holder_problem(directory: Path, holder: str, held: str) -> Warning_ | None:
    """Why others could replace `held` through `directory` (rename it away and put a forged one
    there, even while a command holds the lock on the old one); None when fine or absent. Its
    owner may rename anything in it, sticky bit or not; one not inspectable fails closed."""
    harm = f"can replace {held}"
    return _loose(directory, holder, harm, f"others {harm}", holder=True)


def parent_problem(path: Path) -> Warning_ | None:
    """Why others could replace the state directory itself (`holder_problem` of its parent)."""
    parent = Path(os.path.abspath(path)).parent
    found = holder_problem(parent, "the state directory's parent", "the state directory")
    return None if found is None else Warning_(file=str(path), reason=found.reason, fix=found.fix)


def state_dir_problems(path: Path) -> list[Warning_]:
    """Others can forge or delete records here: a group/world-writable directory, or one
    owned by a user other than root and this one. A missing directory is fine (hamimig
    creates it 0750); a symlink or non-directory is refused by the stores themselves."""
    try:
        st = os.lstat(path)
    except OSError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        return []
    uid, mode = os.getuid(), stat.S_IMODE(st.st_mode)
    reasons = []
    if st.st_uid not in (0, uid):
        reasons.append(
            f"the state directory is owned by uid {st.st_uid}, neither root nor this user (uid "
            f"{uid}): its owner can forge ownership records"
        )
    if mode & 0o022:
        reasons.append(
            f"the state directory has mode {mode:04o}: group- or world-writable, so others can "
            "forge or delete ownership records (chmod 0750)"
        )
    problems = [Warning_(file=str(path), reason=r) for r in reasons]
    parent = parent_problem(path)
    return problems if parent is None else [*problems, parent]


def _uninspectable(path: Path, what: str, exc: OSError) -> Warning_:
    """A file that decides and cannot be looked at fails closed: nobody can say it is safe."""
    why = exc.strerror or str(exc)
    reason = (
        f"{what} {path} cannot be inspected ({why}): nobody can say whether others can forge it"
    )
    fix = f"check the file system; ls -ld {shlex.quote(str(path))}"
    return Warning_(file=str(path), reason=reason, fix=fix)


def path_problem(path: Path, what: str) -> Warning_ | None:
    """Why others could forge a file or directory whose content decides: group/world-writable,
    owned by neither root nor this user, or beyond inspection. None when it is fine or absent."""
    return _loose(path, what, "can forge it", "group- or world-writable, so others can forge it")


def _loose(
    path: Path, what: str, owner_harm: str, mode_harm: str, holder: bool = False
) -> Warning_ | None:
    """The warning, naming `what` and the fix, when others own or can write it. A `holder`
    directory is followed if a link, and its sticky bit is fine (others may only add their own
    files); a file is not followed (the stores refuse links). Uninspectable fails closed."""
    try:
        st = os.stat(path) if holder else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return _uninspectable(path, what, exc)
    if stat.S_ISLNK(st.st_mode):
        return None
    subject = f"{what} {path}" if holder else what
    uid = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (0, uid):
        fix = f"chown {uid} {shlex.quote(str(path))}"
        why = f"is owned by uid {st.st_uid}, neither root nor this user (uid {uid}): its owner"
        return Warning_(file=str(path), reason=f"{subject} {why} {owner_harm} ({fix})", fix=fix)
    if mode & 0o022 and not (holder and mode & stat.S_ISVTX):
        fix = f"chmod go-w {shlex.quote(str(path))}"
        reason = f"{subject} has mode {mode:04o}: {mode_harm} ({fix})"
        return Warning_(file=str(path), reason=reason, fix=fix)
    return None


def config_problems(path: Path) -> list[Warning_ | None]:
    """The config decides adoption, the idle policy and what a container gets, so it is guarded
    as a record is, its directories as the state directory's parent, also when absent: whoever
    can write there can put a config in and take it away once a command has read it."""
    real = Path(os.path.realpath(path))
    found = [path_problem(real, "the config file")]
    for directory in dict.fromkeys((Path(os.path.abspath(path)).parent, real.parent)):
        found.append(holder_problem(directory, "the config file's directory", "the config file"))
    return found


def decision_file_problems(node: Node) -> list[Warning_]:
    """Every file whose content decides ownership or what a container gets: the config,
    records, intents, the removal queue, idle-seen.json, our CDI directory and our specs in
    it, and the NVIDIA base spec hamimig chose."""
    found: list[Warning_ | None] = config_problems(node.config_path)
    state = node.state_dir
    names, unlisted = _listing(state, "the state directory")
    found.append(unlisted)
    found += [path_problem(state / n, what) for n, what in _state_files(names)]
    try:
        cdi = node.cdi()
    except (HamimigError, OSError):  # an unreadable config is reported by the command itself
        cdi = None
    if cdi is not None:
        directory = Path(cdi.directory)
        if directory.is_dir():  # not a directory (`--cdi-dir /dev/null`): no mode to fix there
            found.append(path_problem(directory, "the CDI directory"))
        names, unlisted = _listing(directory, "the CDI directory")
        found.append(unlisted)
        specs = [n for n in names if n.startswith(SPEC_PREFIX)]
        found += [path_problem(directory / n, f"the CDI spec {n}") for n in specs]
    try:
        base = node.cdi_base().base
    except (HamimigError, OSError):  # reported by the command itself
        base = None
    if base is not None:
        found.append(path_problem(base.path, "the NVIDIA base spec"))
    return [w for w in found if w is not None]


def _listing(directory: Path, what: str) -> tuple[list[str], Warning_ | None]:
    """The sorted names in a directory that holds deciding files, and a warning when it cannot
    be listed (it fails closed); none and no warning when it is absent or not a directory
    (hamimig creates it, or the stores refuse it)."""
    try:
        return sorted(os.listdir(directory)), None
    except (FileNotFoundError, NotADirectoryError):
        return [], None
    except OSError as exc:
        return [], _uninspectable(directory, what, exc)


def _state_files(names: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(name, what it is) for the state directory's files whose content decides."""
    from hamimig.store.idle_seen import IDLE_SEEN_NAME
    from hamimig.store.intents import INTENT_PREFIX, INTENT_SUFFIX
    from hamimig.store.queue import QUEUE_NAME
    from hamimig.store.records import LOADER_PREFIX, RECORD_SUFFIX

    for name in names:
        if name.startswith(LOADER_PREFIX) and name.endswith(RECORD_SUFFIX):
            yield name, f"the ownership record {name}"
        elif name.startswith(INTENT_PREFIX) and name.endswith(INTENT_SUFFIX):
            yield name, f"the intent {name}"
        elif name in (QUEUE_NAME, IDLE_SEEN_NAME):
            yield name, name


def cdi_conflicts(
    cdi: CdiStore, mig_uuids: Iterable[str], scan: CdiScan
) -> list[tuple[str, Path, tuple[Path, ...]]]:
    """(qualified name, our spec, other files defining it) for each device of ours that
    another spec file also defines."""
    ours = Path(os.path.abspath(cdi.directory))
    expected: dict[str, Path] = {
        cdi.qualified_name(u): ours / spec_file_name(u) for u in sorted(set(mig_uuids))
    }
    # Specs of ours without a record still define our names: they count as ours, not foreign.
    for qualified, paths in scan.definers.items():
        for path in paths:
            if _ours(path, cdi):
                expected.setdefault(qualified, path)
    out = []
    for qualified, own in sorted(expected.items()):
        others = tuple(p for p in scan.definers.get(qualified, ()) if p != own)
        if others:
            out.append((qualified, own, others))
    return out


def node_problems(node: Node, records: dict[str, Record]) -> list[Warning_]:
    """What makes the node unsafe to change, as doctor would fail it."""
    problems = state_dir_problems(node.state_dir) + decision_file_problems(node)
    cdi = node.cdi()
    if cdi is not None:
        scan = scan_cdi_dirs(default_cdi_dirs(node), node.cache)
        problems += unreadable_specs(cdi, scan)
        for qualified, own, found in cdi_conflicts(cdi, records, scan):
            # A damaged spec of our own is repaired by the command itself (repair-cdi).
            others = tuple(p for p in found if not _ours(p, cdi))
            if not others:
                continue
            why = f"{qualified} (ours: {own.name}) is also defined by " + ", ".join(
                map(str, others)
            )
            problems.append(
                Warning_(file=str(others[0]), reason=why + ": runtimes drop or shadow it")
            )
    return problems


def refuse_if_unsafe(node: Node, records: dict[str, Record], dry_run: bool) -> tuple[Warning_, ...]:
    """Raise (exit 5) before a change on an unsafe node; a dry run notes the same refusal
    (`Node.refuse`) and gets the findings back, one warning each."""
    problems = node_problems(node, records)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        node.refuse(
            UnverifiableError(
                f"unsafe node: {problems[0].file}: {problems[0].reason}{more}; run 'hamimig "
                "doctor'; nothing was changed"
            ),
            dry_run,
        )
    return tuple(problems) if dry_run else ()
