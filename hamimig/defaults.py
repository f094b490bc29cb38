"""Default paths, importable without loading the engine (the CLI's option defaults)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_STATE_DIR = Path("/var/run/hami/dynamic-mig-state")
DEFAULT_CDI_DIR = Path("/var/run/cdi")
DEFAULT_CONFIG = Path("/etc/hamimig/config.yaml")
