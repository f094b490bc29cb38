"""The YAML config, mirroring the device plugin's Helm values, plus environment overrides.

A missing file means defaults; anything present is validated strictly (an unknown key or a
wrong type is a usage error naming it), because a typo in `adoptExistingMIGInstances` must not
silently change what recovery is allowed to claim.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hamimig.durations import DurationError, parse_duration
from hamimig.errors import UsageError
from hamimig.store.cdi_base import AUTO, check_setting
from hamimig.store.cdi_rules import check_kind
from hamimig.store.events import DEFAULT_MAX_BYTES, MAX_MAX_BYTES, MIN_MAX_BYTES
from hamimig.store.files import read_input
from hamimig.store.yamlload import DuplicateKey, refusing_duplicates
from hamimig.store.yamlload import load as load_yaml

DEFAULT_CDI_KIND = "k8s.device-plugin.nvidia.com/dynamic-mig"


@dataclass(frozen=True)
class AllowlistEntry:
    """Profiles allowed on GPUs whose model matches one of `models` (empty: every model)."""

    profiles: tuple[str, ...]
    models: tuple[str, ...] = ()

    def covers_model(self, model: str) -> bool:
        wanted = model.lower()
        return not self.models or any(m.lower() in wanted for m in self.models)


@dataclass(frozen=True)
class Config:
    adopt_existing: bool = False
    profile_allowlist: tuple[AllowlistEntry, ...] = ()
    cdi_enabled: bool = True
    cdi_kind: str = DEFAULT_CDI_KIND
    cdi_annotations: bool = False
    cdi_base_spec: str = AUTO
    """Where a spec's driver edits come from: `auto` (the node's NVIDIA spec), a file, `none`."""
    idle_ttl: int = 0
    """Seconds an instance may stay Idle before `reconcile` reclaims it (0: no limit)."""
    max_idle_per_gpu: int | None = None
    """How many Idle instances `reconcile` keeps per GPU (None: no limit)."""
    events_max_bytes: int = DEFAULT_MAX_BYTES
    """The size at which the event journal is rotated (one older file is kept)."""
    pod_source: str | None = None
    """`kube`: the commands that take a pod source list this node's pods through the API when
    none is named. The only default there is: the assertion that no pod holds an instance is
    about the moment it is made, never a setting."""
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def profile_allowed(self, model: str, profile: str) -> bool:
        """No allowlist: everything. Otherwise some entry for this model must name the profile."""
        if not self.profile_allowlist:
            return True
        return any(e.covers_model(model) and profile in e.profiles for e in self.profile_allowlist)


_KEYS: dict[str, tuple[str, ...]] = {
    "": ("devices", "cdi", "events", "pods"),
    "devices": ("nvidia",),
    "devices.nvidia": (
        "adoptExistingMIGInstances",
        "migProfileAllowlist",
        "idleTTL",
        "maxIdleInstancesPerGPU",
    ),
    "cdi": ("enabled", "kind", "annotations", "baseSpec"),
    "events": ("maxBytes",),
    "pods": ("source",),
}

ENV_OVERRIDES = {
    "HAMIMIG_ADOPT_EXISTING_MIG_INSTANCES": "devices.nvidia.adoptExistingMIGInstances",
    "HAMIMIG_CDI_ENABLED": "cdi.enabled",
    "HAMIMIG_CDI_KIND": "cdi.kind",
    "HAMIMIG_CDI_ANNOTATIONS": "cdi.annotations",
    "HAMIMIG_CDI_BASE_SPEC": "cdi.baseSpec",
    "HAMIMIG_IDLE_TTL": "devices.nvidia.idleTTL",
    "HAMIMIG_MAX_IDLE_INSTANCES_PER_GPU": "devices.nvidia.maxIdleInstancesPerGPU",
    "HAMIMIG_EVENTS_MAX_BYTES": "events.maxBytes",
    "HAMIMIG_POD_SOURCE": "pods.source",
}

IDLE_TTL = "devices.nvidia.idleTTL"
MAX_IDLE = "devices.nvidia.maxIdleInstancesPerGPU"
EVENTS_MAX_BYTES = "events.maxBytes"
POD_SOURCE = "pods.source"
POD_SOURCES = ("kube",)
MAX_IDLE_LIMIT = 1000
"""More Idle instances than any GPU can hold (7 at most today): a larger cap is a typo."""


def _mapping(value: Any, where: str, source: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{source}: {where or 'the document'} must be a mapping")
    allowed = _KEYS[where]
    for key in value:
        if key not in allowed:
            name = f"{where}.{key}" if where else str(key)
            raise UsageError(f"{source}: unknown key {name!r} (allowed: {', '.join(allowed)})")
    return value


def _bool(value: Any, name: str, source: str) -> bool:
    if isinstance(value, bool):
        return value
    raise UsageError(f"{source}: {name} must be true or false, not {value!r}")


def _pod_source(value: Any, where: str) -> str:
    if value in POD_SOURCES:
        return str(value)
    raise UsageError(
        f"{where}: expected 'kube', not {value!r}: the API is the only default pod source (that "
        "no pod holds a MIG instance is an assertion about now, made on each command)"
    )


def _parse_bool_env(text: str, name: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"environment {name}={text!r}: expected true or false")


def _idle_ttl(value: Any, where: str) -> int:
    """A duration string or whole seconds; 0 is off. YAML gives ints for `3600`, strings for
    `1h`; a bool or a float is refused (`1.5` is not whole seconds). `where` names the
    setting: the file and key, or the environment variable."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{where} must be a duration (90s, 30m, 1h30m) or seconds")
    try:
        return parse_duration(str(value))
    except DurationError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _max_idle(value: Any, where: str) -> int:
    if isinstance(value, str):
        text = value.strip()
        if not (text.isascii() and text.isdigit()):
            raise UsageError(f"{where} must be a whole number of at least 0, not {value!r}")
        if len(text) > 12:
            raise UsageError(f"{where} must be at most {MAX_IDLE_LIMIT}, not {text}")
        value = int(text)
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


