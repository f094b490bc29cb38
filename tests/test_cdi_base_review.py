"""NVIDIA base specs that runtimes load but that used to crash, exhaust or mislead hamimig.

Each test is a regression test for one review finding: YAML the reference library reads as
strings (an unquoted date), YAML that expands without bound (an alias bomb), fields the
reference library refuses that hamimig once copied into instance specs, the same kind in
/etc/cdi and /var/run/cdi, the device plugin's MIG-only spec next to a complete one, and doctor
skipping recover's checks when no base spec is there.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hamimig.store.cdi import validate_spec
from hamimig.store.cdi_base import AUTO, CTK_KIND, PLUGIN_KIND, find_base, read_spec_file
from tests.support.cdi import base_dir, base_file, load_base, spec_of, spec_path
from tests.support.cli import Cli, allocate, allocated
from tests.support.node import sim_state
from tests.support.nvml import CREATE_GI


def creates(cli: Cli) -> int:
    count: int = sim_state(cli.sim)["calls"].get(CREATE_GI, 0)
    return count


def test_an_unquoted_date_in_the_base_is_a_string_as_for_runtimes(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb")
    text = base_file(cli).read_text()
    assert "update-ldcache" in text
    base_file(cli).write_text(
        text.replace("- update-ldcache", "- 2024-01-01\n    - update-ldcache")
    )
    for args in (("reconcile",), ("recover", "--assume-no-pods"), ("doctor",)):
        ran = cli.json(*args)
        assert ran.exit_code in (0, 5), (args, ran.stdout)
        assert "internal error" not in ran.stdout
    assert "2024-01-01" in json.dumps(spec_of(cli, mig))
    assert allocate(cli, "ns/q", "1g.10gb", "3")["created"] is True


def _alias_bomb() -> str:
    lines = ['l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in range(1, 9):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_the_base_is_refused_at_once(cli: Cli) -> None:
    base = load_base(cli)
    text = yaml.safe_dump(base) + _alias_bomb()
    base_file(cli).write_text(text)
    started = time.monotonic()
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb")
    assert time.monotonic() - started < 20
    # Exit 5, not 2: beyond being no base, a file runtimes may load that hamimig cannot read
    # could define one of our devices, so the node is unverifiable before any base is wanted.
    assert ran.exit_code == 5 and str(base_file(cli)) in ran.stderr
    assert creates(cli) == 0
    doctor = cli.json("doctor").json()
    [check] = [c for c in doctor["checks"] if c["name"] == "cdi-base"]
    assert check["status"] == "fail"


def test_aliases_that_expand_modestly_are_read(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("a: &e {x: 1}\nb: *e\n")
    assert read_spec_file(path) == {"a": {"x": 1}, "b": {"x": 1}}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: 1\na: 2\n", r"duplicate key 'a' at the top level \(lines 1 and 2\)"),
        ("a: !!binary aGVsbG8=\n", "not representable"),
        ("a: &a [*a]\n", "expands"),
    ],
)
def test_yaml_the_reference_library_refuses_is_refused(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem):
        read_spec_file(path)


NODE = {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
HOOK = {"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook", "args": ["x"]}


@pytest.mark.parametrize(
    ("where", "change", "problem"),
    [
        ("node", {"major": 2**63}, "out of range"),
        ("node", {"fileMode": -1}, "out of range"),
        ("node", {"fileMode": 2**32}, "out of range"),
        ("node", {"uid": -1}, "out of range"),
        ("node", {"gid": 2**32}, "out of range"),
        ("hook", {"args": "nvidia-cdi-hook update-ldcache"}, "args"),
        ("hook", {"args": [1]}, "args"),
        ("hook", {"timeout": "soon"}, "timeout"),
    ],
)
def test_fields_the_reference_library_refuses(
    where: str, change: dict[str, Any], problem: str
) -> None:
    node, hook = dict(NODE), dict(HOOK)
    (node if where == "node" else hook).update(change)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": CTK_KIND,
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [node]}}],
        "containerEdits": {"hooks": [hook]},
    }
    assert any(problem in p for p in validate_spec(spec)), validate_spec(spec)
    for key in change:
        (node if where == "node" else hook)[key] = {**NODE, **HOOK}.get(key, 0)
    assert validate_spec(spec) == []


def test_a_base_with_a_bad_hook_is_refused_before_hardware(cli: Cli) -> None:
    base = load_base(cli)
    base["containerEdits"]["hooks"][0]["timeout"] = "soon"
    base_file(cli).write_text(yaml.safe_dump(base))
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 2 and "timeout" in ran.stderr
    assert creates(cli) == 0


def test_the_later_directory_wins_and_only_one_directory_can_conflict(
    cli: Cli, tmp_path: Path
) -> None:
    base = load_base(cli)
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    etc.mkdir()
    run.mkdir()
    stale = json.loads(json.dumps(base).replace("550.127.05", "535.104.05"))
    (etc / "nvidia.yaml").write_text(yaml.safe_dump(stale))
    (run / "nvidia.yaml").write_text(yaml.safe_dump(base))
    found = find_base(AUTO, [etc, run])
    assert found.problem is None and found.base is not None
    assert found.base.path == run / "nvidia.yaml"
    (run / "other.yaml").write_text(yaml.safe_dump(stale))
    conflict = find_base(AUTO, [etc, run])
    assert conflict.base is None and "differently" in (conflict.problem or "")


def test_the_plugins_mig_only_spec_falls_back_to_the_complete_one(cli: Cli) -> None:
    base = load_base(cli)
    mig_only = {
        "cdiVersion": base["cdiVersion"],
        "kind": PLUGIN_KIND,
        "devices": [
            {"name": "mig-1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia-caps/x"}]}}
        ],
    }
    (base_dir(cli) / "k8s.device-plugin.nvidia.com-gpu.json").write_text(json.dumps(mig_only))
    inst = allocate(cli, "ns/p", "1g.10gb", gpu="1")["instance"]
    assert "libcuda" in json.dumps(spec_of(cli, inst["migUUID"]))


def test_without_a_base_doctor_still_runs_recovers_checks(cli: Cli) -> None:
    allocate(cli, "ns/p", "1g.10gb")
    shutil.rmtree(base_dir(cli))
    assert cli.json("recover", "--assume-no-pods", "--dry-run").exit_code == 0
    checks = {c["name"]: c for c in cli.json("doctor").json()["checks"]}
    assert checks["cdi-base"]["status"] == "fail"
    assert checks["recovery"]["status"] == "ok"


def test_adoption_without_a_base_adopts_and_recover_writes_the_spec_later(
    cli: Cli, tmp_path: Path
) -> None:
    ran = cli.json("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "2")
    mig = ran.json()["instance"]["migUUID"]
    saved = tmp_path / "saved-base"
    shutil.move(str(base_dir(cli)), saved)
    data = cli.json("recover", "--assume-no-pods", "--adopt").json()
    [adopted] = [a for a in data["actions"] if a["action"] == "adopt-idle"]
    assert adopted["migUUID"] == mig and "no CDI spec written yet" in adopted["reason"]
    assert cli.json("show", mig).json()["state"] == "Idle"
    shutil.move(str(saved), base_dir(cli))
    again = cli.json("recover", "--assume-no-pods")
    assert again.exit_code == 0
    assert ("repair-cdi", mig) in [(a["action"], a["migUUID"]) for a in again.json()["actions"]]
    assert "libcuda" in json.dumps(spec_of(cli, mig))


@pytest.mark.parametrize(
    ("where", "key", "value", "problem"),
    [
        ("node", "type", {"c": 1}, "invalid device type {'c': 1}"),
        ("node", "type", ["c"], "invalid device type ['c']"),
        ("hook", "hookName", ["createContainer"], "invalid hook name ['createContainer']"),
        ("hook", "hookName", {"name": "x"}, "invalid hook name {'name': 'x'}"),
    ],
)
def test_an_object_or_list_where_the_base_wants_a_name_is_one_line(
    cli: Cli, where: str, key: str, value: Any, problem: str
) -> None:
    """A JSON object or list where a spec wants a device type or a hook name used to be looked
    up in a set of names: an internal error (unhashable type) instead of the spec's problem."""
    base = load_base(cli)
    edits = base["containerEdits"]
    (edits["deviceNodes"] if where == "node" else edits["hooks"])[0][key] = value
    base_file(cli).write_text(yaml.safe_dump(base))
    ran = cli("allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb")
    assert ran.exit_code == 2, ran.stderr
    assert problem in ran.stderr and "internal error" not in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1
    assert creates(cli) == 0
    [check] = [c for c in cli.json("doctor").json()["checks"] if c["name"] == "cdi-base"]
    assert check["status"] == "fail" and problem in check["message"]


