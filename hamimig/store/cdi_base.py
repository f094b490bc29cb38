"""The node's NVIDIA CDI spec: where a per-instance spec takes its driver edits from, composed
as HAMi composes its dynamic MIG specs (docs/cdi.md), so neither rewrites the other's file.

The base is read, never written, and judged by the rules a runtime applies: composing from a
spec that runtimes reject would copy the fault into every instance.
"""

from __future__ import annotations

import codecs
import copy
import functools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hamimig.errors import UsageError
from hamimig.store.cdi_rules import dicts, first_of, validate_spec
from hamimig.store.files import read_input
from hamimig.store.yamlload import load as load_yaml
from hamimig.store.yamlload import refusing_duplicates

PLUGIN_KIND = "k8s.device-plugin.nvidia.com/gpu"
CTK_KIND = "nvidia.com/gpu"
BASE_KINDS = (PLUGIN_KIND, CTK_KIND)
"""In order of preference: the device plugin's spec describes what it hands out; nvidia-ctk's
(`/etc/cdi/nvidia.yaml`) is the node-wide default."""

AUTO = "auto"
NONE = "none"
OWN_SPEC_PREFIX = "hami-dynamic-mig-"
"""Per-instance specs (ours and HAMi's) are never a base."""

SPEC_SUFFIXES = (".json", ".yaml")
"""The files runtimes load from a CDI directory."""
_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")
_CAPS_NODE_PREFIX = "/dev/nvidia-caps/"
GENERATE_HINT = "run `nvidia-ctk cdi generate` or set `cdi.baseSpec: none`"


def check_setting(value: Any) -> str | None:
    """Why a `cdi.baseSpec` value is unusable, or None."""
    if not isinstance(value, str) or not value:
        return f"must be auto, none or an absolute path, not {value!r}"
    if value not in (AUTO, NONE) and not value.startswith("/"):
        return f"{value!r} is not an absolute path (or auto, none)"
    return None


