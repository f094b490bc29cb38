"""Specs a CUDA container can use: composed from the node's NVIDIA CDI spec, through the CLI.

A spec with device nodes alone gives a container no driver (no libcuda, no libnvidia-ml, no
ldcache hook). Each instance spec is composed from NVIDIA's spec as HAMi composes its own: the
common edits, the parent GPU's edits, the two capability nodes. `cdi-check -inject` (the
reference Go library injecting into an empty OCI spec, as a runtime does) is the judge of what a
container really gets. Annotated (0.6.0) specs are judged by the project's reference-rule check
and the CDI project's JSON schema instead: the library `cdi-check` is built from predates 0.6.0.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from hamimig.engine.node import Node
from hamimig.errors import HamimigError
from hamimig.hw.devnodes import access_mode, caps_major, parse_char_majors
from hamimig.store.cdi import device_name, validate_spec
from tests.support.cdi import (
    base_dir,
    base_file,
    cap_minors,
    load_base,
    qualified,
    spec_of,
    spec_path,
)
from tests.support.cli import Cli, allocate, allocated, refused
from tests.support.node import node_dir, sim_state

DATA = Path(__file__).parent / "data"
PATHS_ONLY = DATA / "cdi" / "nvidia-paths-only.yaml"
DRIVER = "550.127.05"
NO_BASE = "no NVIDIA CDI spec on this node to take driver edits from"


def check(tool: Path, *dirs: Path, inject: bool = False) -> tuple[int, dict[str, Any]]:
    argv = [str(tool), *(["-inject"] if inject else []), *map(str, dirs)]
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    report: dict[str, Any] = json.loads(ran.stdout)
    return ran.returncode, report


def configure(cli: Cli, text: str) -> None:
    (cli.state_dir.parent / "absent-config.yaml").write_text(text)


def actions(data: dict[str, Any], name: str) -> list[str | None]:
    return [a["migUUID"] for a in data["actions"] if a["action"] == name]


def upgrade_driver(cli: Cli, new: str) -> None:
    """What a driver upgrade does to NVIDIA's spec: every library path changes."""
    path = base_file(cli)
    text = path.read_text()
    old = next(v for v in (DRIVER, "560.35.03", "570.86.10") if v in text)
    path.write_text(text.replace(old, new))


def schema_validator() -> jsonschema.Draft7Validator:
    directory = DATA / "cdi-schema"
    defs = json.loads((directory / "defs.json").read_text())
    registry: Registry[Any] = Registry().with_resource(
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7)
    )
    return jsonschema.Draft7Validator(
        json.loads((directory / "schema.json").read_text()), registry=registry
    )


# ---------------------------------------------------------------------------------------------
# The simulated node's files


def test_sim_init_writes_the_nodes_nvidia_spec_proc_devices_and_capabilities(
    cli: Cli, cdi_check: Path
) -> None:
    shown = cli.json("sim", "show").json()
    assert Path(shown["cdiBaseDir"]) == node_dir(cli.sim) / "nvidia-cdi"
    assert Path(shown["procDevices"]) == node_dir(cli.sim) / "proc-devices"
    assert "nvidia-caps" in Path(shown["procDevices"]).read_text()
    base = load_base(cli)
    assert validate_spec(base) == []
    assert base["kind"] == "nvidia.com/gpu"
    gpus = sim_state(cli.sim)["gpus"]
    names = {d["name"] for d in base["devices"]}
    assert {"all", "0", "1", gpus[0]["uuid"], gpus[1]["uuid"], "0:0"} == names
    # Fully typed nodes: the reference library injects every device without host /dev nodes.
    code, report = check(cdi_check, base_dir(cli), inject=True)
    assert (code, report["errors"]) == (0, [])
    assert len(report["injected"]) == len(names)
    # The driver publishes a capability's access file when its GI or CI is created.
    mig = allocate(cli, "ns/p", "1g.10gb")["instance"]
    gi = mig["gpuInstanceID"]
    access = Path(shown["capabilitiesDir"]) / "gpu0" / "mig" / f"gi{gi}" / "access"
    assert "DeviceFileMode: 292" in access.read_text()
    assert (access.parent / "ci0" / "access").is_file()


# ---------------------------------------------------------------------------------------------
# Composition, judged by the reference library's injection


