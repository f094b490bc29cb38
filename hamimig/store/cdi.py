"""One CDI spec file per MIG instance, under HAMi's names (docs/formats.md "CDI specs"), so a
node can move between HAMi's device plugin and hamimig without orphaning or duplicating a device.

`render` checks each spec against the reference library's rules (`cdi_rules`) before it is
written: a spec that no runtime would load must never reach the CDI directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hamimig.errors import HardwareError, UnverifiableError, UsageError
from hamimig.store._fields import json_bytes, uuid_digest
from hamimig.store.cdi_base import NONE, BaseLookup, BaseSpec, canonical
from hamimig.store.cdi_rules import dicts, edits_of, first_of, minimum_version, validate_spec
from hamimig.store.files import FileOp, Problem, StoreFiles, describe_entry, no_faults
from hamimig.vocabulary import FileOpName

DEFAULT_KIND = "k8s.device-plugin.nvidia.com/dynamic-mig"
SPEC_PREFIX = "hami-dynamic-mig-mig-"
SPEC_SUFFIX = ".json"
# HAMi's device annotations: its plugin identifies a dynamic MIG spec by `hami.io/mig-uuid` on
# the device, and the geometry reads `<GPU minor>:<GI>:<CI>`.
MIG_UUID_ANNOTATION = "hami.io/mig-uuid"
PARENT_GPU_ANNOTATION = "hami.io/parent-gpu-uuid"
GEOMETRY_ANNOTATION = "hami.io/mig-geometry"


@dataclass(frozen=True)
class CdiDevice:
    """What a container needs to use one MIG device: its GPU's and its two capability minors.
    The rest, known on a real node, only some specs need: the GPU UUID and GI/CI IDs for HAMi's
    annotations, the capability nodes' major and modes for a composed spec."""

    mig_uuid: str
    gpu_minor: int
    gi_cap_minor: int
    ci_cap_minor: int
    gpu_uuid: str | None = None
    gi_id: int | None = None
    ci_id: int | None = None
    caps_major: int | None = None
    gi_cap_mode: int | None = None
    ci_cap_mode: int | None = None
    caps_problem: str | None = None
    """Why the capability nodes' major is unknown (`/proc/devices` unreadable or without
    `nvidia-caps`): no spec can be composed, like without an NVIDIA base spec."""

    def hami_values(self) -> dict[str, str | None]:
        """HAMi's three device annotations, None where the GPU UUID or GI/CI IDs are unknown."""
        known = self.gi_id is not None and self.ci_id is not None
        return {
            MIG_UUID_ANNOTATION: self.mig_uuid,
            PARENT_GPU_ANNOTATION: self.gpu_uuid,
            GEOMETRY_ANNOTATION: f"{self.gpu_minor}:{self.gi_id}:{self.ci_id}" if known else None,
        }

    def annotations(self) -> dict[str, str]:
        """HAMi's three device annotations (the GPU UUID and GI/CI IDs must be known)."""
        values = self.hami_values()
        if None in values.values():
            raise HardwareError(
                f"cannot annotate the CDI device of {self.mig_uuid}: its parent GPU or GI/CI "
                "is unknown"
            )
        return {key: str(value) for key, value in values.items()}


def device_name(mig_uuid: str) -> str:
    """HAMi's device name: hashed, since an old-style MIG UUID contains `/`."""
    return f"mig-{uuid_digest(mig_uuid)}"


def spec_file_name(mig_uuid: str) -> str:
    return f"{SPEC_PREFIX}{uuid_digest(mig_uuid)}{SPEC_SUFFIX}"


# --------------------------------------------------------------------------------------------
# Building