def canonical(value: Any) -> str:
    """JSON with sorted keys and no whitespace: what "the same content" means here."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class BaseSpec:
    """A valid NVIDIA spec and the file it came from: a spec runtimes reject is a usage error
    naming the file and the first problem."""

    path: Path
    spec: dict[str, Any]

    def __post_init__(self) -> None:
        problems = validate_spec(self.spec)
        if problems:
            raise UsageError(
                f"NVIDIA CDI spec {self.path} is invalid: {first_of(problems)}; runtimes reject "
                f"it, so no instance spec is composed from it: {GENERATE_HINT}"
            )

    @property
    def kind(self) -> str:
        return str(self.spec.get("kind"))

    def common_edits(self) -> dict[str, Any]:
        """The spec-level edits (driver mounts, hooks, control nodes), copied."""
        return copy.deepcopy(self.spec.get("containerEdits") or {})  # valid: an object or none

    def parent_edits(self, gpu_minor: int) -> dict[str, Any]:
        """The edits of the device entry that stands for GPU `gpu_minor` alone, copied; entries
        naming it by index and by UUID must agree, and none or differing ones cannot be composed
        from."""
        found = [(name, edits) for minor, name, edits in self._gpus() if minor == gpu_minor]
        if not found:
            raise UsageError(
                f"NVIDIA CDI spec {self.path} has no device for GPU minor {gpu_minor} "
                f"(an entry with /dev/nvidia{gpu_minor} alone); regenerate it: {GENERATE_HINT}"
            )
        first_name, first = found[0]
        for name, edits in found[1:]:
            if canonical(edits) != canonical(first):
                raise UsageError(
                    f"NVIDIA CDI spec {self.path}: devices {first_name!r} and {name!r} both "
                    f"stand for GPU minor {gpu_minor} with different edits; regenerate it"
                )
        return copy.deepcopy(first)

    def gpu_minors(self) -> set[int]:
        """The GPU minors some entry stands for alone."""
        return {minor for minor, _, _ in self._gpus()}

    def _gpus(self) -> list[tuple[int, str, dict[str, Any]]]:
        """(GPU minor, name, edits) of each device entry that stands for one GPU alone: it holds
        `/dev/nvidia<minor>` and no other GPU or capability node, which skips `all` and MIG
        entries whatever the naming strategy."""
        found = []
        for device in dicts(self.spec.get("devices")):
            edits = device.get("containerEdits") or {}
            nodes = dicts(edits.get("deviceNodes") if isinstance(edits, dict) else None)
            paths = [n["path"] for n in nodes if isinstance(n.get("path"), str)]
            gpus = [int(m.group(1)) for p in paths if (m := _GPU_NODE.match(p))]
            if len(gpus) == 1 and not any(p.startswith(_CAPS_NODE_PREFIX) for p in paths):
                found.append((gpus[0], str(device.get("name")), edits))
        return found


@dataclass(frozen=True)
class BaseLookup:
    """What `cdi.baseSpec` (none, auto or a path) found: a spec, or why there is none."""

    setting: str
    base: BaseSpec | None = None
    problem: str | None = None
    missing: bool = False
    """The problem is that no base spec is there at all (not one that is invalid)."""

    @property
    def composes(self) -> bool:
        """False with `cdi.baseSpec: none`: the device-nodes-only spec is then wanted."""
        return self.setting != NONE

    def require(self) -> BaseSpec:
        """The base spec, or a usage error (exit 2) saying why a new spec cannot be composed."""
        if self.base is None:
            raise UsageError(self.problem or "no NVIDIA CDI spec")
        return self.base


def read_spec_file(path: Path) -> Any:
    """A JSON or YAML spec file parsed as runtimes parse it (docs/formats.md: as YAML whatever
    the extension, UTF-16 after a BOM), since what is a spec to runtimes must be one here;
    `ValueError` naming the file when it cannot be."""
    try:
        data = read_input(path)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path} {exc}") from None
    try:
        utf16 = data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
        text = data.decode("utf-16" if utf16 else "utf-8-sig")  # either drops the BOM
        if path.suffix == ".json":
            try:
                return json.loads(text)  # the common case, and much faster than YAML
            except ValueError:
                pass  # perhaps YAML, which runtimes read all the same
        return json.loads(_strict_yaml(text))  # each caller gets its own copy of the values
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path} is not valid JSON/YAML: {exc}") from None
    except Exception as exc:  # PyYAML's errors share no base class with ValueError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path} is not valid YAML: {first}") from None


MAX_SPEC_NODES = 200_000
"""Values a spec may expand to. A real NVIDIA spec holds a few thousand; YAML aliases can make
a few KB expand to billions (the reference library refuses "excessive aliasing" too)."""


@functools.lru_cache(maxsize=4)
def _strict_yaml(text: str) -> str:
    """YAML read as the reference library reads it (docs/cdi.md), as JSON text, and never
    amplified: past `MAX_SPEC_NODES` values an alias bomb of a few KB would become gigabytes.
    libyaml's parser where PyYAML has it (the pure-Python one takes tens of ms on NVIDIA's
    spec), both under the same resolvers; cached, as a process may look the spec up often."""
    import yaml

    safe: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(refusing_duplicates(safe)):  # type: ignore[misc]
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    loaded = load_yaml(text, Loader)  # a key given twice: `DuplicateKey`, a ValueError
    _count_values(loaded)
    try:  # only JSON values: what `canonical` and the writer can represent
        return json.dumps(loaded, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a value is not representable in JSON: {exc}") from None


def _count_values(document: Any) -> None:
    """Refuse a document that expands past `MAX_SPEC_NODES` values (shared subtrees counted
    every time they appear, as serializing them would; a cycle never ends, so it is refused)."""
    stack = [document]
    for _ in range(MAX_SPEC_NODES):
        if not stack:
            return
        value = stack.pop()
        if isinstance(value, dict):
            stack += [*value, *value.values()]
        elif isinstance(value, list):
            stack += value
    if stack:
        raise ValueError(
            f"the document expands to more than {MAX_SPEC_NODES} values (YAML aliases?)"
        )


def spec_files(dirs: Iterable[Path]) -> Iterator[tuple[Path, list[Path]]]:
    """Each CDI directory of `dirs` once (the same real directory under two names is searched
    once), with the spec files in it by name, as runtimes find them; a directory that is absent
    or not one is skipped, and one that cannot be listed holds none."""
    seen: set[str] = set()
    for directory in dirs:
        real = os.path.realpath(directory)
        if real in seen or not os.path.isdir(directory):
            continue
        seen.add(real)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            names = []
        yield directory, [directory / n for n in names if n.endswith(SPEC_SUFFIXES)]


def _candidates(dirs: Sequence[Path]) -> tuple[dict[str, list[tuple[Path, Any]]], list[str]]:
    """Every parsable spec file of an NVIDIA kind directly in `dirs`, by kind, and why the
    files that could not be parsed were not (one of them may be NVIDIA's)."""
    found: dict[str, list[tuple[Path, Any]]] = {kind: [] for kind in BASE_KINDS}
    unreadable: list[str] = []
    for path in (path for _, paths in spec_files(dirs) for path in paths):
        if path.name.startswith(OWN_SPEC_PREFIX):
            continue
        try:
            spec = read_spec_file(path)
        except ValueError as exc:
            unreadable.append(str(exc))
            continue
        if isinstance(spec, dict) and spec.get("kind") in BASE_KINDS:
            found[spec["kind"]].append((path, spec))
    return found, unreadable


def find_base(setting: str, dirs: Sequence[Path]) -> BaseLookup:
    """Look the base spec up as `cdi.baseSpec` says; never raises (the problem is kept)."""
    try:
        return BaseLookup(setting, _find(setting, dirs))
    except UsageError as exc:
        return BaseLookup(setting, None, exc.message, missing=isinstance(exc, _Missing))


class _Missing(UsageError):
    """No base spec where one was looked for."""


def _find(setting: str, dirs: Sequence[Path]) -> BaseSpec | None:
    if setting == NONE:
        return None
    if setting != AUTO:
        path = Path(setting)
        if not path.exists():
            raise _Missing(f"cdi.baseSpec: no NVIDIA CDI spec at {path}; {GENERATE_HINT}")
        try:
            spec = read_spec_file(path)
        except ValueError as exc:
            raise UsageError(f"cdi.baseSpec: {exc}") from None
        return BaseSpec(path, spec)
    found, unreadable = _candidates(dirs)
    kinds = [kind for kind in BASE_KINDS if found[kind]]
    for kind in kinds:
        # Within one directory, two files defining the kind differently are a conflict
        # runtimes drop; across directories the later one wins (/var/run/cdi over /etc/cdi).
        chosen_path, chosen = found[kind][-1]
        for path, spec in found[kind]:
            if path.parent == chosen_path.parent and canonical(spec) != canonical(chosen):
                raise UsageError(
                    f"NVIDIA CDI specs {path} and {chosen_path} both define kind {kind}, "
                    "differently: runtimes drop the devices they both define; keep one"
                )
        base = BaseSpec(chosen_path, chosen)
        if not base.gpu_minors() and kind != kinds[-1]:
            continue  # only MIG entries (the device plugin's MIG strategy): no GPU to copy
        return base
    where = ", ".join(str(d) for d in dirs) or "no directory"
    if unreadable:  # perhaps NVIDIA's spec, unusable: say which file, not just "missing"
        raise UsageError(
            f"no usable NVIDIA CDI spec in {where}: {first_of(unreadable, 'more unreadable')}; "
            f"{GENERATE_HINT}"
        )
    raise _Missing(
        "no NVIDIA CDI spec on this node to take driver edits from "
        f"(kind {PLUGIN_KIND} or {CTK_KIND} in {where}); {GENERATE_HINT}"
    )