def test_an_instance_injects_the_driver_and_exactly_its_own_devices(
    cli: Cli, cdi_check: Path
) -> None:
    first = allocate(cli, "ns/a", "1g.10gb", gpu="0")["instance"]
    second = allocate(cli, "ns/b", "1g.10gb", gpu="1")["instance"]
    caps = cap_minors(cli)
    code, report = check(cdi_check, cli.cdi_dir, inject=True)
    assert (code, report["errors"]) == (0, [])
    for inst, gpu, other in ((first, 0, 1), (second, 1, 0)):
        got = report["injected"][qualified(inst["migUUID"])]
        nodes = {n.split()[0]: n for n in got["deviceNodes"]}
        gi, ci = inst["gpuInstanceID"], inst["computeInstanceID"]
        own = {
            f"/dev/nvidia-caps/nvidia-cap{caps[f'gpu{gpu}/gi{gi}/access']}",
            f"/dev/nvidia-caps/nvidia-cap{caps[f'gpu{gpu}/gi{gi}/ci{ci}/access']}",
        }
        assert {p for p in nodes if p.startswith("/dev/nvidia-caps/")} == own
        assert all(nodes[p].split()[1:] == ["c", f"508:{p[-3:].lstrip('p')}"] for p in own)
        assert nodes[f"/dev/nvidia{gpu}"] == f"/dev/nvidia{gpu} c 195:{gpu}"
        assert f"/dev/nvidia{other}" not in nodes
        assert "/dev/nvidiactl" in nodes and "/dev/nvidia-uvm" in nodes
        mounts = " ".join(got["mounts"])
        assert f"libcuda.so.{DRIVER}" in mounts and f"libnvidia-ml.so.{DRIVER}" in mounts
        assert "/usr/bin/nvidia-smi" in mounts
        hooks = " ".join(got["hooks"])
        assert "update-ldcache" in hooks and "create-symlinks" in hooks
        assert "NVIDIA_VISIBLE_DEVICES=void" not in got["env"]


def test_a_paths_only_base_is_copied_as_it_is(cli: Cli, cdi_check: Path) -> None:
    """Real nvidia-ctk output often lists nodes by path alone: never required, never invented."""
    configure(cli, f"cdi:\n  baseSpec: {PATHS_ONLY}\n")
    inst = allocate(cli, "ns/p", "1g.10gb", gpu="0")["instance"]
    spec = spec_of(cli, inst["migUUID"])
    base = yaml.safe_load(PATHS_ONLY.read_text())
    # The base sets NVIDIA_VISIBLE_DEVICES=void itself, so it stays.
    assert spec["containerEdits"] == base["containerEdits"]
    [gpu0] = [d for d in base["devices"] if d["name"] == "0"]
    edits = spec["devices"][0]["containerEdits"]
    assert edits["hooks"] == gpu0["containerEdits"]["hooks"]
    assert edits["deviceNodes"][:3] == gpu0["containerEdits"]["deviceNodes"]
    assert [n["type"] for n in edits["deviceNodes"][3:]] == ["c", "c"]
    assert validate_spec(spec) == []
    # Without -inject (that would stat host nodes this machine lacks) the library loads both.
    for directory in (PATHS_ONLY.parent, cli.cdi_dir):
        code, report = check(cdi_check, directory)
        assert (code, report["errors"]) == (0, []), report
    assert check(cdi_check, cli.cdi_dir)[1]["devices"] == [qualified(inst["migUUID"])]


def test_the_device_plugins_kind_is_preferred_and_identical_copies_agree(cli: Cli) -> None:
    base = load_base(cli)
    plugin = json.loads(json.dumps(base))
    plugin["kind"] = "k8s.device-plugin.nvidia.com/gpu"
    plugin["containerEdits"]["env"] = ["FROM_PLUGIN=1"]
    (base_dir(cli) / "k8s.device-plugin.nvidia.com-gpu.json").write_text(json.dumps(plugin))
    (base_dir(cli) / "copy.json").write_text(json.dumps(plugin))  # the same content: agrees
    inst = allocate(cli, "ns/p", "1g.10gb")["instance"]
    assert spec_of(cli, inst["migUUID"])["containerEdits"]["env"] == ["FROM_PLUGIN=1"]


