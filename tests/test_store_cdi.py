"""Per-instance CDI specs: content, minimum versions, validation, and the reference library.

The unit tests pin the spec to docs/formats.md "CDI specs" (names, content, minimum versions). The
`cdi-check` tests then load what `CdiStore` writes with the reference Go library (Debian's
package, the CDI library of runtimes of that era), which is the judge that matters: a spec it
rejects is one a runtime would refuse to inject.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import stat
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from hamimig.errors import HardwareError
from hamimig.hw.minors import parse_mig_minors
from hamimig.hw.types import Placement
from hamimig.rehearsal.simulator import sim_init
from hamimig.sim.files import mig_minors_text
from hamimig.store.cdi import (
    DEFAULT_KIND,
    CdiDevice,
    CdiStore,
    ForeignSpec,
    build_spec,
    device_name,
    minimum_version,
    spec_file_name,
    validate_spec,
)
from tests.support.node import open_hw
from tests.support.records import GPU, MIG, sha

DEV = CdiDevice(MIG, gpu_minor=1, gi_cap_minor=66, ci_cap_minor=67, gpu_uuid=GPU, gi_id=7, ci_id=0)
HAMI_ANNOTATIONS = {
    "hami.io/mig-uuid": MIG,
    "hami.io/parent-gpu-uuid": GPU,
    "hami.io/mig-geometry": "1:7:0",
}
MODELS = (
    "A100-SXM4-40GB",
    "A100-SXM4-80GB",
    "H100-SXM5-80GB",
    "H200-SXM5-141GB",
    "B200-180GB",
)


def expected_spec(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """docs/cdi.md's spec with `cdi.baseSpec: none`, written out by hand (annotations on the
    device, as HAMi's plugin looks for them)."""
    spec: dict[str, Any] = {
        "cdiVersion": "0.6.0" if annotations else "0.3.0",
        "kind": "k8s.device-plugin.nvidia.com/dynamic-mig",
    }
    device: dict[str, Any] = {"name": f"mig-{sha(MIG)}"}
    if annotations:
        device["annotations"] = annotations
    device["containerEdits"] = {
        "deviceNodes": [
            {"path": "/dev/nvidia1"},
            {"path": "/dev/nvidia-caps/nvidia-cap66"},
            {"path": "/dev/nvidia-caps/nvidia-cap67"},
        ]
    }
    spec["devices"] = [device]
    spec["containerEdits"] = {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [
            {"path": "/dev/nvidiactl"},
            {"path": "/dev/nvidia-uvm"},
            {"path": "/dev/nvidia-uvm-tools"},
        ],
    }
    return spec


# --------------------------------------------------------------------------------------------
# Content


def test_names_are_hamis() -> None:
    assert device_name(MIG) == f"mig-{sha(MIG)}"
    assert spec_file_name(MIG) == f"hami-dynamic-mig-mig-{sha(MIG)}.json"
    store = CdiStore(Path("/x"))
    assert store.qualified_name(MIG) == f"k8s.device-plugin.nvidia.com/dynamic-mig=mig-{sha(MIG)}"
    assert store.path_of(MIG) == Path("/x") / spec_file_name(MIG)


def test_spec_content_is_exactly_the_contracts() -> None:
    assert build_spec(DEFAULT_KIND, DEV) == expected_spec()
    assert build_spec(DEFAULT_KIND, DEV, {}) == expected_spec()
    assert build_spec(DEFAULT_KIND, DEV, {"a.io/b": "c"}) == expected_spec({"a.io/b": "c"})


def test_written_file_is_the_rendered_spec(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        name = CdiStore(tmp_path / "cdi").write(DEV)
    finally:
        os.umask(old)
    path = tmp_path / "cdi" / spec_file_name(MIG)
    assert name == f"{DEFAULT_KIND}=mig-{sha(MIG)}"
    data = path.read_bytes()
    assert data.endswith(b"}\n")
    assert json.loads(data) == expected_spec()
    assert list(json.loads(data)) == ["cdiVersion", "kind", "devices", "containerEdits"]
    assert b'\n  "kind"' in data  # 2-space indent
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "cdi").st_mode) == 0o755
    assert os.listdir(tmp_path / "cdi") == [spec_file_name(MIG)]