def _allowlist(value: Any, source: str) -> tuple[AllowlistEntry, ...]:
    name = "devices.nvidia.migProfileAllowlist"
    if value is None:
        return ()
    if not isinstance(value, list):
        raise UsageError(f"{source}: {name} must be a list")
    entries: list[AllowlistEntry] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item:
            entries.append(AllowlistEntry(profiles=(item,)))
            continue
        if isinstance(item, dict):
            unknown = set(item) - {"models", "profiles"}
            if unknown:
                raise UsageError(f"{source}: unknown key {sorted(unknown)[0]!r} in {name}[{i}]")
            models = item.get("models", [])
            profiles = item.get("profiles", [])
            if (
                isinstance(models, list)
                and isinstance(profiles, list)
                and all(isinstance(m, str) and m for m in models)
                and all(isinstance(p, str) and p for p in profiles)
            ):
                entries.append(AllowlistEntry(profiles=tuple(profiles), models=tuple(models)))
                continue
        raise UsageError(
            f"{source}: {name}[{i}] must be a profile name or "
            "{models: [names], profiles: [names]}"
        )
    return tuple(entries)


_DECIMAL = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")


def _loader(yaml: Any) -> Any:
    """PyYAML's safe loader, except that only plain decimal integers are integers, and a key
    given twice in one mapping is refused (`hamimig.store.yamlload`).

    YAML 1.1 also reads `1:30` as 90 (base 60), `010` as 8 and `0x10` as 16; an operator who
    writes `idleTTL: 1:30` means an hour and a half, not 90 seconds, and a policy that destroys
    instances must not guess. Every other integer form stays text, which the settings then
    refuse or read in their own grammar (`010` as a duration is ten seconds).
    """

    class Strict(refusing_duplicates(yaml.SafeLoader)):  # type: ignore[misc]
        pass

    def integer(loader: Any, node: Any) -> Any:
        text = loader.construct_scalar(node)
        if _DECIMAL.match(text):
            return int(text)
        return text

    Strict.add_constructor("tag:yaml.org,2002:int", integer)
    return Strict


