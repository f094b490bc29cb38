"""The files a GPU node has besides NVML (NVIDIA's CDI spec, `/proc/devices`, the capability
`access` files), written in a simulated node's home (docs/simulator.md), so a machine without
GPUs gets the same spec composition and CDI injection as a GPU node, and a simulated node never
reads the host's `/etc/cdi` or `/proc` nor writes the real node's directories.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hamimig.errors import UsageError

GPU_MAJOR = 195
UVM_MAJOR = 510
CAPS_MAJOR = 508
CTL_MINOR = 255
CAP_FILE_MODE = 0o444
LIB_DIR = "/usr/lib/x86_64-linux-gnu"
HOOK = "/usr/bin/nvidia-cdi-hook"
BASE_FILE = "nvidia.yaml"
LIBRARIES = ("libcuda.so", "libnvidia-ml.so", "libnvidia-nvvm.so", "libnvidia-ptxjitcompiler.so")
BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced")
"""A real node has a few more of each; these are the ones a CUDA container cannot do without."""


@dataclass(frozen=True)
class NodeFiles:
    """Where the node's non-NVML files are: the driver's on a real node, beside a simulated one."""

    mig_minors: Path
    proc_devices: Path
    capabilities: Path
    cdi_base_dir: Path | None
    """The one directory a simulated node's `cdi.baseSpec: auto` searches; None on a real node
    (which searches the runtimes' CDI directories)."""

    @classmethod
    def within(cls, directory: Path) -> NodeFiles:
        return cls(
            mig_minors=directory / "mig-minors",
            proc_devices=directory / "proc-devices",
            capabilities=directory / "nvidia-capabilities",
            cdi_base_dir=directory / "nvidia-cdi",
        )

    @classmethod
    def of(cls, node: Path) -> NodeFiles:
        """In the home the node file records; beside the file for a node made before homes
        (whose files two nodes in one directory shared)."""
        home = recorded_home(node)
        return cls.within(node.parent if home is None else node.parent / home)


HOME_SUFFIX = ".d"
# Up to 32 GPUs, 15 GIs each, 8 CIs each: the shape of /proc/driver/nvidia-caps/mig-minors.
MINORS_GPUS, MINORS_GIS, MINORS_CIS = 32, 15, 8


def capability_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The minor `mig-minors` gives `gpu<minor>/gi<gi>[/ci<ci>]/access` on a simulated node."""
    per_gi = 1 + MINORS_CIS
    return 3 + gpu_minor * MINORS_GIS * per_gi + gi * per_gi + (0 if ci is None else 1 + ci)


@functools.cache
def mig_minors_text() -> str:
    """The content of a driver's `mig-minors` file for every possible GPU minor."""
    lines = ["config 1", "monitor 2"]
    for gpu in range(MINORS_GPUS):
        for gi in range(MINORS_GIS):
            lines.append(f"gpu{gpu}/gi{gi}/access {capability_minor(gpu, gi)}")
            for ci in range(MINORS_CIS):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {capability_minor(gpu, gi, ci)}")
    return "\n".join(lines) + "\n"


def home_problem(name: object) -> str | None:
    """Why a recorded home is not the name of a directory beside the node file, if it is not:
    a path elsewhere would have the simulator write outside its node."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
        return f"home must be the name of a directory beside the node file, not {name!r}"
    return None


def recorded_home(node: Path) -> str | None:
    """The home the node file records; None for a node made before homes, and for a file that
    cannot be read or names no valid one (loading the node refuses it with the reason)."""
    if not node.is_file():  # a FIFO or device would block the read, or never end it
        return None
    try:
        doc = json.loads(node.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = doc.get("home") if isinstance(doc, dict) else None
    return name if isinstance(name, str) and home_problem(name) is None else None


def no_node(node: Path) -> UsageError:
    """The refusal of every command but `sim init` on a simulated node that does not exist."""
    return UsageError(f"no simulated node at {node}: run 'hamimig --sim {node} sim init'")


def not_a_node(node: Path) -> UsageError | None:
    """Why `node` cannot be a simulated node's file: it does not exist (`no_node`), or it is no
    regular file (a directory; a FIFO, whose read would block); None when it may be one."""
    if node.is_file():
        return None
    if not node.exists():
        return no_node(node)
    return UsageError(f"{node} is no regular file, so no simulated node")


def node_home(node: Path) -> Path:
    """The node's own directory: its state and CDI directories, config and driver files, unless
    the command line names others. `<file>.d` for a node made before homes, or not made yet."""
    return node.parent / (recorded_home(node) or node.name + HOME_SUFFIX)


def _node(path: str, major: int, minor: int) -> dict[str, Any]:
    return {"path": path, "type": "c", "major": major, "minor": minor}


def _gpu(minor: int) -> dict[str, Any]:
    return _node(f"/dev/nvidia{minor}", GPU_MAJOR, minor)


def _cap(minor: int) -> dict[str, Any]:
    return _node(f"/dev/nvidia-caps/nvidia-cap{minor}", CAPS_MAJOR, minor)


def _device(name: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "containerEdits": {"deviceNodes": list(nodes)}}


def _hook(*args: str) -> dict[str, Any]:
    return {"hookName": "createContainer", "path": HOOK, "args": ["nvidia-cdi-hook", *args]}


def _mount(path: str) -> dict[str, Any]:
    return {"hostPath": path, "containerPath": path, "options": ["ro", "nosuid", "nodev", "bind"]}


def base_spec(gpus: list[dict[str, Any]], driver: str) -> dict[str, Any]:
    """nvidia-ctk's spec for these GPUs."""
    libraries = [f"{LIB_DIR}/{name}.{driver}" for name in LIBRARIES]
    common: dict[str, Any] = {
        "deviceNodes": [
            _node("/dev/nvidia-modeset", GPU_MAJOR, 254),
            _node("/dev/nvidia-uvm", UVM_MAJOR, 0),
            _node("/dev/nvidia-uvm-tools", UVM_MAJOR, 1),
            _node("/dev/nvidiactl", GPU_MAJOR, CTL_MINOR),
        ],
        "hooks": [
            _hook("create-symlinks", "--link", f"libcuda.so.1::{LIB_DIR}/libcuda.so"),
            _hook("update-ldcache", "--folder", LIB_DIR),
        ],
        "mounts": [
            *(_mount(path) for path in libraries),
            *(_mount(f"/usr/bin/{name}") for name in BINARIES),
            _mount(f"/lib/firmware/nvidia/{driver}/gsp_ga10x.bin"),
            _mount("/run/nvidia-persistenced/socket"),
        ],
    }
    devices: list[dict[str, Any]] = []
    for gpu in sorted(gpus, key=lambda g: int(g["index"])):
        device = _device(str(gpu["index"]), _gpu(gpu["minor"]))
        # One edits object for both names: the YAML holds it as an anchor and its alias.
        devices += [device, {"name": str(gpu["uuid"]), "containerEdits": device["containerEdits"]}]
    first = min(gpus, key=lambda g: int(g["index"]))
    minor = int(first["minor"])
    caps = (_cap(capability_minor(minor, 1)), _cap(capability_minor(minor, 1, 0)))
    devices.append(_device(f"{first['index']}:0", _gpu(minor), *caps))
    devices.append(_device("all", *(_gpu(int(g["minor"])) for g in gpus)))
    # Device names starting with a digit need 0.5.0: nvidia-ctk declares it for that reason.
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": devices,
        "containerEdits": common,
    }