def test_annotations_force_version_0_6_0(tmp_path: Path) -> None:
    store = CdiStore(tmp_path, annotations=True)
    spec = json.loads(store.render(DEV))
    assert spec == expected_spec(HAMI_ANNOTATIONS)
    assert "annotations" not in spec  # on the device, where HAMi's plugin reads them
    assert spec["cdiVersion"] == "0.6.0"
    # Without the GI/CI IDs or the parent GPU, no annotation could be right: refused.
    with pytest.raises(HardwareError, match="cannot annotate"):
        store.render(CdiDevice(MIG, 1, 66, 67))


def test_render_is_stable_and_validated() -> None:
    store = CdiStore(Path("/x"))
    assert store.render(DEV) == store.render(DEV)
    with pytest.raises(HardwareError, match="invalid CDI spec"):
        CdiStore(Path("/x"), kind="no-slash").render(DEV)
    with pytest.raises(HardwareError, match="invalid CDI spec"):
        CdiStore(Path("/x"), kind="nvidia.com/gpu/extra").render(DEV)
    with pytest.raises(HardwareError):
        store.render(CdiDevice(MIG, -1, 3, 4))


def test_matches_exists_remove(tmp_path: Path) -> None:
    store = CdiStore(tmp_path)
    assert not store.exists(MIG)
    assert not store.matches(DEV)
    store.write(DEV)
    assert store.exists(MIG)
    assert store.matches(DEV)
    assert not store.matches(CdiDevice(MIG, 1, 66, 68))  # other minors: stale
    assert not CdiStore(tmp_path, annotations=True).matches(DEV)
    # Compared as normalized JSON, as HAMi's plugin compares: layout and key order do not count.
    spec = json.loads(store.render(DEV))
    store.path_of(MIG).write_text(json.dumps(dict(reversed(spec.items()))) + " ")
    assert store.matches(DEV)
    spec["containerEdits"]["env"].append("EXTRA=1")
    store.path_of(MIG).write_text(json.dumps(spec))
    assert not store.matches(DEV)
    assert store.remove(MIG) is True
    assert store.remove(MIG) is False
    assert not store.exists(MIG)


def test_a_symlinked_spec_never_matches(tmp_path: Path) -> None:
    store = CdiStore(tmp_path / "cdi")
    target = tmp_path / "real.json"
    target.write_bytes(store.render(DEV))
    (tmp_path / "cdi").mkdir()
    store.path_of(MIG).symlink_to(target)
    assert store.exists(MIG)
    assert not store.matches(DEV)
    store.write(DEV)  # replaces the link itself
    assert not store.path_of(MIG).is_symlink()
    assert store.matches(DEV)
    assert target.read_bytes() == store.render(DEV)


def test_write_never_replaces_a_file_that_is_not_the_instances_spec(tmp_path: Path) -> None:
    """The last line of defence (planners refuse first): a file at the spec's name that parses
    and is not this instance's spec is kept, and the write refuses (exit 5)."""
    store = CdiStore(tmp_path)
    store.write(DEV)
    path = store.path_of(MIG)
    other = json.loads(path.read_text())
    other["devices"][0]["annotations"] = {"hami.io/mig-uuid": "MIG-someone-else"}
    other["cdiVersion"] = "0.6.0"
    path.write_text(json.dumps(other))
    content = path.read_bytes()
    assert store.foreign(MIG) == "its hami.io/mig-uuid annotation names 'MIG-someone-else'"
    with pytest.raises(ForeignSpec) as refused:
        store.write(DEV)
    assert refused.value.exit_code == 5
    assert str(path) in refused.value.message and "never overwritten" in refused.value.message
    assert path.read_bytes() == content
    # A damaged file (not JSON, or naming no kind) is nobody's spec: it is rewritten.
    for damaged in ("{", "{}", '{"devices": []}', "[]"):
        path.write_text(damaged)
        assert store.foreign(MIG) is None
        store.write(DEV)
        assert store.matches(DEV)


