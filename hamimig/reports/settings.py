"""`config show`: every setting's effective value and where it came from."""

from __future__ import annotations

from typing import Any, ClassVar

from hamimig.config import KEYS
from hamimig.engine.node import Node
from hamimig.engine.results import Reported
from hamimig.reports.views import Report


class Setting(Reported):
    key: str
    value: Any
    source: str


class ConfigView(Report):
    kind: ClassVar[str] = "Config"
    path: str
    settings: tuple[Setting, ...]


def show_config(node: Node) -> ConfigView:
    cfg = node.config()
    settings = [
        Setting(
            key=key.path,
            value=key.show(getattr(cfg, name)),
            source=cfg.sources.get(key.path, "default"),
        )
        for name, key in KEYS
    ]
    # The global options: the command line, the environment, or the default.
    for key, name, value in (
        ("stateDir", "state_dir", str(node.state_dir)),
        ("cdiDir", "cdi_dir", str(node.cdi_dir)),
        ("config", "config", str(node.config_path)),
        ("sim", "sim", str(node.sim) if node.sim else None),
        ("node", "node", node.node_name),
    ):
        source = node.setting_sources.get(name, "default")
        settings.append(Setting(key=key, value=value, source=source))
    return ConfigView(path=str(node.config_path), settings=tuple(settings))
