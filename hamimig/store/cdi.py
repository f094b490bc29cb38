"""One CDI spec file per MIG instance, in the format container runtimes accept.

The spec belongs to the instance, not to a pod (seed, "CDI lifecycle"): it is written when the
instance is created, kept while it is Active or Idle, and removed only after the GI/CI is gone.
Its names are HAMi's (FACTS.md section 4), so a node can move between HAMi's device plugin and
hamimig without orphaning or duplicating a device.

Runtimes parse specs with the reference Go library, strictly: an unknown field or a `cdiVersion`
lower than the content needs makes the whole file invalid, and a runtime built on an older
library rejects versions it does not know. So every spec declares the *minimum* version its
content needs (as NVIDIA's tools do), and `render` checks each spec against the library's rules
before it is written: a spec that no runtime would load must never reach the CDI directory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hamimig.errors import HardwareError
from hamimig.store._fields import uuid_digest
from hamimig.store.files import (
    FileOp,
    atomic_write,
    check_dir,
    describe_entry,
    ensure_dir,
    list_names,
    no_faults,
    read_regular,
    remove_file,
)

DEFAULT_KIND = "k8s.device-plugin.nvidia.com/dynamic-mig"
SPEC_MODE = 0o644
CDI_DIR_MODE = 0o755
SPEC_PREFIX = "hami-dynamic-mig-mig-"
SPEC_SUFFIX = ".json"
MIG_UUID_ANNOTATION = "hami.io/mig-uuid"

KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
"""The versions the reference library accepts (0.1.0/0.2.0 predate the base features)."""

_VENDOR_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS_RE = _VENDOR_RE
_DEVICE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_ANNOTATION_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MAX_ANNOTATIONS_BYTES = 256 * 1024

_SPEC_FIELDS = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_FIELDS = frozenset({"name", "annotations", "containerEdits"})
_EDITS_FIELDS = frozenset(
    {"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"}
)
_NODE_FIELDS = frozenset(
    {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
)
_MOUNT_FIELDS = frozenset({"hostPath", "containerPath", "options", "type"})
_HOOK_FIELDS = frozenset({"hookName", "path", "args", "env", "timeout"})
_HOOK_NAMES = frozenset(
    {
        "prestart",
        "createRuntime",
        "createContainer",
        "startContainer",
        "poststart",
        "poststop",
    }
)
_RDT_FIELDS = frozenset(
    {
        "closID",
        "l3CacheSchema",
        "memBwSchema",
        "schemata",
        "enableMonitoring",
        "enableCMT",
        "enableMBM",
    }
)
_NETDEV_FIELDS = frozenset({"hostInterfaceName", "name"})
_NODE_TYPES = frozenset({"", "b", "c", "u", "p"})


@dataclass(frozen=True)
class CdiDevice:
    """What a container needs to use one MIG device: its GPU's and its two capability minors."""

    mig_uuid: str
    gpu_minor: int
    gi_cap_minor: int
    ci_cap_minor: int


def device_name(mig_uuid: str) -> str:
    """HAMi's device name: hashed, since an old-style MIG UUID contains `/`."""
    return f"mig-{uuid_digest(mig_uuid)}"


def spec_file_name(mig_uuid: str) -> str:
    return f"{SPEC_PREFIX}{uuid_digest(mig_uuid)}{SPEC_SUFFIX}"


# --------------------------------------------------------------------------------------------
# Building