def test_list_ours(tmp_path: Path) -> None:
    store = CdiStore(tmp_path)
    assert store.list_ours() == []
    store.write(DEV)
    (tmp_path / "nvidia.yaml").write_text("")
    (tmp_path / "hami-dynamic-mig-mig-x.yaml").write_text("")
    (tmp_path / ".hamimig-tmp-hami-dynamic-mig-mig-y.json-1").write_text("")
    assert store.list_ours() == [spec_file_name(MIG)]
    assert CdiStore(tmp_path / "absent").list_ours() == []


# --------------------------------------------------------------------------------------------
# minimum_version


def base() -> dict[str, Any]:
    return build_spec(DEFAULT_KIND, DEV)


def test_minimum_version_per_feature() -> None:
    assert minimum_version(base()) == "0.3.0"

    s = base()
    s["containerEdits"]["mounts"] = [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]
    assert minimum_version(s) == "0.4.0"
    s["containerEdits"]["mounts"][0].pop("type")
    assert minimum_version(s) == "0.3.0"

    s = base()
    s["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] = "/dev/nvidia9"
    assert minimum_version(s) == "0.5.0"
    s = base()
    s["devices"][0]["name"] = "0gpu"
    assert minimum_version(s) == "0.5.0"

    s = base()
    s["annotations"] = {"a.io/b": "c"}
    assert minimum_version(s) == "0.6.0"
    s = base()
    s["devices"][0]["annotations"] = {"a.io/b": "c"}
    assert minimum_version(s) == "0.6.0"
    s = base()
    s["kind"] = "vendor.com/class.with.dots"
    assert minimum_version(s) == "0.6.0"
    s = base()
    s["kind"] = "vendor.com/class"  # a dot in the vendor part needs nothing
    assert minimum_version(s) == "0.3.0"

    s = base()
    s["containerEdits"]["intelRdt"] = {"closID": "x"}
    assert minimum_version(s) == "0.7.0"
    s = base()
    s["devices"][0]["containerEdits"]["additionalGids"] = [44]
    assert minimum_version(s) == "0.7.0"

    s = base()
    s["containerEdits"]["netDevices"] = [{"hostInterfaceName": "eth1", "name": "net0"}]
    assert minimum_version(s) == "1.1.0"


# --------------------------------------------------------------------------------------------
# validate_spec


def test_our_specs_are_valid() -> None:
    assert validate_spec(base()) == []
    assert validate_spec(build_spec(DEFAULT_KIND, DEV, {"hami.io/mig-uuid": MIG})) == []


def mutated(change: Any) -> dict[str, Any]:
    spec = copy.deepcopy(base())
    change(spec)
    return spec


def dev_edits(spec: dict[str, Any]) -> dict[str, Any]:
    edits: dict[str, Any] = spec["devices"][0]["containerEdits"]
    return edits


def set_key(d: dict[str, Any], key: str, value: Any) -> None:
    d[key] = value


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda s: set_key(s, "kind", "nvidia"), "vendor/class"),
        (lambda s: set_key(s, "kind", "nvidia.com/gpu/x"), "invalid class"),
        (lambda s: set_key(s, "kind", "1vendor/gpu"), "invalid vendor"),
        (lambda s: set_key(s, "kind", "vendor/class-"), "invalid class"),
        (lambda s: set_key(s, "cdiVersion", "0.2.9"), "unknown cdiVersion"),
        (lambda s: set_key(s, "cdiVersion", 3), "unknown cdiVersion"),
        (lambda s: set_key(s, "devices", []), "no devices"),
        (lambda s: set_key(s["devices"][0], "name", "mig/abc"), "invalid device name"),
        (lambda s: set_key(s["devices"][0], "name", "-abc"), "invalid device name"),
        (lambda s: set_key(s["devices"][0], "name", "abc-"), "invalid device name"),
        (lambda s: s["devices"].append(copy.deepcopy(s["devices"][0])), "duplicate device"),
        (lambda s: set_key(s["devices"][0], "containerEdits", {}), "empty containerEdits"),
        (lambda s: s["devices"][0].pop("containerEdits"), "empty containerEdits"),
        (lambda s: set_key(s["containerEdits"], "env", ["NOEQUALS"]), "NAME=VALUE"),
        (lambda s: set_key(s["containerEdits"], "env", ["=value"]), "NAME=VALUE"),
        (lambda s: set_key(dev_edits(s)["deviceNodes"][0], "type", "x"), "device type"),
        (lambda s: set_key(dev_edits(s)["deviceNodes"][0], "permissions", "rwx"), "permissions"),
        (lambda s: set_key(dev_edits(s)["deviceNodes"][0], "path", "dev/nvidia0"), "absolute"),
        (lambda s: set_key(dev_edits(s)["deviceNodes"][0], "path", ""), "device path"),
        (lambda s: set_key(s, "extra", 1), "unknown field 'extra'"),
        (lambda s: set_key(s["devices"][0], "extra", 1), "unknown field 'extra'"),
        (lambda s: set_key(dev_edits(s), "extra", 1), "unknown field 'extra'"),
        (lambda s: set_key(dev_edits(s)["deviceNodes"][0], "extra", 1), "unknown field"),
        (lambda s: set_key(s, "annotations", {"a.io/b": "c"}), "too low"),
        (lambda s: set_key(dev_edits(s)["deviceNodes"][0], "hostPath", "/dev/x"), "too low"),
        (lambda s: set_key(s, "annotations", {"bad key!": "c"}), "invalid key"),
        (
            lambda s: set_key(s["containerEdits"], "hooks", [{"hookName": "x", "path": "/b"}]),
            "hook name",
        ),
        (
            lambda s: set_key(s["containerEdits"], "mounts", [{"containerPath": "/b"}]),
            "hostPath",
        ),
    ],
)
def test_validate_spec_catches(change: Any, fragment: str) -> None:
    problems = validate_spec(mutated(change))
    assert any(fragment in p for p in problems), problems