def test_an_instance_spec_with_an_object_as_a_device_type_is_reported(cli: Cli) -> None:
    mig = allocated(cli, "ns/p", "1g.10gb")
    spec = spec_of(cli, mig)
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["type"] = {"c": 1}
    spec_path(cli, mig).write_text(json.dumps(spec))
    ran = cli.json("doctor")
    assert ran.exit_code == 5 and "internal error" not in ran.stdout
    assert "runtimes reject it" in ran.stdout and "invalid device type" in ran.stdout
    recovered = cli.json("recover", "--assume-no-pods", "--dry-run")
    assert recovered.exit_code in (0, 5) and "internal error" not in recovered.stdout


def test_problems_number_an_entry_by_its_place_in_the_list() -> None:
    """`deviceNodes[1]` is the second entry even when the first is not an object (it used to be
    numbered among the objects only, naming an entry that is not the one at fault)."""
    spec = {
        "cdiVersion": "0.5.0",
        "kind": CTK_KIND,
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": ["x", {"path": "rel"}]}}],
        "containerEdits": {"hooks": [None, HOOK, {**HOOK, "hookName": "later"}]},
    }
    assert validate_spec(spec) == [
        "devices[0].containerEdits.deviceNodes[0] must be an object",
        "devices[0].containerEdits.deviceNodes[1]: device path 'rel' is not absolute",
        "containerEdits.hooks[0] must be an object",
        "containerEdits.hooks[2]: invalid hook name 'later'",
    ]
