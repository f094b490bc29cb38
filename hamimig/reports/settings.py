"""`config show`: every setting's effective value and where it came from."""

from __future__ import annotations

from typing import Any, ClassVar

from hamimig.config import EVENTS_MAX_BYTES, IDLE_TTL, MAX_IDLE, POD_SOURCE, Config
from hamimig.durations import exact_duration
from hamimig.engine.node import Node
from hamimig.engine.results import Reported, Shown


class Setting(Reported):
    key: str
    value: Any
    source: str


class ConfigView(Shown):
    kind: ClassVar[str] = "Config"
    exit_code: ClassVar[int] = 0
    path: str
    settings: tuple[Setting, ...]


def _allowlist(cfg: Config) -> list[Any]:
    out: list[Any] = []
    for e in cfg.profile_allowlist:
        if e.models:
            out.append({"models": list(e.models), "profiles": list(e.profiles)})
        else:
            out.extend(e.profiles)
    return out


def show_config(node: Node) -> ConfigView:
    cfg = node.config()

    def source(key: str) -> str:
        return cfg.sources.get(key, "default")

    def origin(name: str) -> str:
        """A global option: the command line, the environment, or the default."""
        return node.setting_sources.get(name, "default")

    rows = (
        (
            "devices.nvidia.adoptExistingMIGInstances",
            cfg.adopt_existing,
            source("devices.nvidia.adoptExistingMIGInstances"),
        ),
        (
            "devices.nvidia.migProfileAllowlist",
            _allowlist(cfg),
            source("devices.nvidia.migProfileAllowlist"),
        ),
        (IDLE_TTL, exact_duration(cfg.idle_ttl) if cfg.idle_ttl else "off", source(IDLE_TTL)),
        (MAX_IDLE, cfg.max_idle_per_gpu, source(MAX_IDLE)),
        (EVENTS_MAX_BYTES, cfg.events_max_bytes, source(EVENTS_MAX_BYTES)),
        (POD_SOURCE, cfg.pod_source, source(POD_SOURCE)),
        ("cdi.enabled", cfg.cdi_enabled, source("cdi.enabled")),
        ("cdi.kind", cfg.cdi_kind, source("cdi.kind")),
        ("cdi.annotations", cfg.cdi_annotations, source("cdi.annotations")),
        ("cdi.baseSpec", cfg.cdi_base_spec, source("cdi.baseSpec")),
        ("stateDir", str(node.state_dir), origin("state_dir")),
        ("cdiDir", str(node.cdi_dir), origin("cdi_dir")),
        ("config", str(node.config_path), origin("config")),
        ("sim", str(node.sim) if node.sim else None, origin("sim")),
        ("node", node.node_name, origin("node")),
    )
    settings = tuple(Setting(key=k, value=v, source=s) for k, v, s in rows)
    return ConfigView(path=str(node.config_path), settings=settings)