def build_spec(
    kind: str, dev: CdiDevice, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The spec for one MIG device, declaring the lowest `cdiVersion` its content allows.

    The lowest version is what keeps the spec loadable by runtimes built on older libraries
    (Debian 12's stops at 0.5.0); annotations are therefore opt-in, since they force 0.6.0.
    """
    body: dict[str, Any] = {"kind": kind}
    if annotations:
        body["annotations"] = dict(annotations)
    body["devices"] = [
        {
            "name": device_name(dev.mig_uuid),
            "containerEdits": {
                "deviceNodes": [
                    {"path": f"/dev/nvidia{dev.gpu_minor}"},
                    {"path": f"/dev/nvidia-caps/nvidia-cap{dev.gi_cap_minor}"},
                    {"path": f"/dev/nvidia-caps/nvidia-cap{dev.ci_cap_minor}"},
                ]
            },
        }
    ]
    # NVIDIA_VISIBLE_DEVICES=void stops the NVIDIA runtime hook from injecting devices of its own
    # on top of the ones this spec grants.
    body["containerEdits"] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [
            {"path": "/dev/nvidiactl"},
            {"path": "/dev/nvidia-uvm"},
            {"path": "/dev/nvidia-uvm-tools"},
        ],
    }
    return {"cdiVersion": minimum_version(body), **body}


# --------------------------------------------------------------------------------------------
# Versions


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _edits_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The spec-level edits and every device's edits (whatever of them are objects)."""
    found: list[dict[str, Any]] = []
    edits = spec.get("containerEdits")
    if isinstance(edits, dict):
        found.append(edits)
    for device in _devices_of(spec):
        edits = device.get("containerEdits")
        if isinstance(edits, dict):
            found.append(edits)
    return found


def _devices_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return []
    return [d for d in devices if isinstance(d, dict)]


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def minimum_version(spec: dict[str, Any]) -> str:
    """The lowest `cdiVersion` the reference library accepts for this content (FACTS.md 3)."""
    edits = _edits_of(spec)
    devices = _devices_of(spec)
    if any(e.get("netDevices") for e in edits):
        return "1.1.0"
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits):
        return "0.7.0"
    kind = spec.get("kind")
    cls = kind.split("/", 1)[1] if isinstance(kind, str) and "/" in kind else ""
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in cls:
        return "0.6.0"
    names = [d.get("name") for d in devices]
    if any(isinstance(n, str) and n[:1].isdigit() for n in names) or any(
        node.get("hostPath") for e in edits for node in _dicts(e.get("deviceNodes"))
    ):
        return "0.5.0"
    if any(mount.get("type") for e in edits for mount in _dicts(e.get("mounts"))):
        return "0.4.0"
    return "0.3.0"


# --------------------------------------------------------------------------------------------
# Validation


def check_kind(kind: Any) -> list[str]:
    """Problems with a `vendor/class` kind (also for checking configuration early)."""
    if not isinstance(kind, str) or "/" not in kind:
        return [f"kind {kind!r} is not of the form vendor/class"]
    vendor, cls = kind.split("/", 1)
    problems = []
    if not _VENDOR_RE.match(vendor):
        problems.append(f"kind {kind!r}: invalid vendor {vendor!r}")
    if not _CLASS_RE.match(cls):
        problems.append(f"kind {kind!r}: invalid class {cls!r}")
    return problems


def _unknown(obj: dict[str, Any], allowed: frozenset[str], where: str) -> list[str]:
    return [f"{where}: unknown field {key!r}" for key in obj if key not in allowed]


def _check_annotations(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f"{where}.annotations must be an object"]
    problems: list[str] = []
    total = 0
    for key, val in value.items():
        if not isinstance(val, str):
            problems.append(f"{where}.annotations[{key!r}] must be a string")
            continue
        total += len(key) + len(val)
        prefix, _, name = key.rpartition("/")
        if len(name) > 63 or not _ANNOTATION_NAME_RE.match(name):
            problems.append(f"{where}.annotations: invalid key {key!r}")
        elif "/" in key and (
            not prefix
            or len(prefix) > 253
            or not all(_DNS_LABEL_RE.match(label) for label in prefix.split("."))
        ):
            problems.append(f"{where}.annotations: invalid key prefix in {key!r}")
    if total > _MAX_ANNOTATIONS_BYTES:
        problems.append(f"{where}.annotations are larger than {_MAX_ANNOTATIONS_BYTES} bytes")
    return problems


def _check_env(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        return [f"{where}.env must be a list"]
    problems: list[str] = []
    for entry in value:
        if not isinstance(entry, str) or entry.find("=") <= 0:
            problems.append(f"{where}.env: invalid entry {entry!r} (needs NAME=VALUE)")
    return problems


def _check_list(value: Any, where: str) -> tuple[list[dict[str, Any]], list[str]]:
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [f"{where} must be a list"]
    bad = [
        f"{where}[{i}] must be an object" for i, v in enumerate(value) if not isinstance(v, dict)
    ]
    return [v for v in value if isinstance(v, dict)], bad


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_node(node: dict[str, Any], where: str) -> list[str]:
    problems = _unknown(node, _NODE_FIELDS, where)
    path = node.get("path")
    if not isinstance(path, str) or not path:
        problems.append(f"{where}: missing device path")
    elif not path.startswith("/"):
        problems.append(f"{where}: device path {path!r} is not absolute")
    host_path = node.get("hostPath")
    if host_path is not None and not isinstance(host_path, str):
        problems.append(f"{where}: hostPath must be a string")
    node_type = node.get("type", "")
    if node_type not in _NODE_TYPES:
        problems.append(f"{where}: invalid device type {node_type!r} (use b, c, u or p)")
    perms = node.get("permissions", "")
    if not isinstance(perms, str) or any(c not in "rwm" for c in perms):
        problems.append(f"{where}: invalid permissions {perms!r} (only r, w, m)")
    for key in ("major", "minor", "fileMode", "uid", "gid"):
        if key in node and not _is_int(node[key]):
            problems.append(f"{where}: {key} must be an integer")
    return problems


def _check_mount(mount: dict[str, Any], where: str) -> list[str]:
    problems = _unknown(mount, _MOUNT_FIELDS, where)
    for key in ("hostPath", "containerPath"):
        if not isinstance(mount.get(key), str) or not mount.get(key):
            problems.append(f"{where}: missing {key}")
    options = mount.get("options")
    if options is not None and (
        not isinstance(options, list) or not all(isinstance(o, str) for o in options)
    ):
        problems.append(f"{where}: options must be a list of strings")
    if "type" in mount and not isinstance(mount["type"], str):
        problems.append(f"{where}: type must be a string")
    return problems


def _check_hook(hook: dict[str, Any], where: str) -> list[str]:
    problems = _unknown(hook, _HOOK_FIELDS, where)
    if hook.get("hookName") not in _HOOK_NAMES:
        problems.append(f"{where}: invalid hook name {hook.get('hookName')!r}")
    if not isinstance(hook.get("path"), str) or not hook.get("path"):
        problems.append(f"{where}: missing hook path")
    problems += _check_env(hook.get("env"), where)
    return problems


def _check_edits(edits: Any, where: str) -> tuple[list[str], bool]:
    """Problems in one `containerEdits`, and whether it is empty."""
    if edits is None:
        return [], True
    if not isinstance(edits, dict):
        return [f"{where} must be an object"], True
    problems = _unknown(edits, _EDITS_FIELDS, where)
    problems += _check_env(edits.get("env"), where)
    nodes, bad = _check_list(edits.get("deviceNodes"), f"{where}.deviceNodes")
    problems += bad
    for i, node in enumerate(nodes):
        problems += _check_node(node, f"{where}.deviceNodes[{i}]")
    mounts, bad = _check_list(edits.get("mounts"), f"{where}.mounts")
    problems += bad
    for i, mount in enumerate(mounts):
        problems += _check_mount(mount, f"{where}.mounts[{i}]")
    hooks, bad = _check_list(edits.get("hooks"), f"{where}.hooks")
    problems += bad
    for i, hook in enumerate(hooks):
        problems += _check_hook(hook, f"{where}.hooks[{i}]")
    rdt = edits.get("intelRdt")
    if rdt is not None:
        if isinstance(rdt, dict):
            problems += _unknown(rdt, _RDT_FIELDS, f"{where}.intelRdt")
        else:
            problems.append(f"{where}.intelRdt must be an object")
    gids = edits.get("additionalGids")
    if gids is not None and (
        not isinstance(gids, list) or not all(_is_int(g) and g >= 0 for g in gids)
    ):
        problems.append(f"{where}.additionalGids must be a list of non-negative integers")
    netdevs, bad = _check_list(edits.get("netDevices"), f"{where}.netDevices")
    problems += bad
    for i, netdev in enumerate(netdevs):
        nwhere = f"{where}.netDevices[{i}]"
        problems += _unknown(netdev, _NETDEV_FIELDS, nwhere)
        for key in ("hostInterfaceName", "name"):
            if not isinstance(netdev.get(key), str) or not netdev.get(key):
                problems.append(f"{nwhere}: missing {key}")
    empty = not any(edits.get(k) for k in _EDITS_FIELDS if k != "intelRdt") and (
        edits.get("intelRdt") is None
    )
    return problems, empty


def validate_spec(spec: Any) -> list[str]:
    """What the reference CDI library would reject in `spec`; empty when a runtime accepts it.

    Covers the rules of FACTS.md section 3 that a per-instance spec can break, including strict
    parsing (unknown fields) and a `cdiVersion` below what the content needs.
    """
    if not isinstance(spec, dict):
        return ["spec is not a JSON object"]
    problems = _unknown(spec, _SPEC_FIELDS, "spec")
    version = spec.get("cdiVersion")
    if not isinstance(version, str) or version not in KNOWN_VERSIONS:
        problems.append(f"unknown cdiVersion {version!r} (known: {', '.join(KNOWN_VERSIONS)})")
    else:
        needed = minimum_version(spec)
        if _version_key(version) < _version_key(needed):
            problems.append(f"cdiVersion {version} is too low: the content needs {needed}")
    problems += check_kind(spec.get("kind"))
    problems += _check_annotations(spec.get("annotations"), "spec")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        problems.append("spec has no devices")
        devices = []
    seen: set[str] = set()
    for i, device in enumerate(devices):
        where = f"devices[{i}]"
        if not isinstance(device, dict):
            problems.append(f"{where} must be an object")
            continue
        problems += _unknown(device, _DEVICE_FIELDS, where)
        name = device.get("name")
        if not isinstance(name, str) or not _DEVICE_RE.match(name):
            problems.append(f"{where}: invalid device name {name!r}")
        elif name in seen:
            problems.append(f"{where}: duplicate device name {name!r}")
        else:
            seen.add(name)
        problems += _check_annotations(device.get("annotations"), where)
        edit_problems, empty = _check_edits(device.get("containerEdits"), f"{where}.containerEdits")
        problems += edit_problems
        if empty:
            problems.append(f"{where}: device {name!r} has empty containerEdits")
    problems += _check_edits(spec.get("containerEdits"), "containerEdits")[0]
    return problems


# --------------------------------------------------------------------------------------------
# The store


class CdiStore:
    """The per-instance spec files in the CDI directory."""

    def __init__(
        self,
        directory: Path,
        kind: str = DEFAULT_KIND,
        annotations: bool = False,
        file_op: FileOp = no_faults,
    ) -> None:
        self.directory = directory
        self.kind = kind
        self.annotations = annotations
        self.file_op = file_op

    def qualified_name(self, mig_uuid: str) -> str:
        """What a runtime resolves and a device plugin returns in `cdi_devices`."""
        return f"{self.kind}={device_name(mig_uuid)}"

    def path_of(self, mig_uuid: str) -> Path:
        return self.directory / spec_file_name(mig_uuid)

    def render(self, dev: CdiDevice) -> bytes:
        """The exact bytes of the spec file: stable key order, 2-space indent, newline.

        Stable bytes are what let `matches` verify a reused instance's spec by comparison.
        Raises `HardwareError` when the spec would not load in a runtime (a bad configured kind
        or a bogus minor), so that nothing unloadable is ever written.
        """
        minors = (dev.gpu_minor, dev.gi_cap_minor, dev.ci_cap_minor)
        if any(isinstance(m, bool) or not isinstance(m, int) or m < 0 for m in minors):
            raise HardwareError(f"invalid device minors {minors} for {dev.mig_uuid}")
        annotations = {MIG_UUID_ANNOTATION: dev.mig_uuid} if self.annotations else None
        spec = build_spec(self.kind, dev, annotations)
        problems = validate_spec(spec)
        if problems:
            raise HardwareError(
                f"refusing to write an invalid CDI spec for {dev.mig_uuid}: {'; '.join(problems)}"
            )
        return (json.dumps(spec, indent=2) + "\n").encode("utf-8")

    def matches(self, dev: CdiDevice) -> bool:
        """True when the spec on disk is exactly what `render` produces (a regular file)."""
        name = spec_file_name(dev.mig_uuid)
        try:
            if describe_entry(self.directory, name) is not None:
                return False
            data = read_regular(self.directory, name)
        except (OSError, ValueError):
            return False
        return data == self.render(dev)

    def exists(self, mig_uuid: str) -> bool:
        """Whether anything (even a symlink or a broken file) sits at the spec's name."""
        try:
            describe_entry(self.directory, spec_file_name(mig_uuid))
        except FileNotFoundError:
            return False
        except NotADirectoryError:
            return False
        return True

    def write(self, dev: CdiDevice) -> str:
        """Create or replace the spec atomically (0644); returns the qualified device name."""
        data = self.render(dev)
        ensure_dir(self.directory, CDI_DIR_MODE)
        name = spec_file_name(dev.mig_uuid)
        self.file_op("cdi.write", lambda: atomic_write(self.directory, name, data, SPEC_MODE))
        return self.qualified_name(dev.mig_uuid)

    def remove(self, mig_uuid: str) -> bool:
        """Remove the spec durably; False when it was already gone."""
        name = spec_file_name(mig_uuid)
        removed: list[bool] = []
        self.file_op("cdi.remove", lambda: removed.append(remove_file(self.directory, name)))
        return bool(removed and removed[0])

    def remove_name(self, name: str) -> bool:
        """Remove a spec of ours known only by its file name (no record names its MIG UUID)."""
        if not (name.startswith(SPEC_PREFIX) and name.endswith(SPEC_SUFFIX)):
            raise ValueError(f"{name} is not the name of a per-instance spec")
        removed: list[bool] = []
        self.file_op("cdi.remove", lambda: removed.append(remove_file(self.directory, name)))
        return bool(removed and removed[0])

    def list_ours(self) -> list[str]:
        """File names of every per-instance spec in the directory, ours or HAMi's (same names)."""
        if not check_dir(self.directory):
            return []
        return list_names(self.directory, SPEC_PREFIX, SPEC_SUFFIX)
