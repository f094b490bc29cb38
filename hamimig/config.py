"""The YAML config, mirroring the device plugin's Helm values, plus environment overrides.

A missing file means defaults; anything present is validated strictly (an unknown key or a
wrong type is a usage error naming it), because a typo in `adoptExistingMIGInstances` must not
silently change what recovery is allowed to claim.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hamimig.durations import DurationError, exact_duration, parse_duration
from hamimig.errors import UsageError, why
from hamimig.store.cdi_base import AUTO, check_setting
from hamimig.store.cdi_rules import check_kind
from hamimig.store.events import DEFAULT_MAX_BYTES, MAX_MAX_BYTES, MIN_MAX_BYTES
from hamimig.store.files import read_input
from hamimig.store.yamlload import DuplicateKey, refusing_duplicates
from hamimig.store.yamlload import load as load_yaml

DEFAULT_CDI_KIND = "k8s.device-plugin.nvidia.com/dynamic-mig"
POD_SOURCE = "pods.source"
POD_SOURCES = ("kube",)
MAX_IDLE_LIMIT = 1000
"""More Idle instances than any GPU can hold (7 at most today): a larger cap is a typo."""


@dataclass(frozen=True)
class AllowlistEntry:
    """Profiles allowed on GPUs whose model matches one of `models` (empty: every model)."""

    profiles: tuple[str, ...]
    models: tuple[str, ...] = ()

    def covers_model(self, model: str) -> bool:
        wanted = model.lower()
        return not self.models or any(m.lower() in wanted for m in self.models)


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    raise UsageError(f"{where} must be true or false, not {value!r}")


def _env_bool(text: str, where: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{where}={text!r}: expected true or false")


def _kind(value: Any, where: str) -> str:
    problems = check_kind(value)
    if problems:
        raise UsageError(f"{where}: {problems[0]}")
    return str(value)


def _base_spec(value: Any, where: str) -> str:
    problem = check_setting(value)
    if problem:
        raise UsageError(f"{where} {problem}")
    return str(value)


def _pod_source(value: Any, where: str) -> str:
    if value in POD_SOURCES:
        return str(value)
    raise UsageError(
        f"{where}: expected 'kube', not {value!r}: the API is the only default pod source (that "
        "no pod holds a MIG instance is an assertion about now, made on each command)"
    )


def _idle_ttl(value: Any, where: str) -> int:
    """A duration string or whole seconds; 0 is off. YAML gives ints for `3600`, strings for
    `1h`; a bool or a float is refused (`1.5` is not whole seconds)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{where} must be a duration (90s, 30m, 1h30m) or seconds")
    try:
        return parse_duration(str(value))
    except DurationError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _max_idle(value: Any, where: str) -> int:
    """A whole number from the file: a string there is a quoted value or a form YAML 1.1 reads
    in another base (`010`)."""
    if isinstance(value, str):
        raise UsageError(f"{where} must be a plain decimal whole number, not {value!r}")
    return _at_most_limit(value, where)


def _env_max_idle(text: str, where: str) -> int:
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise UsageError(f"{where} must be a whole number of at least 0, not {text!r}")
    if len(digits) > 12:
        raise UsageError(f"{where} must be at most {MAX_IDLE_LIMIT}, not {digits}")
    return _at_most_limit(int(digits), where)


def _at_most_limit(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"{where} must be a whole number of at least 0")
    if value > MAX_IDLE_LIMIT:
        raise UsageError(f"{where} must be at most {MAX_IDLE_LIMIT}, not {value}")
    return value


