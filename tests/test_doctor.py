"""`hamimig doctor` on the simulated node: each check's ok/warn/fail and the exit codes.

Exit 0 when nothing fails (warnings allowed), 4 when a failing check is hardware or I/O, else 5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hamimig.engine.node import Node
from hamimig.hw.types import Placement
from hamimig.reports.doctor import run_checks
from hamimig.reports.views import CheckStatus
from hamimig.store.cdi import DEFAULT_KIND, device_name, spec_file_name
from hamimig.store.intents import Intent, IntentStore
from hamimig.store.records import record_name
from tests.support.cli import Cli, Ran, allocated
from tests.support.files import tree
from tests.support.node import node_dir

# ---------------------------------------------------------------------------------------------
# helpers


def doctor(cli: Cli) -> tuple[Ran, dict[str, Any]]:
    ran = cli.json("doctor")
    data = ran.json()  # exactly one JSON object, also when checks fail
    assert data["kind"] == "Doctor", ran.stdout
    return ran, data


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in data["checks"]}


def statuses(data: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in data["checks"]}


def failing(data: dict[str, Any]) -> list[str]:
    return [c["name"] for c in data["checks"] if c["status"] == "fail"]


def warning(data: dict[str, Any]) -> list[str]:
    return [c["name"] for c in data["checks"] if c["status"] == "warn"]


def one(data: dict[str, Any], prefix: str) -> dict[str, Any]:
    found = [c for c in data["checks"] if c["name"].startswith(prefix)]
    assert len(found) == 1, [c["name"] for c in data["checks"]]
    check: dict[str, Any] = found[0]
    return check


def healthy_node(cli: Cli) -> tuple[str, str]:
    """An Active and an Idle instance, with their records and specs."""
    active = allocated(cli, "ns/a", "1g.10gb")
    idle = allocated(cli, "ns/b", "2g.20gb", gpu="1")
    assert cli.json("release", "--pod", "ns/b").exit_code == 0
    return active, idle


# ---------------------------------------------------------------------------------------------
# healthy nodes


def test_fresh_node_is_healthy_with_warnings_for_missing_directories(cli: Cli) -> None:
    ran, data = doctor(cli)
    assert ran.exit_code == 0, ran.stdout
    assert data["exitCode"] == 0
    assert failing(data) == []
    assert sorted(warning(data)) == ["cdi-dir", "state-dir"]
    checks = by_name(data)
    assert "created" not in checks["state-dir"]["hint"]
    assert "creates it (0750)" in checks["state-dir"]["message"]
    assert checks["nvml"]["message"] == f"simulated node {cli.sim} reachable"
    assert checks["driver"]["message"].startswith("driver ")
    assert checks["mig-mode/gpu0"]["status"] == "ok"
    assert checks["mig-mode/gpu1"]["status"] == "ok"
    assert checks["mig-minors"]["status"] == "ok"
    assert checks["config"]["status"] == "ok"
    counts = {"ok": len(data["checks"]) - 3, "warn": 2, "fail": 0, "skipped": 1}
    assert data["summary"] == counts
    for check in data["checks"]:  # camelCase keys, one-line texts, a fix on every non-ok
        assert set(check) == {"name", "status", "message", "hint"}
        assert "\n" not in check["message"]
        assert (check["hint"] is None) == (check["status"] == "ok")


def test_node_with_instances_is_all_ok(cli: Cli) -> None:
    healthy_node(cli)
    before = tree(cli.state_dir, cli.cdi_dir)
    ran, data = doctor(cli)
    assert ran.exit_code == 0, ran.stdout
    assert failing(data) == [] and warning(data) == [], data
    checks = by_name(data)
    assert checks["records"]["message"] == "2 record(s) load: 1 Active, 1 Idle"
    assert checks["cdi-specs"]["message"].startswith("2 spec(s) of ours, all valid and match")
    assert checks["state-dir/mode"]["message"] == "mode 0750"
    assert checks["intents"]["status"] == checks["cdi-removal-queue"]["status"] == "ok"
    assert checks["cdi-dir"]["message"].endswith("is writable")
    assert checks["cdi-conflicts"]["status"] == "ok"
    # Read-only: nothing changed, no temp file left behind.
    assert tree(cli.state_dir, cli.cdi_dir) == before
    assert not [p for p in cli.cdi_dir.iterdir() if p.name.startswith(".hamimig-doctor-")]


def test_table_output_has_the_columns_and_a_summary(cli: Cli) -> None:
    healthy_node(cli)
    ran = cli("doctor")
    assert ran.exit_code == 0
    header = next(line for line in ran.stdout.splitlines() if "CHECK" in line)
    for column in ("CHECK", "STATUS", "DETAIL", "FIX"):
        assert column in header
    assert "mig-mode/gpu0" in ran.stdout
    assert ran.stdout.rstrip().splitlines()[-1].endswith("0 fail, 1 skipped: healthy")
    # A check that did not run says so: never OK.
    [pods] = [line for line in ran.stdout.splitlines() if "recovery/pods" in line]
    assert "SKIPPED" in pods and "OK" not in pods


def test_table_output_of_a_failing_node_says_so(cli: Cli) -> None:
    healthy_node(cli)
    os.chmod(cli.state_dir, 0o770)
    ran = cli("doctor")
    assert ran.exit_code == 5
    assert "FAIL" in ran.stdout
    assert "not healthy (exit 5)" in ran.stdout.rstrip().splitlines()[-1]
    assert f"chmod 0750 {cli.state_dir}" in ran.stdout


def test_yaml_output_is_one_document(cli: Cli) -> None:
    import yaml

    ran = cli("doctor", output="yaml")
    assert ran.exit_code == 0
    assert yaml.safe_load(ran.stdout)["kind"] == "Doctor"


# ---------------------------------------------------------------------------------------------
# the state directory


@pytest.mark.parametrize("mode", [0o770, 0o757, 0o777])
def test_group_or_world_writable_state_dir_fails(cli: Cli, mode: int) -> None:
    healthy_node(cli)
    os.chmod(cli.state_dir, mode)
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert data["exitCode"] == 5
    assert failing(data) == ["state-dir/mode"]
    check = by_name(data)["state-dir/mode"]
    assert f"mode {mode:04o} is group- or world-writable" in check["message"]
    assert check["hint"] == f"chmod 0750 {cli.state_dir}"


def test_state_dir_with_an_unexpected_mode_warns(cli: Cli) -> None:
    healthy_node(cli)
    os.chmod(cli.state_dir, 0o755)
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    assert warning(data) == ["state-dir/mode"]
    assert by_name(data)["state-dir/mode"]["message"] == "mode 0755, expected 0750"


def test_state_dir_owned_by_another_user_fails(cli: Cli) -> None:
    healthy_node(cli)
    if os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    os.chown(cli.state_dir, 4242, -1)
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert failing(data) == ["state-dir/owner"]
    assert "owned by uid 4242" in by_name(data)["state-dir/owner"]["message"]


def test_symlinked_state_dir_fails_without_raising(cli: Cli, tmp_path: Path) -> None:
    healthy_node(cli)
    real = tmp_path / "real-state"
    cli.state_dir.rename(real)
    cli.state_dir.symlink_to(real)
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert "state-dir" in failing(data)
    check = by_name(data)["state-dir"]
    assert "symbolic link" in check["message"] and str(real) in check["message"]
    assert "real directory" in check["hint"]
    # The hardware and CDI checks still ran; specs are not called orphans for want of records.
    assert {"nvml", "mig-mode/gpu0", "cdi-dir", "cdi-specs", "cdi-conflicts"} <= set(by_name(data))
    assert failing(data) == ["state-dir"] and warning(data) == []


def test_state_dir_that_is_a_file_fails(cli: Cli) -> None:
    cli.state_dir.write_text("not a directory")
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert failing(data) == ["state-dir"]
    assert "is not a directory" in by_name(data)["state-dir"]["message"]


def test_corrupt_record_fails_naming_the_file(cli: Cli) -> None:
    active, _ = healthy_node(cli)
    path = cli.state_dir / record_name(active)
    path.write_text('{"version": 1, "migUUID": ')
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    check = one(data, "record/")
    assert check["status"] == "fail"
    # The whole file name's subject, never shortened: it is copied and matched by scripts.
    subject = record_name(active).removeprefix("hami-owned-").removesuffix(".json")
    assert check["name"] == f"record/{subject}"
    assert check["message"].startswith(f"{path}: record is not valid JSON")
    assert "records" not in by_name(data)  # the failing file stands in for the summary
    # Its spec is no orphan to remove: its record is there, only unreadable (the record's check
    # says what to do), so the spec is counted with the others.
    assert not [c for c in data["checks"] if c["name"].startswith("cdi-spec/")]
    assert by_name(data)["cdi-specs"]["status"] == "ok"


def skipped_recovery(data: dict[str, Any], blocker: str) -> None:
    """The recovery checks that could not run are there, `skipped`, naming what blocks them."""
    checks = by_name(data)
    for name in ("recovery", "recovery/pods"):
        assert checks[name]["status"] == "skipped", checks.get(name)
        assert checks[name]["message"].startswith("not checked while "), checks[name]
        assert blocker in checks[name]["message"], checks[name]
    assert data["summary"]["skipped"] == sum(c["status"] == "skipped" for c in data["checks"])
    assert data["summary"]["skipped"] >= 2


def test_recovery_is_reported_skipped_while_a_record_cannot_be_read(cli: Cli) -> None:
    active, _ = healthy_node(cli)
    (cli.state_dir / record_name(active)).write_text("{bad")
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    skipped_recovery(data, one(data, "record/")["name"])


def test_recovery_is_reported_skipped_without_the_hardware(cli: Cli) -> None:
    healthy_node(cli)
    cli.sim.unlink()
    ran, data = doctor(cli)
    assert ran.exit_code == 4
    skipped_recovery(data, "nvml")


@pytest.mark.parametrize("option", ["--cdi-dir", "--state-dir"])
@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_directory_option_naming_no_directory_says_so_and_nothing_else(
    cli: Cli, tmp_path: Path, option: str, kind: str
) -> None:
    """`--cdi-dir /dev/null` (or a regular file): no `chmod` of it, no "make it a directory"
    or "move it away" (of /dev/null!): the option is wrong. Recovery is `skipped`."""
    healthy_node(cli)
    # A FIFO stands for a device such as /dev/null: a test must never risk the real one.
    target = tmp_path / ("a-file" if kind == "file" else "a-fifo")
    if kind == "file":
        target.write_text("")
    else:
        os.mkfifo(target)
    target.chmod(0o666)  # as loose as /dev/null: still nothing to chmod
    ran = cli.json(option, str(target), "doctor")
    data = ran.json()
    name = option.removeprefix("--")
    assert failing(data) == [name], data["checks"]
    check = by_name(data)[name]
    assert check["message"].startswith(f"{target} is not a directory"), check
    assert check["hint"] == f"not a directory: check {option}"
    for c in data["checks"]:
        assert "chmod" not in (c["hint"] or ""), c
        assert str(target) not in (c["hint"] or ""), c
    skipped_recovery(data, name)


def test_record_that_is_a_symlink_fails(cli: Cli, tmp_path: Path) -> None:
    active, _ = healthy_node(cli)
    path = cli.state_dir / record_name(active)
    target = tmp_path / "elsewhere.json"
    path.rename(target)
    path.symlink_to(target)
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert "symbolic link" in one(data, "record/")["message"]


@pytest.mark.parametrize(("mode", "status", "code"), [(0o644, "warn", 0), (0o660, "fail", 5)])
def test_record_file_mode_other_than_0600(cli: Cli, mode: int, status: str, code: int) -> None:
    active, _ = healthy_node(cli)
    path = cli.state_dir / record_name(active)
    os.chmod(path, mode)
    ran, data = doctor(cli)
    assert ran.exit_code == code
    check = one(data, "file-mode/")
    assert check["status"] == status
    assert f"mode {mode:04o}" in check["message"]
    assert check["hint"] == f"chmod 0600 {path}"
    assert by_name(data)["records"]["status"] == "ok"  # the record itself still loads


def test_leftover_intent_warns_with_recover_hint(cli: Cli) -> None:
    healthy_node(cli)
    gpu_uuid = cli.json("list").json()["gpus"][0]["uuid"]
    intent = Intent(
        id="0123456789abcdef",
        op="allocate",
        gpu_uuid=gpu_uuid,
        gpu_index=0,
        profile="1g.10gb",
        profile_id=19,
        placement=Placement(3, 1),
        owner=None,
        created_at="2025-01-01T00:00:00.000+00:00",
    )
    IntentStore(cli.state_dir).write(intent)
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    assert warning(data) == ["intents"]
    check = by_name(data)["intents"]
    assert "1 intent(s) left: allocate 1g.10gb at 3:1 on GPU 0" in check["message"]
    assert "hamimig recover" in check["hint"]


def test_unreadable_intent_fails(cli: Cli) -> None:
    healthy_node(cli)
    (cli.state_dir / "intent-broken.json").write_text("[]")
    os.chmod(cli.state_dir / "intent-broken.json", 0o600)
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert failing(data) == ["intent/broken"]
    assert "intents" not in by_name(data)


def test_queued_cdi_removal_fails_with_reconcile_hint(cli: Cli) -> None:
    """A spec still published for a destroyed instance blocks new instances on its GPU."""
    _, idle = healthy_node(cli)
    assert cli.json("sim", "fault", "add", "--op", "cdi.remove", "--error", "EIO").exit_code == 0
    assert cli.json("reclaim", "--mig-uuid", idle).exit_code == 0
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert failing(data) == ["cdi-removal-queue"]
    queue = by_name(data)["cdi-removal-queue"]
    assert f"1 CDI spec removal(s) pending (oldest {idle}" in queue["message"]
    assert queue["hint"].startswith("hamimig reconcile (retries them); until then")
    spec = one(data, "cdi-spec/")
    assert spec["status"] == "warn" and "queued for removal" in spec["message"]
    # Once reconcile has run, the node is clean again.
    assert cli.json("reconcile").exit_code == 0
    ran, data = doctor(cli)
    assert warning(data) == [] and failing(data) == []


# ---------------------------------------------------------------------------------------------
# GPUs, NVML, mig-minors, config


def test_pending_mig_mode_change_warns_reset_needed(cli: Cli) -> None:
    ran = cli.json("sim", "mig-mode", "--gpu", "0", "--disable", "--pending")
    assert ran.exit_code == 0, ran.stdout
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    check = by_name(data)["mig-mode/gpu0"]
    assert check["status"] == "warn"
    assert (
        "MIG enabled now, disabled after a GPU reset (reset needed; it destroys every"
        in (check["message"])
    )
    assert "nvidia-smi -r -i 0" in check["hint"] and "-mig 1" in check["hint"]
    assert by_name(data)["mig-mode/gpu1"]["status"] == "ok"


def test_pending_mig_enable_warns_reset_needed(cli: Cli) -> None:
    assert cli.json("sim", "mig-mode", "--gpu", "1", "--disable").exit_code == 0
    assert cli.json("sim", "mig-mode", "--gpu", "1", "--enable", "--pending").exit_code == 0
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    check = by_name(data)["mig-mode/gpu1"]
    assert check["status"] == "warn"
    assert check["message"].endswith("MIG disabled now, enabled after a GPU reset (reset needed)")
    assert "nvidia-smi -r -i 1" in check["hint"] and "-mig 0" in check["hint"]


def test_mig_disabled_warns(cli: Cli) -> None:
    assert cli.json("sim", "mig-mode", "--gpu", "1", "--disable").exit_code == 0
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    check = by_name(data)["mig-mode/gpu1"]
    assert check["status"] == "warn" and "MIG disabled" in check["message"]
    assert "-mig 1" in check["hint"]


def _without_sim_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "HAMIMIG_SIM"}


def test_nvml_unavailable_is_a_failing_check_not_a_crash(tmp_path: Path) -> None:
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "hamimig",
            "--state-dir",
            str(tmp_path / "state"),
            "--cdi-dir",
            str(tmp_path / "cdi"),
            "--config",
            str(tmp_path / "absent.yaml"),
            "-o",
            "json",
            "doctor",
        ],
        capture_output=True,
        text=True,
        env=_without_sim_env(),
        timeout=120,
        check=False,
    )
    data = json.loads(ran.stdout)  # one object, with every check
    assert data["kind"] == "Doctor"
    checks = by_name(data)
    if checks["nvml"]["status"] == "ok":
        pytest.skip("this machine has a working NVIDIA driver")
    assert ran.returncode == 4, ran.stdout + ran.stderr
    assert data["exitCode"] == 4
    assert checks["nvml"]["status"] == "fail"
    assert "NVML is not available" in checks["nvml"]["message"]
    assert "--sim" in checks["nvml"]["hint"]
    assert not [n for n in checks if n.startswith("mig-mode/")]
    assert {"config", "state-dir", "records", "cdi-dir", "cdi-conflicts"} <= set(checks)
    assert ran.stderr == ""


def test_missing_simulated_node_fails_with_exit_4(cli: Cli) -> None:
    cli.sim.unlink()
    ran, data = doctor(cli)
    assert ran.exit_code == 4
    assert "nvml" in failing(data)
    assert "sim init" in by_name(data)["nvml"]["hint"]


def test_unreadable_mig_minors_fails_with_exit_4(cli: Cli) -> None:
    (node_dir(cli.sim) / "mig-minors").unlink()
    ran, data = doctor(cli)
    assert ran.exit_code == 4
    assert failing(data) == ["mig-minors"]
    assert "cannot read MIG capability minors" in by_name(data)["mig-minors"]["message"]


def test_mig_minors_without_the_gpus_entries_fails(cli: Cli) -> None:
    (node_dir(cli.sim) / "mig-minors").write_text("config 1\nmonitor 2\n")
    ran, data = doctor(cli)
    assert ran.exit_code == 4
    assert (
        "has no entries for GPU 0 (minor 0), GPU 1 (minor 1)"
        in (by_name(data)["mig-minors"]["message"])
    )


def test_invalid_config_fails_and_the_other_checks_still_run(cli: Cli) -> None:
    config = cli.state_dir.parent / "absent-config.yaml"
    config.write_text("cdi:\n  enbled: true\n")
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert failing(data) == ["config"]
    assert "unknown key 'cdi.enbled'" in by_name(data)["config"]["message"]
    assert "nvml" in by_name(data)


def test_hardware_failure_outranks_unverifiable_state(cli: Cli) -> None:
    healthy_node(cli)
    os.chmod(cli.state_dir, 0o777)
    (node_dir(cli.sim) / "mig-minors").unlink()
    ran, data = doctor(cli)
    assert sorted(failing(data)) == ["mig-minors", "state-dir/mode"]
    assert ran.exit_code == data["exitCode"] == 4


# ---------------------------------------------------------------------------------------------
# CDI


def test_foreign_spec_defining_our_device_fails(cli: Cli) -> None:
    active, _ = healthy_node(cli)
    foreign = cli.cdi_dir / "other-vendor.json"
    foreign.write_text(
        json.dumps(
            {
                "cdiVersion": "0.3.0",
                "kind": DEFAULT_KIND,
                "devices": [
                    {
                        "name": device_name(active),
                        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]},
                    }
                ],
            }
        )
    )
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    check = one(data, "cdi-conflict/")
    assert check["status"] == "fail"
    assert f"{DEFAULT_KIND}={device_name(active)}" in check["message"]
    assert str(foreign) in check["message"]
    assert "runtimes drop it from both files" in check["message"]
    assert failing(data) == [check["name"]]


def test_foreign_yaml_spec_in_another_cdi_dir_fails(cli: Cli, tmp_path: Path) -> None:
    active, _ = healthy_node(cli)
    etc_cdi = tmp_path / "etc-cdi"
    etc_cdi.mkdir()
    (etc_cdi / "copy.yaml").write_text(
        f"cdiVersion: 0.3.0\nkind: {DEFAULT_KIND}\ndevices:\n"
        f"  - name: {device_name(active)}\n"
        "    containerEdits:\n      env: [A=1]\n"
    )
    (etc_cdi / "unrelated.json").write_text('{"kind": "example.com/x", "devices": [{"name": "a"}]}')
    (etc_cdi / "garbage.json").write_text("{")
    node = Node(
        state_dir=cli.state_dir, cdi_dir=cli.cdi_dir, config_path=Path("/nonexistent"), sim=cli.sim
    )
    try:
        report = run_checks(node, cdi_dirs=[etc_cdi, cli.cdi_dir])
    finally:
        node.close()
    assert report.exit_code == 5
    [conflict] = [c for c in report.checks if c.name.startswith("cdi-conflict/")]
    assert conflict.status is CheckStatus.FAIL
    assert str(etc_cdi / "copy.yaml") in conflict.message
    assert "shadows" in conflict.message


def test_a_simulated_nodes_default_cdi_dirs_are_its_own(cli: Cli) -> None:
    """Its NVIDIA spec directory stands for /etc/cdi: the host's is never read."""
    node = Node(state_dir=cli.state_dir, cdi_dir=cli.cdi_dir, sim=cli.sim)
    try:
        report = run_checks(node)
    finally:
        node.close()
    assert report.exit_code == 0
    [check] = [c for c in report.checks if c.name == "cdi-conflicts"]
    assert check.message.endswith(f"in {node_dir(cli.sim) / 'nvidia-cdi'})")