def test_two_base_files_defining_the_kind_differently_are_a_conflict(cli: Cli) -> None:
    other = load_base(cli)
    other["containerEdits"]["mounts"] = other["containerEdits"]["mounts"][:1]
    (base_dir(cli) / "other.json").write_text(json.dumps(other))
    before = sim_state(cli.sim)["calls"]
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 2
    assert str(base_file(cli)) in ran.stderr and str(base_dir(cli) / "other.json") in ran.stderr
    assert "differently" in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    assert sim_state(cli.sim)["calls"] == before
    doctor = {c["name"]: c for c in cli.json("doctor").json()["checks"]}
    assert doctor["cdi-base"]["status"] == "fail"


# ---------------------------------------------------------------------------------------------
# No base spec: an explicit choice, never a silent one


@pytest.mark.parametrize("how", ["missing", "empty"])
def test_no_base_refuses_a_new_spec_before_any_hardware_call(cli: Cli, how: str) -> None:
    shutil.rmtree(base_dir(cli))
    if how == "empty":
        base_dir(cli).mkdir()
    before = sim_state(cli.sim)
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 2
    assert NO_BASE in ran.stderr and "cdi.baseSpec: none" in ran.stderr
    assert "nvidia-ctk cdi generate" in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1
    assert sim_state(cli.sim) == before  # not one NVML call, not even nvmlInit
    assert not list(cli.cdi_dir.glob("*")) if cli.cdi_dir.exists() else True
    assert not any(cli.state_dir.glob("*.json")) if cli.state_dir.exists() else True
    doctor = cli.json("doctor")
    [base] = [c for c in doctor.json()["checks"] if c["name"] == "cdi-base"]
    assert (doctor.exit_code, base["status"]) == (4, "fail")


def test_no_base_keeps_existing_specs_and_warns(cli: Cli) -> None:
    kept = allocated(cli, "ns/a", "1g.10gb")
    other = allocated(cli, "ns/b", "1g.10gb")
    assert cli("release", "--pod", "ns/a").exit_code == 0
    before = spec_path(cli, kept).read_bytes()
    shutil.rmtree(base_dir(cli))

    reused = cli.json("allocate", "--pod", "ns/c", "--gpu", "0", "--profile", "1g.10gb")
    assert reused.exit_code == 0, reused.stderr
    data = reused.json()
    assert (data["reused"], data["instance"]["migUUID"]) == (True, kept)
    [warning] = data["warnings"]
    assert warning["file"] == str(spec_path(cli, kept)) and NO_BASE in warning["reason"]
    assert spec_path(cli, kept).read_bytes() == before

    for command in (("recover", "--assume-no-pods"), ("reconcile",)):
        ran = cli.json(*command)
        assert ran.exit_code == 0, ran.stderr
        report = ran.json()
        assert actions(report, "repair-cdi") == []
        assert {w["file"] for w in report["warnings"]} == {
            str(spec_path(cli, kept)),
            str(spec_path(cli, other)),
        }
    assert spec_path(cli, kept).read_bytes() == before

    # recover --assume-no-pods left both Idle. An Idle instance without a spec is never handed
    # out specless: with neither spec there, a new instance is needed, and refused.
    for mig in (kept, other):
        spec_path(cli, mig).unlink()
    ran = cli("allocate", "--pod", "ns/d", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 2 and NO_BASE in ran.stderr
    # recover cannot write them either, and says so without failing the init container.
    ran = cli.json("recover", "--assume-no-pods")
    assert ran.exit_code == 0
    warnings = {w["file"]: w["reason"] for w in ran.json()["warnings"]}
    assert set(warnings) == {str(spec_path(cli, kept)), str(spec_path(cli, other))}
    assert all("missing" in r and NO_BASE in r for r in warnings.values())


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda s: s.update(bogusField=1), "unknown field 'bogusField'"),
        (lambda s: s["containerEdits"].update(extraEdit=[]), "unknown field 'extraEdit'"),
        (lambda s: s.update(cdiVersion="9.9.9"), "unknown cdiVersion '9.9.9'"),
    ],
)
def test_an_invalid_base_is_refused_naming_it(cli: Cli, change: Any, named: str) -> None:
    base = load_base(cli)
    change(base)
    base_file(cli).write_text(yaml.safe_dump(base))
    before = sim_state(cli.sim)["calls"]
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 2
    assert str(base_file(cli)) in ran.stderr and named in ran.stderr
    assert sim_state(cli.sim)["calls"] == before
    doctor = cli.json("doctor")
    [check_] = [c for c in doctor.json()["checks"] if c["name"] == "cdi-base"]
    assert (doctor.exit_code, check_["status"]) == (5, "fail") and named in check_["message"]