_BYTES = re.compile(r"^([0-9]{1,13})(Ki|Mi|Gi)?$")
_UNITS = {None: 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


def _byte_size(value: Any, where: str) -> int:
    """Bytes, as a whole number or with a binary suffix (`16Mi`, `512Ki`, `1Gi`), the way
    Kubernetes quantities write them; between 4Ki and 1Gi (a smaller journal would rotate away
    the events an operator looks for, a larger one is a typo)."""
    text = str(value).strip() if isinstance(value, (int, str)) else None
    match = _BYTES.match(text) if text is not None and not isinstance(value, bool) else None
    if match is None:
        raise UsageError(f"{where} must be a size in bytes (16777216, 512Ki, 16Mi), not {value!r}")
    size = int(match.group(1)) * _UNITS[match.group(2)]
    if not MIN_MAX_BYTES <= size <= MAX_MAX_BYTES:
        raise UsageError(f"{where} must be between 4Ki and 1Gi, not {text}")
    return size


def _allowlist(value: Any, where: str) -> tuple[AllowlistEntry, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise UsageError(f"{where} must be a list")
    return tuple(_allowlist_entry(item, f"{where}[{i}]") for i, item in enumerate(value))


def _allowlist_entry(item: Any, where: str) -> AllowlistEntry:
    if isinstance(item, str) and item:
        return AllowlistEntry(profiles=(item,))
    if isinstance(item, dict):
        unknown = set(item) - {"models", "profiles"}
        if unknown:
            try:
                first = min(unknown)
            except TypeError:  # keys of several types: YAML reads `1:` as a number
                first = min(unknown, key=str)
            source, _, name = where.rpartition(": ")  # `where` is `<file>: <key>[<i>]`
            raise UsageError(f"{source}: unknown key {first!r} in {name}")
        models, profiles = item.get("models", []), item.get("profiles", [])
        if _names(models) and _names(profiles):
            return AllowlistEntry(profiles=tuple(profiles), models=tuple(models))
    raise UsageError(f"{where} must be a profile name or {{models: [names], profiles: [names]}}")


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) and n for n in value)


def _shown_allowlist(entries: tuple[AllowlistEntry, ...]) -> list[Any]:
    """As the file writes it: a bare profile name for an entry of every model."""
    out: list[Any] = []
    for e in entries:
        if e.models:
            out.append({"models": list(e.models), "profiles": list(e.profiles)})
        else:
            out.extend(e.profiles)
    return out


@dataclass(frozen=True)
class Key:
    """One key of the config file: its path in the document, how a value given there is read
    (`read`) and one given in the environment variable `env` (`parse`; None: `read`), each
    raising a usage error that starts with `where` (the file and key, or the variable); and how
    `config show` writes the value. `null_unset`: YAML's `~` reads as the key left out."""

    path: str
    read: Callable[[Any, str], Any]
    parse: Callable[[str, str], Any] | None = None
    env: str | None = None
    show: Callable[[Any], Any] = lambda value: value
    null_unset: bool = False


def _key(path: str, default: Any, *args: Any, **kw: Any) -> Any:
    """A `Config` field read from the file's key `path` (`Key`), `default` when it is absent."""
    return field(default=default, metadata={"key": Key(path, *args, **kw)})


def _flag(path: str, default: bool, env: str) -> Any:
    """A true-or-false setting (`_key`): a YAML bool in the file, `true`/`1`/`yes`/`on` or their
    opposites in the environment variable `env`."""
    return _key(path, default, _bool, _env_bool, env=env)


@dataclass(frozen=True)
class Config:
    """Every setting, declared once: its value's type, its default and its key; loading,
    validation, the environment overrides and `config show` read this declaration, in this
    order (`KEYS`)."""

    adopt_existing: bool = _flag(
        "devices.nvidia.adoptExistingMIGInstances", False, "HAMIMIG_ADOPT_EXISTING_MIG_INSTANCES"
    )
    profile_allowlist: tuple[AllowlistEntry, ...] = _key(
        "devices.nvidia.migProfileAllowlist", (), _allowlist, show=_shown_allowlist
    )
    idle_ttl: int = _key(
        "devices.nvidia.idleTTL",
        0,
        _idle_ttl,
        env="HAMIMIG_IDLE_TTL",
        show=lambda seconds: exact_duration(seconds) if seconds else "off",
        null_unset=True,
    )
    """Seconds an instance may stay Idle before `reconcile` reclaims it (0: no limit)."""
    max_idle_per_gpu: int | None = _key(
        "devices.nvidia.maxIdleInstancesPerGPU",
        None,
        _max_idle,
        _env_max_idle,
        env="HAMIMIG_MAX_IDLE_INSTANCES_PER_GPU",
        null_unset=True,
    )
    """How many Idle instances `reconcile` keeps per GPU (None: no limit)."""
    events_max_bytes: int = _key(
        "events.maxBytes",
        DEFAULT_MAX_BYTES,
        _byte_size,
        env="HAMIMIG_EVENTS_MAX_BYTES",
        null_unset=True,
    )
    """The size at which the event journal is rotated (one older file is kept)."""
    pod_source: str | None = _key(
        POD_SOURCE, None, _pod_source, env="HAMIMIG_POD_SOURCE", null_unset=True
    )
    """`kube`: the commands that take a pod source list this node's pods through the API when
    none is named. The only default there is: the assertion that no pod holds an instance is
    about the moment it is made, never a setting."""
    cdi_enabled: bool = _flag("cdi.enabled", True, "HAMIMIG_CDI_ENABLED")
    cdi_kind: str = _key("cdi.kind", DEFAULT_CDI_KIND, _kind, env="HAMIMIG_CDI_KIND")
    cdi_annotations: bool = _flag("cdi.annotations", False, "HAMIMIG_CDI_ANNOTATIONS")
    cdi_base_spec: str = _key(
        "cdi.baseSpec",
        AUTO,
        _base_spec,
        lambda text, where: _base_spec(text, f"{where}:"),
        env="HAMIMIG_CDI_BASE_SPEC",
    )
    """Where a spec's driver edits come from: `auto` (the node's NVIDIA spec), a file, `none`."""
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    """Where each key's value came from (the file, `env VAR`); absent: the default."""

    def profile_allowed(self, model: str, profile: str) -> bool:
        """No allowlist: everything. Otherwise some entry for this model must name the profile."""
        if not self.profile_allowlist:
            return True
        return any(e.covers_model(model) and profile in e.profiles for e in self.profile_allowlist)