def load_config(path: Path, environ: dict[str, str] | None = None) -> Config:
    env = os.environ if environ is None else environ
    sources: dict[str, str] = {}
    raw: Any = None
    source = str(path)
    try:
        text: str | None = read_input(path).decode("utf-8")
    except FileNotFoundError:
        text = None
    except OSError as exc:
        raise UsageError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise UsageError(f"cannot read config {path}: {exc}") from None
    if text is not None:
        import yaml

        try:
            raw = load_yaml(text, _loader(yaml))  # a SafeLoader: no Python objects
        except DuplicateKey as exc:
            raise UsageError(f"{source}: {exc}") from None
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
            raise UsageError(f"{source}: not valid YAML: {first}") from None
    top = _mapping(raw, "", source)
    devices = _mapping(top.get("devices"), "devices", source)
    nvidia = _mapping(devices.get("nvidia"), "devices.nvidia", source)
    cdi = _mapping(top.get("cdi"), "cdi", source)
    events = _mapping(top.get("events"), "events", source)
    pods = _mapping(top.get("pods"), "pods", source)

    values: dict[str, Any] = {}
    for key, container, field_name in (
        ("devices.nvidia.adoptExistingMIGInstances", nvidia, "adoptExistingMIGInstances"),
        ("cdi.enabled", cdi, "enabled"),
        ("cdi.annotations", cdi, "annotations"),
    ):
        if field_name in container:
            values[key] = _bool(container[field_name], key, source)
            sources[key] = source
    if "kind" in cdi:
        problems = check_kind(cdi["kind"])
        if problems:
            raise UsageError(f"{source}: cdi.kind: {problems[0]}")
        values["cdi.kind"] = cdi["kind"]
        sources["cdi.kind"] = source
    if "baseSpec" in cdi:
        problem = check_setting(cdi["baseSpec"])
        if problem:
            raise UsageError(f"{source}: cdi.baseSpec {problem}")
        values["cdi.baseSpec"] = cdi["baseSpec"]
        sources["cdi.baseSpec"] = source
    if "idleTTL" in nvidia and nvidia["idleTTL"] is not None:
        # YAML's `~` (null) reads as "absent", as for the cap: no limit.
        values[IDLE_TTL] = _idle_ttl(nvidia["idleTTL"], f"{source}: {IDLE_TTL}")
        sources[IDLE_TTL] = source
    if "maxIdleInstancesPerGPU" in nvidia and nvidia["maxIdleInstancesPerGPU"] is not None:
        # YAML's `~` (null) reads as "absent": no cap, as when the key is left out.
        given = nvidia["maxIdleInstancesPerGPU"]
        if isinstance(given, str):
            # A string here is a quoted value or a form YAML 1.1 reads in another base (010).
            raise UsageError(
                f"{source}: {MAX_IDLE} must be a plain decimal whole number, not {given!r}"
            )
        values[MAX_IDLE] = _max_idle(nvidia["maxIdleInstancesPerGPU"], f"{source}: {MAX_IDLE}")
        sources[MAX_IDLE] = source
    if events.get("maxBytes") is not None:
        values[EVENTS_MAX_BYTES] = _byte_size(events["maxBytes"], f"{source}: {EVENTS_MAX_BYTES}")
        sources[EVENTS_MAX_BYTES] = source
    if pods.get("source") is not None:
        values[POD_SOURCE] = _pod_source(pods["source"], f"{source}: {POD_SOURCE}")
        sources[POD_SOURCE] = source
    allowlist = _allowlist(nvidia.get("migProfileAllowlist"), source)
    if "migProfileAllowlist" in nvidia:
        sources["devices.nvidia.migProfileAllowlist"] = source

    for var, key in ENV_OVERRIDES.items():
        if var in env:
            text_value = env[var]
            if key == "cdi.kind":
                problems = check_kind(text_value)
                if problems:
                    raise UsageError(f"environment {var}: {problems[0]}")
                values[key] = text_value
            elif key == "cdi.baseSpec":
                problem = check_setting(text_value)
                if problem:
                    raise UsageError(f"environment {var}: {problem}")
                values[key] = text_value
            elif key == IDLE_TTL:
                values[key] = _idle_ttl(text_value, f"environment {var}")
            elif key == MAX_IDLE:
                values[key] = _max_idle(text_value, f"environment {var}")
            elif key == EVENTS_MAX_BYTES:
                values[key] = _byte_size(text_value, f"environment {var}")
            elif key == POD_SOURCE:
                values[key] = _pod_source(text_value, f"environment {var}")
            else:
                values[key] = _parse_bool_env(text_value, var)
            sources[key] = f"env {var}"

    return Config(
        adopt_existing=values.get("devices.nvidia.adoptExistingMIGInstances", False),
        profile_allowlist=allowlist,
        cdi_enabled=values.get("cdi.enabled", True),
        cdi_kind=values.get("cdi.kind", DEFAULT_CDI_KIND),
        cdi_annotations=values.get("cdi.annotations", False),
        cdi_base_spec=values.get("cdi.baseSpec", AUTO),
        idle_ttl=values.get(IDLE_TTL, 0),
        max_idle_per_gpu=values.get(MAX_IDLE),
        events_max_bytes=values.get(EVENTS_MAX_BYTES, DEFAULT_MAX_BYTES),
        pod_source=values.get(POD_SOURCE),
        sources=sources,
    )