def test_a_base_without_the_gpu_is_refused_before_the_gpu_is_changed(cli: Cli) -> None:
    base = load_base(cli)
    gpu1 = sim_state(cli.sim)["gpus"][1]["uuid"]
    base["devices"] = [d for d in base["devices"] if d["name"] not in ("1", gpu1)]
    base_file(cli).write_text(yaml.safe_dump(base))
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "1", "--profile", "1g.10gb")
    assert ran.exit_code == 2
    assert str(base_file(cli)) in ran.stderr and "GPU minor 1" in ran.stderr
    assert sim_state(cli.sim)["gpus"][1]["gpuInstances"] == []
    assert allocate(cli, "ns/q", "1g.10gb", gpu="0")["created"] is True  # GPU 0 is described
    [check_] = [c for c in cli.json("doctor").json()["checks"] if c["name"] == "cdi-base"]
    assert check_["status"] == "fail" and "GPU 1" in check_["message"]


def test_base_spec_none_keeps_the_device_nodes_only_spec_and_doctor_warns(cli: Cli) -> None:
    configure(cli, "cdi:\n  baseSpec: none\n")
    inst = allocate(cli, "ns/p", "1g.10gb")["instance"]
    spec = spec_of(cli, inst["migUUID"])
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert all(set(n) == {"path"} for n in spec["devices"][0]["containerEdits"]["deviceNodes"])
    assert "mounts" not in spec["containerEdits"]
    doctor = cli.json("doctor")
    assert doctor.exit_code == 0
    [check_] = [c for c in doctor.json()["checks"] if c["name"] == "cdi-base"]
    assert check_["status"] == "warn" and "no driver libraries" in check_["message"]