def build_spec(
    kind: str,
    dev: CdiDevice,
    annotations: dict[str, str] | None = None,
    base: BaseSpec | None = None,
) -> dict[str, Any]:
    """The spec of `dev` (docs/cdi.md): one device, declaring the lowest `cdiVersion` its
    content allows, so runtimes on older libraries load it (hence annotations, which force
    0.6.0, are opt-in). Composed from the base as HAMi composes it, adding nothing the base
    does not say; without one (`cdi.baseSpec: none`), device nodes only."""
    if base is None:
        nodes = (f"/dev/nvidia{dev.gpu_minor}", _cap(dev.gi_cap_minor), _cap(dev.ci_cap_minor))
        control = [{"path": f"/dev/{n}"} for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")]
        # NVIDIA_VISIBLE_DEVICES=void stops the NVIDIA runtime hook from injecting devices of its
        # own on top of the ones this spec grants.
        common = {"env": ["NVIDIA_VISIBLE_DEVICES=void"], "deviceNodes": control}
        edits = {"deviceNodes": [{"path": p} for p in nodes]}
    elif dev.caps_major is None:
        # Like a missing base spec: a usage problem of the node, so an existing spec is kept.
        raise UsageError(
            f"cannot compose the CDI spec of {dev.mig_uuid}: "
            f"{dev.caps_problem or 'the nvidia-caps major is unknown'}"
        )
    else:
        edits = base.parent_edits(dev.gpu_minor)
        edits["deviceNodes"] = [
            *edits.get("deviceNodes", []),
            _cap_node(dev.gi_cap_minor, dev.caps_major, dev.gi_cap_mode),
            _cap_node(dev.ci_cap_minor, dev.caps_major, dev.ci_cap_mode),
        ]
        common = base.common_edits()
    device: dict[str, Any] = {"name": device_name(dev.mig_uuid)}
    if annotations:
        device["annotations"] = dict(annotations)
    device["containerEdits"] = edits
    body: dict[str, Any] = {"kind": kind, "devices": [device]}
    if common:
        body["containerEdits"] = common
    return {"cdiVersion": minimum_version(body), **body}


def _cap(minor: int) -> str:
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


def _cap_node(minor: int, major: int, mode: int | None) -> dict[str, Any]:
    node: dict[str, Any] = {"path": _cap(minor), "type": "c", "major": major, "minor": minor}
    if mode is not None:
        node["fileMode"] = mode
    return node


def device_node_paths(spec: Any) -> set[str]:
    """Every device node path a spec gives a container (spec-level and per device)."""
    if not isinstance(spec, dict):
        return set()
    nodes = [n for edits in edits_of(spec) for n in dicts(edits.get("deviceNodes"))]
    return {n["path"] for n in nodes if isinstance(n.get("path"), str)}


# --------------------------------------------------------------------------------------------
# The store


class ForeignSpec(UnverifiableError):
    """A file at our spec name whose content is not the instance's spec: it is kept, never
    removed nor overwritten (exit 5 where it stops a command)."""


class CdiStore(StoreFiles):
    """The per-instance spec files in the CDI directory. `base` looks up the node's NVIDIA spec
    on first use (None: `cdi.baseSpec: none`), so commands that never render a spec never read
    it."""

    store = "cdi-spec"
    prefix, suffix = SPEC_PREFIX, SPEC_SUFFIX
    file_mode = 0o644
    dir_mode = 0o755

    def __init__(
        self,
        directory: Path,
        kind: str = DEFAULT_KIND,
        annotations: bool = False,
        file_op: FileOp = no_faults,
        base: Callable[[], BaseLookup] | None = None,
    ) -> None:
        super().__init__(directory, file_op)
        self.kind = kind
        self.annotations = annotations
        self._base = base
        self._lookup: BaseLookup | None = None

    def lookup(self) -> BaseLookup:
        """Where this store composes specs from (looked up once)."""
        if self._lookup is None:
            self._lookup = self._base() if self._base is not None else BaseLookup(NONE)
        return self._lookup

    def subject(self, name: str) -> str:
        """`mig-<sha256>`: the spec's device name."""
        return "mig-" + name.removeprefix(SPEC_PREFIX).removesuffix(SPEC_SUFFIX)

    def qualified_name(self, mig_uuid: str) -> str:
        """What a runtime resolves and a device plugin returns in `cdi_devices`."""
        return f"{self.kind}={device_name(mig_uuid)}"

    def path_of(self, mig_uuid: str) -> Path:
        return self.directory / spec_file_name(mig_uuid)

    def spec_for(self, dev: CdiDevice) -> dict[str, Any]:
        """The spec object for `dev`, checked against the reference library's rules so nothing
        unloadable is ever written: `UsageError` without a usable base spec (or one lacking the
        GPU), `HardwareError` when a runtime would not load it (a bad kind, a bogus minor)."""
        minors = (dev.gpu_minor, dev.gi_cap_minor, dev.ci_cap_minor)
        if any(isinstance(m, bool) or not isinstance(m, int) or m < 0 for m in minors):
            raise HardwareError(f"invalid device minors {minors} for {dev.mig_uuid}")
        annotations = dev.annotations() if self.annotations else None
        lookup = self.lookup()
        base = lookup.require() if lookup.composes else None
        spec = build_spec(self.kind, dev, annotations, base)
        problems = validate_spec(spec)
        if problems:
            raise HardwareError(
                f"refusing to write an invalid CDI spec for {dev.mig_uuid}: {'; '.join(problems)}"
            )
        return spec

    def render(self, dev: CdiDevice) -> bytes:
        """The exact bytes of the spec file: stable key order, 2-space indent, newline."""
        return json_bytes(self.spec_for(dev))

    def read(self, mig_uuid: str) -> Any:
        """The spec on disk parsed, or None when it is absent, not a regular file or not JSON."""
        found = self.read_file(spec_file_name(mig_uuid), _json_document)
        return None if isinstance(found, Problem) else found

    def inspect(self, name: str) -> dict[str, Any] | Problem | None:
        """One spec file as a runtime would take it: its content, why a runtime would reject it
        (or it cannot be read), or None when it is gone."""
        found = self.read_file(name, _json_document)
        if found is None or isinstance(found, Problem):
            return found
        problems = validate_spec(found)
        if problems:
            return self.problem(name, f"runtimes reject it: {first_of(problems)}")
        return found

    def matches(self, dev: CdiDevice) -> bool:
        """True when the spec on disk has `render`'s content, compared as HAMi's plugin compares
        (docs/cdi.md), so the two never rewrite each other; with annotations on, HAMi's must be
        there. Raises as `spec_for` does when no spec can be composed."""
        wanted = self.spec_for(dev)
        found = self._valid(dev.mig_uuid)
        if found is None:
            return False
        if not self.annotations:
            found = _without_hami_annotations(found, dev)
        return canonical(found) == canonical(wanted)

    def usable(self, mig_uuid: str) -> bool:
        """Whether the spec on disk is one runtimes load and that defines this device (what is
        kept as it is when no base spec is available to compare it with)."""
        found = self._valid(mig_uuid)
        return (
            found is not None
            and found.get("kind") == self.kind
            and any(d.get("name") == device_name(mig_uuid) for d in dicts(found.get("devices")))
        )

    def _valid(self, mig_uuid: str) -> dict[str, Any] | None:
        """The spec on disk when runtimes load it, else None."""
        found = self.inspect(spec_file_name(mig_uuid))
        return found if isinstance(found, dict) else None

    def file_of_device(self, device: str) -> str:
        """The spec file name of device `mig-<sha256>`: what `subject` reads back."""
        return f"{SPEC_PREFIX}{device.removeprefix('mig-')}{SPEC_SUFFIX}"

    def exists(self, mig_uuid: str) -> bool:
        """Whether anything (even a symlink or a broken file) sits at the spec's name."""
        return self.exists_named(spec_file_name(mig_uuid))

    def exists_named(self, name: str) -> bool:
        """Whether anything (even a symlink or a broken file) sits at spec file name `name`."""
        try:
            describe_entry(self.directory, name)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def write(self, dev: CdiDevice) -> str:
        """Create or replace the spec atomically (0644); returns the qualified device name.

        Raises `ForeignSpec` (and writes nothing) when the file it would replace is not this
        instance's spec by content: planners refuse that case before any change, so this is
        the last line of defence."""
        refusal = self.overwrite_refusal(dev.mig_uuid)
        if refusal is not None:
            raise ForeignSpec(refusal)
        self.write_named(FileOpName.CDI_WRITE, spec_file_name(dev.mig_uuid), self.render(dev))
        return self.qualified_name(dev.mig_uuid)

    def foreign(self, mig_uuid: str) -> str | None:
        """Why the file at the spec name of `mig_uuid` must never be overwritten: it parses as a
        JSON object that names a kind, and `not_ours` rejects it (another kind, another device,
        several devices, another instance's `hami.io/mig-uuid`). None when nothing is there,
        when it is this instance's spec, or when it is damaged (not a regular file, unreadable,
        not a JSON object, or one naming no kind, such as a spec truncated to `{}`): nobody's
        spec can be told from it, and the command that finds it rewrites it (repair-cdi, a
        reuse), as a damaged spec of the instance always was."""
        found = self.read_file(spec_file_name(mig_uuid), _json_document)
        if found is None or isinstance(found, Problem) or not isinstance(found.get("kind"), str):
            return None
        return self._not_the_spec(found, device_name(mig_uuid), mig_uuid)

    def overwrite_refusal(self, mig_uuid: str) -> str | None:
        """The one refusal, for planners and `write` alike, of a file `foreign` rejects."""
        why = self.foreign(mig_uuid)
        if why is None:
            return None
        return (
            f"{self.path_of(mig_uuid)} is not hamimig's CDI spec of {mig_uuid} ({why}) and is "
            "never overwritten; move it out of the CDI directory if it is not hamimig's"
        )

    def not_ours(self, name: str, mig_uuid: str | None = None) -> str | None:
        """Why the file at spec name `name` is not its instance's spec, or None when it is (or
        nothing is there): the one content check before any removal, HAMi's own (docs/formats.md
        "CDI specs"), by `mig_uuid` when known, else the digest in the file name. A file that
        cannot be read or parsed is not ours either: kept and reported, never removed."""
        found = self.read_file(name, _json_document)
        if found is None:
            return None
        if isinstance(found, Problem):
            return found.reason
        wanted = self.subject(name) if mig_uuid is None else device_name(mig_uuid)
        return self._not_the_spec(found, wanted, mig_uuid)

    def _not_the_spec(self, found: dict[str, Any], wanted: str, mig_uuid: str | None) -> str | None:
        """Why the parsed spec `found` is not the spec of device `wanted` (`not_ours`)."""
        if found.get("kind") != self.kind:
            return f"its kind is {found.get('kind')!r}, not {self.kind!r}"
        devices = found["devices"] if isinstance(found.get("devices"), list) else []
        if len(devices) != 1 or not isinstance(devices[0], dict):
            return f"it defines {len(devices)} devices, not exactly one"
        device = devices[0]
        if device.get("name") != wanted:
            return f"its device is {device.get('name')!r}, not {wanted!r}"
        annotations = device.get("annotations")
        if isinstance(annotations, dict) and MIG_UUID_ANNOTATION in annotations:
            named = annotations[MIG_UUID_ANNOTATION]
            same = (
                named == mig_uuid
                if mig_uuid is not None
                else isinstance(named, str) and device_name(named) == wanted
            )
            if not same:
                return f"its {MIG_UUID_ANNOTATION} annotation names {named!r}"
        return None

    def remove(self, mig_uuid: str) -> bool:
        """Remove the spec durably; False when it was already gone. Raises `ForeignSpec` (and
        keeps the file) when its content is not this instance's spec."""
        return self.remove_name(spec_file_name(mig_uuid), mig_uuid)

    def remove_name(self, name: str, mig_uuid: str | None = None) -> bool:
        """Remove a spec of ours known by its file name (and by its MIG UUID, where a record
        names it); raises `ForeignSpec` as `remove` does."""
        if not self.owns(name):
            raise ValueError(f"{name} is not the name of a per-instance spec")
        why = self.not_ours(name, mig_uuid)
        if why is not None:
            path = self.directory / name
            raise ForeignSpec(f"{path} is kept: it is not hamimig's spec of this instance ({why})")
        return self.remove_named(FileOpName.CDI_REMOVE, name)

    def list_ours(self) -> list[str]:
        """File names of every per-instance spec in the directory, ours or HAMi's (same names)."""
        return self.names()


def _json_document(data: bytes) -> dict[str, Any]:
    """A spec file's content: a JSON object, or ValueError saying why not (runtimes reject
    anything else)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
        raise ValueError(f"spec is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError("spec is nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError("runtimes reject it: spec is not a JSON object")
    return doc


def _without_hami_annotations(spec: dict[str, Any], dev: CdiDevice) -> dict[str, Any]:
    """`spec` without device annotations that are exactly HAMi's for `dev` (any of the three,
    each with this device's value), at the version its remaining content needs."""
    expected = dev.hami_values()
    copy: dict[str, Any] = json.loads(canonical(spec))
    stripped = False
    for device in dicts(copy.get("devices")):
        found = device.get("annotations")
        if not isinstance(found, dict) or not found:
            continue
        if all(key in expected and expected[key] == value for key, value in found.items()):
            del device["annotations"]
            stripped = True
    if stripped:
        copy["cdiVersion"] = minimum_version(copy)
    return copy
