"""`config show`: every setting's effective value and where it came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hamimig.config import KEYS
from hamimig.engine.node import Node
from hamimig.engine.results import Json


@dataclass(frozen=True)
class Setting:
    key: str
    value: Any
    source: str

    def to_json(self) -> Json:
        return {"key": self.key, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class ConfigView:
    kind: ClassVar[str] = "Config"
    exit_code: ClassVar[int] = 0
    path: str
    settings: tuple[Setting, ...]

    def to_json(self) -> Json:
        return {
            "kind": self.kind,
            "path": self.path,
            "settings": [s.to_json() for s in self.settings],
        }


def show_config(node: Node) -> ConfigView:
    cfg = node.config()
    settings = [
        Setting(key.path, key.show(getattr(cfg, name)), cfg.sources.get(key.path, "default"))
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
        settings.append(Setting(key, value, node.setting_sources.get(name, "default")))
    return ConfigView(path=str(node.config_path), settings=tuple(settings))