def test_the_environment_overrides_the_base_setting(cli: Cli, monkeypatch: Any) -> None:
    monkeypatch.setenv("HAMIMIG_CDI_BASE_SPEC", str(PATHS_ONLY))
    shown = {s["key"]: s for s in cli.json("config", "show").json()["settings"]}
    assert shown["cdi.baseSpec"] == {
        "key": "cdi.baseSpec",
        "value": str(PATHS_ONLY),
        "source": "env HAMIMIG_CDI_BASE_SPEC",
    }
    inst = allocate(cli, "ns/p", "1g.10gb")["instance"]
    assert spec_of(cli, inst["migUUID"])["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    monkeypatch.setenv("HAMIMIG_CDI_BASE_SPEC", "relative/nvidia.yaml")
    ran = cli("list")
    assert ran.exit_code == 2 and "HAMIMIG_CDI_BASE_SPEC" in ran.stderr


def test_a_real_node_looks_in_the_runtimes_directories(tmp_path: Path) -> None:
    node = Node(cdi_dir=tmp_path / "cdi")
    assert node.cdi_base_dirs() == (Path("/etc/cdi"), Path("/var/run/cdi"), tmp_path / "cdi")
    assert Node().cdi_base_dirs() == (Path("/etc/cdi"), Path("/var/run/cdi"))
    # A simulated node never looks at the host's directories.
    assert Node(sim=tmp_path / "sim" / "node.json").cdi_base_dirs() == (
        tmp_path / "sim" / "nvidia-cdi",
    )


# ---------------------------------------------------------------------------------------------
# HAMi's annotations, and comparing as HAMi compares


def test_annotations_sit_on_the_device_and_pass_the_rules_and_the_schema(cli: Cli) -> None:
    configure(cli, "cdi:\n  annotations: true\n")
    inst = allocate(cli, "ns/p", "1g.10gb", gpu="1")["instance"]
    spec = spec_of(cli, inst["migUUID"])
    gpu1 = sim_state(cli.sim)["gpus"][1]
    assert "annotations" not in spec
    assert spec["devices"][0]["annotations"] == {
        "hami.io/mig-uuid": inst["migUUID"],
        "hami.io/parent-gpu-uuid": gpu1["uuid"],
        "hami.io/mig-geometry": f"{gpu1['minor']}:{inst['gpuInstanceID']}:0",
    }
    assert spec["cdiVersion"] == "0.6.0"
    assert validate_spec(spec) == []
    validator = schema_validator()
    assert list(validator.iter_errors(spec)) == []
    # The schema is a real check: a wrong type in the same spec fails it.
    spec["devices"][0]["containerEdits"]["deviceNodes"][-1]["major"] = "508"
    assert [e.message for e in validator.iter_errors(spec)] == ["'508' is not of type 'integer'"]


def hami_annotated(cli: Cli, inst: dict[str, Any], mig_uuid: str | None = None) -> bytes:
    """The spec as HAMi's plugin writes it: its three device annotations, version 0.6.0,
    its own layout (compact JSON)."""
    spec = spec_of(cli, inst["migUUID"])
    gpu = sim_state(cli.sim)["gpus"][inst["gpuIndex"]]
    spec["cdiVersion"] = "0.6.0"
    spec["devices"][0] = {
        "name": spec["devices"][0]["name"],
        "annotations": {
            "hami.io/mig-uuid": mig_uuid or inst["migUUID"],
            "hami.io/parent-gpu-uuid": gpu["uuid"],
            "hami.io/mig-geometry": f"{gpu['minor']}:{inst['gpuInstanceID']}:0",
        },
        "containerEdits": spec["devices"][0]["containerEdits"],
    }
    return json.dumps(spec, separators=(",", ":")).encode()


def test_a_hami_annotated_spec_for_the_same_device_is_consistent(cli: Cli) -> None:
    inst = allocate(cli, "ns/p", "1g.10gb")["instance"]
    assert cli("release", "--pod", "ns/p").exit_code == 0
    path = spec_path(cli, inst["migUUID"])
    hami = hami_annotated(cli, inst)
    assert validate_spec(json.loads(hami)) == []
    assert list(schema_validator().iter_errors(json.loads(hami))) == []
    path.write_bytes(hami)
    for command in (("recover", "--assume-no-pods"), ("reconcile",)):
        ran = cli.json(*command)
        assert ran.exit_code == 0 and actions(ran.json(), "repair-cdi") == []
    [check_] = [c for c in cli.json("doctor").json()["checks"] if c["name"] == "cdi-specs"]
    assert check_["status"] == "ok"
    assert allocate(cli, "ns/q", "1g.10gb")["reused"] is True
    assert path.read_bytes() == hami  # never rewritten: the two do not fight


def test_annotations_for_another_device_are_not_this_instances_spec(cli: Cli) -> None:
    """Not consistent, and not ours by content either (docs/formats.md "CDI specs"): the file
    is never rewritten; reconcile refuses it (tests/test_cdi_removal_by_content.py)."""
    inst = allocate(cli, "ns/p", "1g.10gb")["instance"]
    path = spec_path(cli, inst["migUUID"])
    path.write_bytes(hami_annotated(cli, inst, mig_uuid="MIG-00000000-0000-4000-8000-000000000000"))
    content = path.read_bytes()
    message = refused(cli.json("reconcile"), 5, "unverifiable")
    assert str(path) in message and "hami.io/mig-uuid annotation names" in message
    assert path.read_bytes() == content


def test_recover_removes_an_annotated_spec_nothing_accounts_for(cli: Cli) -> None:
    configure(cli, "cdi:\n  annotations: true\n")
    inst = allocate(cli, "ns/p", "1g.10gb")["instance"]
    gone = "MIG-0badc0de-0000-4000-8000-000000000002"
    stray = cli.cdi_dir / spec_path(cli, gone).name
    # A spec of ours for its own (gone) instance, annotations included.
    text = spec_path(cli, inst["migUUID"]).read_text()
    text = text.replace(device_name(inst["migUUID"]), device_name(gone))
    stray.write_text(text.replace(inst["migUUID"], gone))
    data = cli.json("recover", "--assume-no-pods").json()
    assert actions(data, "remove-orphan-cdi") == [None]
    assert not stray.exists() and spec_path(cli, inst["migUUID"]).exists()


# ---------------------------------------------------------------------------------------------
# A driver upgrade changes the base: specs follow it


def test_a_driver_upgrade_is_followed_by_reconcile_and_by_reuse(cli: Cli) -> None:
    active = allocated(cli, "ns/a", "1g.10gb")
    idle = allocated(cli, "ns/b", "1g.10gb")
    assert cli("release", "--pod", "ns/b").exit_code == 0
    upgrade_driver(cli, "560.35.03")
    checks = {c["name"]: c for c in cli.json("doctor").json()["checks"]}
    assert sum("differs" in c["message"] for c in checks.values()) == 2

    dry = cli.json("reconcile", "--dry-run").json()
    assert sorted(actions(dry, "repair-cdi")) == sorted([active, idle])
    assert "560.35.03" not in spec_path(cli, active).read_text()
    ran = cli.json("reconcile")
    assert ran.exit_code == 0
    assert sorted(actions(ran.json(), "repair-cdi")) == sorted([active, idle])
    for mig in (active, idle):
        text = spec_path(cli, mig).read_text()
        assert "libcuda.so.560.35.03" in text and DRIVER not in text
    assert actions(cli.json("reconcile").json(), "repair-cdi") == []  # now consistent

    upgrade_driver(cli, "570.86.10")
    data = allocate(cli, "ns/c", "1g.10gb")
    assert (data["reused"], data["instance"]["migUUID"]) == (True, idle)
    assert "libnvidia-ml.so.570.86.10" in spec_path(cli, idle).read_text()
    assert "570.86.10" not in spec_path(cli, active).read_text()  # reuse touches its own only
    ran = cli.json("recover", "--assume-no-pods")
    assert actions(ran.json(), "repair-cdi") == [active]
    assert "570.86.10" in spec_path(cli, active).read_text()


# ---------------------------------------------------------------------------------------------
# The driver's files and the setting, each rule on its own


def test_proc_devices_and_access_files_are_read_as_the_driver_writes_them(tmp_path: Path) -> None:
    text = "Character devices:\n195 nvidia\n508 nvidia-caps\n\nBlock devices:\n508 nvidia-caps\n"
    assert parse_char_majors(text) == {"nvidia": 195, "nvidia-caps": 508}
    proc = tmp_path / "devices"
    proc.write_text("Character devices:\n195 nvidia\n\nBlock devices:\n508 nvidia-caps\n")
    with pytest.raises(HamimigError, match="no nvidia-caps character device"):
        caps_major(proc)
    with pytest.raises(HamimigError, match="cannot read"):
        caps_major(tmp_path / "absent")
    access = tmp_path / "access"
    access.write_text("DeviceFileMinor: 21\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
    assert access_mode(access) == 0o400
    assert access_mode(tmp_path / "absent") is None


def test_without_the_nvidia_caps_major_no_spec_is_composed(cli: Cli) -> None:
    kept = allocated(cli, "ns/old", "1g.10gb")
    assert cli.json("release", "--mig-uuid", kept).exit_code == 0
    spec = spec_path(cli, kept).read_bytes()
    proc = Path(cli.json("sim", "show").json()["procDevices"])
    proc.write_text("Character devices:\n195 nvidia-frontend\n")
    # A new instance: refused before any GI is created (no create-and-destroy churn).
    before = sim_state(cli.sim)["calls"].get("nvmlDeviceCreateGpuInstanceWithPlacement", 0)
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb", "--placement", "3")
    assert ran.exit_code == 4 and "nvidia-caps" in ran.stderr
    calls = sim_state(cli.sim)["calls"]
    assert calls.get("nvmlDeviceCreateGpuInstanceWithPlacement", 0) == before
    # The existing instance keeps its spec: reused and recovered with a warning, not refused.
    reused = cli.json("allocate", "--pod", "ns/q", "--gpu", "0", "--profile", "1g.10gb")
    assert reused.exit_code == 0 and reused.json()["reused"] is True
    assert "nvidia-caps" in json.dumps(reused.json().get("warnings", []))
    assert cli.json("recover", "--assume-no-pods").exit_code == 0
    assert spec_path(cli, kept).read_bytes() == spec


@pytest.mark.parametrize("value", ["", "relative.yaml", 3, "None"])
def test_cdi_base_spec_setting_is_checked(cli: Cli, value: Any) -> None:
    configure(cli, yaml.safe_dump({"cdi": {"baseSpec": value}}))
    ran = cli("list")
    assert ran.exit_code == 2 and "cdi.baseSpec" in ran.stderr


def test_a_configured_base_path_that_is_absent_is_named(cli: Cli, tmp_path: Path) -> None:
    absent = tmp_path / "nowhere" / "nvidia.yaml"
    configure(cli, f"cdi:\n  baseSpec: {absent}\n")
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 2 and str(absent) in ran.stderr


def test_legacy_mode_writes_no_spec_and_needs_no_base(cli: Cli) -> None:
    configure(cli, "cdi:\n  enabled: false\n")
    shutil.rmtree(base_dir(cli))
    inst = allocate(cli, "ns/p", "1g.10gb")["instance"]
    assert inst["cdiDevice"] is None
    assert not cli.cdi_dir.exists() or not any(cli.cdi_dir.iterdir())
    assert cli("reconcile").exit_code == 0