KEYS: tuple[tuple[str, Key], ...] = tuple(
    (f.name, f.metadata["key"]) for f in fields(Config) if "key" in f.metadata
)
"""(`Config` field, its key), in `config show`'s order."""
_SECTIONS = ("devices", "devices.nvidia", "cdi", "events", "pods")
"""The document's mappings, in the order they are checked and an unknown key's error lists
them."""


_DECIMAL = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")


def _loader(yaml: Any) -> Any:
    """PyYAML's safe loader, refusing duplicate keys, where only plain decimals are integers
    (docs/formats.md "Config"): an operator writing `idleTTL: 1:30` means an hour and a half,
    not YAML 1.1's base-60 90, and a policy that destroys instances must not guess."""

    class Strict(refusing_duplicates(yaml.SafeLoader)):  # type: ignore[misc]
        pass

    def integer(loader: Any, node: Any) -> Any:
        text = loader.construct_scalar(node)
        return int(text) if _DECIMAL.match(text) else text

    Strict.add_constructor("tag:yaml.org,2002:int", integer)
    return Strict


def _document(path: Path) -> Any:
    """The config file's YAML (None: no file, which means the defaults)."""
    try:
        text = read_input(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError too; an OSError says its errno's text
        raise UsageError(f"cannot read config {path}: {why(exc)}") from None
    import yaml

    try:
        return load_yaml(text, _loader(yaml))  # a SafeLoader: no Python objects
    except DuplicateKey as exc:
        raise UsageError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
        raise UsageError(f"{path}: not valid YAML: {first}") from None


def _mapping(value: Any, where: str, source: str) -> dict[str, Any]:
    """A section of the document, every key of it known (None, as YAML reads `devices:`, is
    an empty one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{source}: {where or 'the document'} must be a mapping")
    paths = [*_SECTIONS, *(key.path for _, key in KEYS)]
    allowed = [p.rpartition(".")[2] for p in paths if p.rpartition(".")[0] == where]
    for key in value:
        if key not in allowed:
            name = f"{where}.{key}" if where else str(key)
            raise UsageError(f"{source}: unknown key {name!r} (allowed: {', '.join(allowed)})")
    return value


def load_config(path: Path, environ: dict[str, str] | None = None) -> Config:
    """The file's settings, then the environment's over them, each checked as `Config`
    declares it: the first problem (the file's before the environment's, each in `KEYS`'
    order) is a usage error naming the key or the variable."""
    env = os.environ if environ is None else environ
    source = str(path)
    sections = {"": _mapping(_document(path), "", source)}
    for name in _SECTIONS:
        parent, _, leaf = name.rpartition(".")
        sections[name] = _mapping(sections[parent].get(leaf), name, source)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for field_name, key in KEYS:
        section, _, leaf = key.path.rpartition(".")
        given = sections[section]
        if leaf in given and not (key.null_unset and given[leaf] is None):
            values[field_name] = key.read(given[leaf], f"{source}: {key.path}")
            sources[key.path] = source
    for field_name, key in KEYS:
        if key.env is not None and key.env in env:
            values[field_name] = (key.parse or key.read)(env[key.env], f"environment {key.env}")
            sources[key.path] = f"env {key.env}"
    return Config(**values, sources=sources)
