"""CDI as tests see it: where `allocate` writes an instance's spec (`hami-dynamic-mig-mig-<sha256
of the MIG UUID>.json`, computed here independently of hamimig) and the device name it declares,
the simulated node's NVIDIA spec that instance specs are composed from, the node's capability
minors, and `cdi-check`, the reference CDI library's loader that judges the specs we write."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import yaml

from tests.support.cli import Cli
from tests.support.node import node_dir
from tests.support.processes import REPO_ROOT
from tests.support.records import sha

KIND = "k8s.device-plugin.nvidia.com/dynamic-mig"


def spec_path(cli: Cli, mig: str) -> Path:
    return cli.cdi_dir / f"hami-dynamic-mig-mig-{sha(mig)}.json"


def spec_of(cli: Cli, mig: str) -> dict[str, Any]:
    """The CDI spec of `mig`, as written."""
    data: dict[str, Any] = json.loads(spec_path(cli, mig).read_text())
    return data


def qualified(mig: str) -> str:
    """The fully qualified CDI device name of `mig`'s spec (`kind=name`)."""
    return f"{KIND}=mig-{sha(mig)}"


def base_dir(cli: Cli) -> Path:
    """The simulated node's NVIDIA CDI directory, as `sim show` names it."""
    return Path(cli.json("sim", "show").json()["cdiBaseDir"])


def base_file(cli: Cli) -> Path:
    """NVIDIA's spec (nvidia-ctk's shape) that instance specs are composed from."""
    return base_dir(cli) / "nvidia.yaml"


def load_base(cli: Cli) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(base_file(cli).read_text())
    return data


def cap_minors(cli: Cli) -> dict[str, int]:
    """The node's `mig-minors` table: capability path (`gpu0/gi9/access`) -> minor."""
    table = {}
    for line in (node_dir(cli.sim) / "mig-minors").read_text().splitlines():
        if line.strip():
            key, value = line.split()
            table[key] = int(value)
    return table


@functools.cache
def find_cdi_check() -> Path | None:
    """`cdi-check` (the reference CDI library's loader) from $HAMIMIG_CDI_CHECK or
    `.tools/cdi-check`, where `.ci/run` builds it; None when neither is there."""
    for candidate in (os.environ.get("HAMIMIG_CDI_CHECK"), REPO_ROOT / ".tools" / "cdi-check"):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None