def test_validate_accepts_permitted_variants() -> None:
    def change(s: dict[str, Any]) -> None:
        node = dev_edits(s)["deviceNodes"][0]
        node.update({"type": "c", "permissions": "rwm", "major": 195, "minor": 0})
        s["containerEdits"]["hooks"] = [{"hookName": "createContainer", "path": "/bin/true"}]

    assert validate_spec(mutated(change)) == []
    assert validate_spec("not a dict") == ["spec is not a JSON object"]


# --------------------------------------------------------------------------------------------
# The reference library (cdi-check)


def run_check(tool: Path, directory: Path) -> tuple[int, list[str], list[str]]:
    ran = subprocess.run(
        [str(tool), str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    report = json.loads(ran.stdout)
    return ran.returncode, report["devices"] or [], report["errors"] or []


def hardware_devices(tmp_path: Path, model: str) -> list[CdiDevice]:
    """Several instances created on a simulated node of `model`, minors from its mig-minors.

    GPU 0 gets seven 1g instances (GI IDs 7..13), GPU 1 a 4g, a 2g and a 1g (GI IDs 1..13 in
    all), so the specs cover both GPU minors and the whole range of GI capability minors.
    """
    sim = tmp_path / model / "node.json"
    sim_init(sim, model, 2)
    hw = open_hw(sim)
    devices: list[CdiDevice] = []
    try:
        plan = [(0, 19, Placement(s, 1)) for s in range(7)]
        plan += [(1, 5, Placement(0, 4)), (1, 14, Placement(4, 2)), (1, 19, Placement(6, 1))]
        for gpu_index, profile_id, placement in plan:
            gi = hw.create_gpu_instance(gpu_index, profile_id, placement)
            ci = hw.create_compute_instance(gpu_index, gi)
            minor = hw.gpu(gpu_index).minor
            caps = hw.capability_minors(minor, gi, ci.id)
            devices.append(CdiDevice(ci.mig_uuid, minor, caps.gi_access, caps.ci_access))
    finally:
        hw.close()
    return devices


@pytest.mark.parametrize("model", MODELS)
def test_reference_library_accepts_our_specs(tmp_path: Path, model: str, cdi_check: Path) -> None:
    """Debian's library knows cdiVersion only up to 0.5.0: our default specs must fit it."""
    devices = hardware_devices(tmp_path, model)
    assert len({(d.gpu_minor, d.gi_cap_minor) for d in devices}) == len(devices)
    store = CdiStore(tmp_path / "cdi")
    names = [store.write(dev) for dev in devices]
    code, listed, errors = run_check(cdi_check, tmp_path / "cdi")
    assert (code, errors) == (0, [])
    assert listed == sorted(names)


def test_reference_library_accepts_every_gi_of_two_gpus(tmp_path: Path, cdi_check: Path) -> None:
    table = parse_mig_minors(mig_minors_text())
    store = CdiStore(tmp_path / "cdi")
    names = []
    for gpu_minor in (0, 1):
        for gi in range(1, 14):
            dev = CdiDevice(
                f"MIG-{uuid.uuid4()}",
                gpu_minor,
                table[f"gpu{gpu_minor}/gi{gi}/access"],
                table[f"gpu{gpu_minor}/gi{gi}/ci0/access"],
            )
            names.append(store.write(dev))
    code, listed, errors = run_check(cdi_check, tmp_path / "cdi")
    assert (code, errors) == (0, [])
    assert listed == sorted(names)
    assert len(listed) == 26


def test_reference_library_rejects_annotations(tmp_path: Path, cdi_check: Path) -> None:
    """Documents why `cdi.annotations` is off by default.

    With annotations the spec declares cdiVersion 0.6.0, correct for current libraries (our own
    `validate_spec` accepts it). Debian 12's library (0.5.x) does not even get to the version
    check: its strict parser fails on the unknown top-level field, reporting `json: unknown field
    "annotations"`, and resolves no device from the file; and the version alone is refused as
    `invalid version "0.6.0"`. A runtime built on that library would refuse every annotated spec.
    """
    store = CdiStore(tmp_path / "cdi", annotations=True)
    store.write(DEV)
    assert validate_spec(json.loads(store.path_of(MIG).read_bytes())) == []
    code, listed, errors = run_check(cdi_check, tmp_path / "cdi")
    assert code == 1
    assert listed == []
    assert len(errors) == 1
    assert str(store.path_of(MIG)) in errors[0]
    assert 'unknown field "annotations"' in errors[0]

    # Without the field, the version alone is refused too: 0.6.0 is unknown to that library.
    spec = json.loads(store.path_of(MIG).read_bytes())
    del spec["devices"][0]["annotations"]
    store.path_of(MIG).write_text(json.dumps(spec))
    code, listed, errors = run_check(cdi_check, tmp_path / "cdi")
    assert (code, listed) == (1, [])
    assert len(errors) == 1
    assert 'invalid version "0.6.0"' in errors[0]


def test_reference_library_is_strict_about_unknown_fields(tmp_path: Path, cdi_check: Path) -> None:
    """The tool really parses strictly, so its silence above means something."""
    spec = base()
    spec["devices"][0]["containerEdits"]["bogusField"] = True
    directory = tmp_path / "cdi"
    directory.mkdir()
    (directory / spec_file_name(MIG)).write_text(json.dumps(spec))
    code, listed, errors = run_check(cdi_check, directory)
    assert code == 1
    assert listed == []
    assert any("bogusField" in e for e in errors), errors
    assert any("bogusField" in p for p in validate_spec(spec))


def _store_imports(module: Path) -> set[str]:
    """The store modules `module` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        found.update(n.removeprefix("hamimig.store.") for n in names if "hamimig.store." in n)
    return found


def test_the_store_modules_import_one_way() -> None:
    """No store module imports one that imports it back, lazily or not: the CDI rules sit
    below both the per-instance specs and the NVIDIA base spec, which import them."""
    store = Path(__file__).parent.parent / "hamimig" / "store"
    graph = {p.stem: _store_imports(p) for p in store.glob("*.py")}
    assert "cdi_base" in graph["cdi"]  # the check sees the imports it judges
    reached = {name: set(deps) for name, deps in graph.items()}
    for _ in graph:  # close over every path
        for deps in reached.values():
            deps.update(*(reached.get(d, set()) for d in list(deps)))
    cycles = sorted(name for name, deps in reached.items() if name in deps)
    assert cycles == []