def proc_devices_text() -> str:
    """`/proc/devices` of a node with the NVIDIA driver loaded (majors as on such a node)."""
    return (
        "Character devices:\n"
        "  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n  5 /dev/console\n  5 /dev/ptmx\n"
        "  7 vcs\n 10 misc\n 13 input\n 136 pts\n"
        f"{GPU_MAJOR} nvidia-frontend\n{GPU_MAJOR} nvidia-nvlink\n"
        f"{CAPS_MAJOR} nvidia-caps\n509 nvidia-caps-imex-channels\n"
        f"{UVM_MAJOR} nvidia-uvm\n511 nvidia-nvswitch\n"
        "\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n"
    )


FILE_MODE = 0o644
DIR_MODE = 0o755


def put(path: Path, text: str) -> None:
    """Write one of the driver's files with the mode the driver leaves, whatever the umask: the
    commands that read the base spec refuse one others could forge (a umask of 002 would make
    it group-writable)."""
    path.write_text(text, encoding="utf-8")
    path.chmod(FILE_MODE)


def make_dirs(root: Path, *parts: str) -> Path:
    """`root/parts…`, each level made 0755 whatever the umask, as `put` does (levels that exist
    are kept as they are)."""
    levels = list(itertools.accumulate(parts, operator.truediv, initial=root))
    for level in levels:
        try:
            level.mkdir()
        except FileExistsError:
            continue
        level.chmod(DIR_MODE)
    return levels[-1]


def access_text(minor: int) -> str:
    """A capability's `access` file as the driver writes it (mode in decimal)."""
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {CAP_FILE_MODE}\nDeviceFileModify: 1\n"


def write_access(files: NodeFiles, gpu_minor: int, gi_id: int, ci_id: int | None) -> None:
    """Publish a capability as the driver does when a GI or CI is created (one `mig-minors`
    numbers)."""
    if gpu_minor < MINORS_GPUS and gi_id < MINORS_GIS:
        parts = [f"gpu{gpu_minor}", "mig", f"gi{gi_id}", *([] if ci_id is None else [f"ci{ci_id}"])]
        minor = capability_minor(gpu_minor, gi_id, ci_id)
        put(make_dirs(files.capabilities, *parts) / "access", access_text(minor))


def write_node_files(files: NodeFiles, gpus: list[dict[str, Any]], driver: str) -> None:
    """What `sim init` writes beside the state: `mig-minors`, the base spec, `/proc/devices`,
    and the capabilities directory (its `access` files appear as instances are created)."""
    import shutil

    import yaml

    assert files.cdi_base_dir is not None
    shutil.rmtree(files.capabilities, ignore_errors=True)
    for gpu in gpus:
        make_dirs(files.capabilities, f"gpu{gpu['minor']}", "mig")
    put(files.mig_minors, mig_minors_text())
    put(files.proc_devices, proc_devices_text())
    make_dirs(files.cdi_base_dir)
    spec = base_spec(gpus, driver)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter when present
    text = yaml.dump(spec, Dumper=dumper, sort_keys=False, default_flow_style=False)
    put(files.cdi_base_dir / BASE_FILE, text)