def test_orphan_spec_warns(cli: Cli) -> None:
    active, _ = healthy_node(cli)
    (cli.state_dir / record_name(active)).unlink()
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    check = one(data, "cdi-spec/")
    assert check["status"] == "warn"
    assert check["message"].startswith("orphan spec")
    assert str(cli.cdi_dir / spec_file_name(active)) in check["hint"]
    assert by_name(data)["cdi-specs"]["message"] == "1 other spec(s) of ours are fine"


def test_spec_that_differs_from_what_the_instance_needs_warns(cli: Cli) -> None:
    active, _ = healthy_node(cli)
    path = cli.cdi_dir / spec_file_name(active)
    spec = json.loads(path.read_text())
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] = "/dev/nvidia7"
    path.write_text(json.dumps(spec, indent=2) + "\n")
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    check = one(data, "cdi-spec/")
    assert check["status"] == "warn"
    assert f"differs from what {active} needs" in check["message"]
    assert "repair-cdi" in check["hint"]
    # recover rewrites it, and the node is clean again.
    assert cli.json("recover", "--assume-no-pods").exit_code == 0
    assert warning(doctor(cli)[1]) == []


def test_spec_runtimes_reject_fails(cli: Cli) -> None:
    active, _ = healthy_node(cli)
    path = cli.cdi_dir / spec_file_name(active)
    spec = json.loads(path.read_text())
    spec["surprise"] = True
    path.write_text(json.dumps(spec))
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    check = one(data, "cdi-spec/")
    assert check["status"] == "fail"
    assert "runtimes reject it: spec: unknown field 'surprise'" in check["message"]


