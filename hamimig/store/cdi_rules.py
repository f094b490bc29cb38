"""The CDI spec format as the reference Go library reads it: the versions it knows, the
lowest `cdiVersion` a spec's content needs, and what it rejects (docs/formats.md "CDI specs").

Runtimes parse strictly, so one violation invalidates the whole file; both the specs hamimig
writes and the NVIDIA base spec they are composed from are judged by these rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
"""The versions the reference library accepts (0.1.0/0.2.0 predate the base features)."""

_KIND_PART_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
"""A kind's vendor and its class alike."""
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
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
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


# --------------------------------------------------------------------------------------------
# Versions


def first_of(problems: list[str], more: str = "more") -> str:
    """The first of `problems` (there is one), saying how many more there are."""
    return problems[0] + (f" (and {len(problems) - 1} {more})" if len(problems) > 1 else "")


def edits_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The spec-level edits and every device's edits (whatever of them are objects)."""
    devices = dicts(spec.get("devices"))
    edits = [spec.get("containerEdits"), *(d.get("containerEdits") for d in devices)]
    return [e for e in edits if isinstance(e, dict)]


def dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def minimum_version(spec: dict[str, Any]) -> str:
    """The lowest `cdiVersion` the reference library accepts for this content (docs/formats.md
    "CDI specs"): the version of the newest feature it uses."""
    edits, devices, kind = edits_of(spec), dicts(spec.get("devices")), spec.get("kind")
    names = [d["name"] for d in devices if isinstance(d.get("name"), str)]
    uses = (  # the version that introduced each feature a spec may use, newest first
        ("1.1.0", any(e.get("netDevices") for e in edits)),
        ("0.7.0", any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits)),
        ("0.6.0", spec.get("annotations") or any(d.get("annotations") for d in devices)),
        ("0.6.0", isinstance(kind, str) and "." in kind.partition("/")[2]),
        ("0.5.0", any(name[:1].isdigit() for name in names)),
        ("0.5.0", any(n.get("hostPath") for e in edits for n in dicts(e.get("deviceNodes")))),
        ("0.4.0", any(m.get("type") for e in edits for m in dicts(e.get("mounts")))),
    )
    return next((version for version, used in uses if used), "0.3.0")


# --------------------------------------------------------------------------------------------
# Validation


def check_kind(kind: Any) -> list[str]:
    """Problems with a `vendor/class` kind (also for checking configuration early)."""
    if not isinstance(kind, str) or "/" not in kind:
        return [f"kind {kind!r} is not of the form vendor/class"]
    parts = zip(("vendor", "class"), kind.split("/", 1), strict=True)
    return [
        f"kind {kind!r}: invalid {what} {part!r}"
        for what, part in parts
        if not _KIND_PART_RE.match(part)
    ]


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


def _check_objects(
    value: Any, where: str, check: Callable[[dict[str, Any], str], list[str]]
) -> list[str]:
    """A list of objects, each checked by `check` (absent: none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        return [f"{where} must be a list"]
    items = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    problems = [f"{at} must be an object" for at, item in items if not isinstance(item, dict)]
    return problems + [p for at, item in items if isinstance(item, dict) for p in check(item, at)]


def _missing(obj: dict[str, Any], keys: tuple[str, ...], where: str) -> list[str]:
    return [f"{where}: missing {k}" for k in keys if not isinstance(obj.get(k), str) or not obj[k]]


def _strings(value: Any) -> bool:
    """Absent, or a list of strings."""
    return value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def _check_netdev(netdev: dict[str, Any], where: str) -> list[str]:
    problems = _unknown(netdev, _NETDEV_FIELDS, where)
    return problems + _missing(netdev, ("hostInterfaceName", "name"), where)


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
    if not isinstance(node_type, str) or node_type not in _NODE_TYPES:
        problems.append(f"{where}: invalid device type {node_type!r} (use b, c, u or p)")
    perms = node.get("permissions", "")
    if not isinstance(perms, str) or any(c not in "rwm" for c in perms):
        problems.append(f"{where}: invalid permissions {perms!r} (only r, w, m)")
    # The Go types the reference library decodes into: int64, os.FileMode (uint32), uint32.
    for key, low, high in (
        ("major", -(2**63), 2**63 - 1),
        ("minor", -(2**63), 2**63 - 1),
        ("fileMode", 0, 2**32 - 1),
        ("uid", 0, 2**32 - 1),
        ("gid", 0, 2**32 - 1),
    ):
        if node.get(key) is None:  # absent, or null (Go leaves the field at its zero)
            continue
        if not _is_int(node[key]):
            problems.append(f"{where}: {key} must be an integer")
        elif not low <= node[key] <= high:
            problems.append(f"{where}: {key} {node[key]} is out of range ({low}..{high})")
    return problems


def _check_mount(mount: dict[str, Any], where: str) -> list[str]:
    problems = _unknown(mount, _MOUNT_FIELDS, where)
    problems += _missing(mount, ("hostPath", "containerPath"), where)
    if not _strings(mount.get("options")):
        problems.append(f"{where}: options must be a list of strings")
    if "type" in mount and not isinstance(mount["type"], str):
        problems.append(f"{where}: type must be a string")
    return problems


def _check_hook(hook: dict[str, Any], where: str) -> list[str]:
    problems = _unknown(hook, _HOOK_FIELDS, where)
    if not isinstance(hook.get("hookName"), str) or hook["hookName"] not in _HOOK_NAMES:
        problems.append(f"{where}: invalid hook name {hook.get('hookName')!r}")
    if not isinstance(hook.get("path"), str) or not hook.get("path"):
        problems.append(f"{where}: missing hook path")
    if not _strings(hook.get("args")):
        problems.append(f"{where}: args must be a list of strings")
    timeout = hook.get("timeout")
    if timeout is not None and (not _is_int(timeout) or not -(2**63) <= timeout < 2**63):
        problems.append(f"{where}: timeout must be an integer (seconds)")
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
    for key, check in (
        ("deviceNodes", _check_node),
        ("mounts", _check_mount),
        ("hooks", _check_hook),
    ):
        problems += _check_objects(edits.get(key), f"{where}.{key}", check)
    rdt = edits.get("intelRdt")
    if isinstance(rdt, dict):
        problems += _unknown(rdt, _RDT_FIELDS, f"{where}.intelRdt")
    elif rdt is not None:
        problems.append(f"{where}.intelRdt must be an object")
    gids = edits.get("additionalGids")
    if gids is not None and (
        not isinstance(gids, list) or not all(_is_int(g) and g >= 0 for g in gids)
    ):
        problems.append(f"{where}.additionalGids must be a list of non-negative integers")
    problems += _check_objects(edits.get("netDevices"), f"{where}.netDevices", _check_netdev)
    return problems, not any(edits.get(k) for k in _EDITS_FIELDS - {"intelRdt"}) and rdt is None


def validate_spec(spec: Any) -> list[str]:
    """What the reference CDI library would reject in `spec`; empty when a runtime accepts it.
    The rules a per-instance spec can break (docs/formats.md "CDI specs"), unknown fields and a
    `cdiVersion` below what the content needs included."""
    if not isinstance(spec, dict):
        return ["spec is not a JSON object"]
    problems = _unknown(spec, _SPEC_FIELDS, "spec")
    version = spec.get("cdiVersion")
    if not isinstance(version, str) or version not in KNOWN_VERSIONS:
        problems.append(f"unknown cdiVersion {version!r} (known: {', '.join(KNOWN_VERSIONS)})")
    elif KNOWN_VERSIONS.index(version) < KNOWN_VERSIONS.index(needed := minimum_version(spec)):
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