def test_missing_spec_of_a_live_instance_warns(cli: Cli) -> None:
    active, _ = healthy_node(cli)
    (cli.cdi_dir / spec_file_name(active)).unlink()
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    check = one(data, "cdi-spec/")
    assert check["status"] == "warn"
    assert check["message"].startswith(f"missing: {active} is live")


def test_spec_of_an_instance_that_is_not_live_warns(cli: Cli) -> None:
    healthy_node(cli)
    assert cli.json("sim", "reset", "--gpu", "0").exit_code == 0
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    check = one(data, "cdi-spec/")
    assert check["status"] == "warn"
    assert "its instance is not live" in check["message"]


def test_cdi_dir_that_is_a_symlink_fails(cli: Cli, tmp_path: Path) -> None:
    healthy_node(cli)
    real = tmp_path / "real-cdi"
    cli.cdi_dir.rename(real)
    cli.cdi_dir.symlink_to(real)
    ran, data = doctor(cli)
    assert ran.exit_code == 5
    assert failing(data) == ["cdi-dir"]
    assert "symbolic link" in by_name(data)["cdi-dir"]["message"]


def test_cdi_dir_that_is_not_writable_fails_with_exit_4(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy_node(cli)
    real_access = os.access

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        if Path(path) == cli.cdi_dir and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    ran, data = doctor(cli)
    assert ran.exit_code == 4
    assert failing(data) == ["cdi-dir"]
    assert "is not writable" in by_name(data)["cdi-dir"]["message"]


def test_legacy_mode_skips_cdi_checks(cli: Cli) -> None:
    config = cli.state_dir.parent / "absent-config.yaml"
    config.write_text("cdi:\n  enabled: false\n")
    allocated(cli, "ns/a", "1g.10gb")
    ran, data = doctor(cli)
    assert ran.exit_code == 0
    assert by_name(data)["cdi-dir"]["message"].startswith("CDI disabled")
    assert "cdi-conflicts" not in by_name(data)
