"""An ownership record that cannot be read blocks the node (recover and every command that
changes something exit 5) until it is repaired or dropped. The way out is named where the
refusal is: doctor's fix, the refusal's message and `show` give the exact `hamimig forget …`
line; `forget` takes the record's CDI device name or file name (its MIG UUID may be the very
thing that cannot be read); and `list` shows the live instance as `Unreadable`, not as a plain
Unmanaged one, everywhere a state is shown or filtered (`--state`, `--no-headers`, metrics).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from hamimig.cli.app import app
from hamimig.hw.types import Placement
from hamimig.rehearsal.simulator import sim_init
from hamimig.sim.state import CRASH_EXIT_STATUS
from hamimig.store.cdi import DEFAULT_KIND, spec_file_name
from hamimig.store.intents import Intent, IntentStore
from hamimig.store.records import Owner, record_name
from tests.support.cli import (
    Cli,
    Ran,
    allocated,
    idle,
    instances,
    ok,
    refused,
    run_hamimig,
    sim,
    state_of,
)
from tests.support.files import tree
from tests.support.node import live_uuids


def _device(mig_uuid: str) -> str:
    return "mig-" + hashlib.sha256(mig_uuid.encode()).hexdigest()


def _corrupt(cli: Cli, mig_uuid: str) -> Path:
    record = cli.state_dir / record_name(mig_uuid)
    record.write_text("{not json")
    return record


def _recover(cli: Cli) -> int:
    return cli("--node", "n", "recover", "--assume-no-pods").exit_code


def _pasteable(cli: Cli, words: str) -> str:
    """`hamimig WORDS` as hamimig prints it for this node: with the options that chose it."""
    return shlex.join(["hamimig", *cli.globals(), *shlex.split(words)])


def _paste(text: str) -> Ran:
    """Run the one `hamimig … forget …` line `text` ends with, as an operator pastes it: in a
    shell of its own (no option of the test's node added), the JSON output asked for."""
    [line] = re.findall(r"hamimig .*forget \S+$", text)
    words = shlex.split(line)[1:]
    result = CliRunner().invoke(app, ["-o", "json", *words], catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


def _record_check(cli: Cli) -> dict[str, str]:
    checks = [c for c in cli.json("doctor").json()["checks"] if c["name"].startswith("record/")]
    assert len(checks) == 1, checks
    found: dict[str, str] = checks[0]
    return found


# ---------------------------------------------------------------------------------------------
# The way out, named where the refusal is


def test_doctor_names_the_forget_line_and_that_line_unblocks_the_node(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    record = _corrupt(cli, uuid)
    assert _recover(cli) == 5
    check = _record_check(cli)
    assert check["status"] == "fail"
    assert check["hint"].endswith(_pasteable(cli, f"forget {_device(uuid)}"))
    # Its spec is no orphan to remove: the record is there, it cannot be read.
    checks = cli.json("doctor").json()["checks"]
    assert not [c for c in checks if c["name"].startswith("cdi-spec/")], checks

    ran = _paste(check["hint"])

    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    [item] = ran.json()["forgotten"]
    assert item["migUUID"] is None and item["state"] is None  # the content could not be read
    assert item["record"] == str(record) and "not valid JSON" in item["unreadable"]
    assert item["cdiSpec"] == str(cli.cdi_dir / spec_file_name(uuid))
    assert not record.exists() and not (cli.cdi_dir / spec_file_name(uuid)).exists()
    assert uuid in live_uuids(cli)  # the hardware is untouched
    assert _recover(cli) == 0
    assert state_of(cli, uuid) == "Unmanaged"
    assert not any(c["name"].startswith("record/") for c in cli.json("doctor").json()["checks"])


@pytest.mark.parametrize(
    "args",
    [
        ("release", "--mig-uuid", "{uuid}"),
        ("reclaim", "--mig-uuid", "{uuid}"),
        ("--node", "n", "recover", "--assume-no-pods"),
    ],
)
def test_a_refusal_names_the_forget_line(cli: Cli, args: tuple[str, ...]) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    _corrupt(cli, uuid)
    before = tree(cli.state_dir, cli.cdi_dir)
    message = refused(cli.json(*(a.format(uuid=uuid) for a in args)), 5, "unverifiable")
    assert message.endswith(_pasteable(cli, f"forget {_device(uuid)}")), message
    assert tree(cli.state_dir, cli.cdi_dir) == before
    ok(_paste(message))
    assert _recover(cli) == 0


def test_the_forget_line_names_the_options_given_quoted_and_not_those_of_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pasted in another shell in the same directory, the line acts on the same node: an
    option given on the command line comes with it (quoted for the shell); one set in the
    environment is inherited by the paste, so it is not repeated."""
    home = tmp_path / "a node's $HOME"
    sim_init(home / "node.json", "H100-SXM5-80GB", 1)
    cli = Cli(home / "node.json", home / "state dir", home / "cdi")
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    _corrupt(cli, uuid)
    monkeypatch.setenv("HAMIMIG_SIM", str(cli.sim))
    monkeypatch.setenv("HAMIMIG_CDI_DIR", str(cli.cdi_dir))
    runner = CliRunner()
    ran = runner.invoke(app, ["--state-dir", str(cli.state_dir), "release", "--mig-uuid", uuid])
    assert ran.exit_code == 5, ran.stderr
    device = _device(uuid)
    line = shlex.join(["hamimig", "--state-dir", str(cli.state_dir), "forget", device])
    assert ran.stderr.strip().endswith(line), ran.stderr
    ok(_paste(ran.stderr.strip()))
    assert not (cli.state_dir / record_name(uuid)).exists()


def test_a_prefix_is_still_refused_while_a_record_cannot_be_read_and_says_how_on(
    cli: Cli,
) -> None:
    """A prefix might name the instance of the record that cannot be read: it is refused
    (fail closed), with the name the unreadable record is forgotten by."""
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    other = idle(cli, "ns/other", "1g.10gb", "1")
    _corrupt(cli, uuid)
    before = tree(cli.state_dir, cli.cdi_dir)
    message = refused(cli.json("forget", other[:12]), 5, "unverifiable")
    assert message.endswith(_pasteable(cli, f"forget {_device(uuid)}")), message
    assert tree(cli.state_dir, cli.cdi_dir) == before


# ---------------------------------------------------------------------------------------------
# forget by the record's names


@pytest.mark.parametrize(
    "form",
    ["device", "qualified", "file", "upper"],
)
def test_forget_takes_the_names_of_an_unreadable_record(cli: Cli, form: str) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    record = _corrupt(cli, uuid)
    name = {
        "device": _device(uuid),
        "qualified": f"{DEFAULT_KIND}={_device(uuid)}",
        "file": record.name,
        "upper": "mig-" + _device(uuid).removeprefix("mig-").upper(),
    }[form]
    before = tree(cli.state_dir, cli.cdi_dir)
    dry = ok(cli.json("forget", "--dry-run", name))
    assert [f["record"] for f in dry["forgotten"]] == [str(record)]
    assert tree(cli.state_dir, cli.cdi_dir) == before

    ran = cli("forget", name)

    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert f"forgot {record.name} (unreadable)" in ran.stdout
    assert not record.exists()
    assert _recover(cli) == 0


def test_forget_by_device_name_still_checks_its_kind(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    _corrupt(cli, uuid)
    before = tree(cli.state_dir, cli.cdi_dir)
    assert "empty kind" in refused(cli.json("forget", f"={_device(uuid)}"), 2, "usage")
    message = refused(cli.json("forget", f"nvidia.com/gpu={_device(uuid)}"), 2, "usage")
    assert "not this node's" in message
    assert "file name" in refused(cli.json("forget", f"../x/{record_name(uuid)}"), 2, "usage")
    assert tree(cli.state_dir, cli.cdi_dir) == before


def test_forget_takes_the_file_name_doctor_gives_a_misnamed_record(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    stray = cli.state_dir / "hami-owned-copy.json"
    stray.write_text("garbage")
    assert _recover(cli) == 5
    fix = _record_check(cli)["hint"]
    assert fix.endswith(_pasteable(cli, "forget hami-owned-copy.json"))
    ran = _paste(fix)
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    [item] = ran.json()["forgotten"]
    assert (item["record"], item["cdiSpec"]) == (str(stray), None)
    assert not stray.exists()
    assert (cli.state_dir / record_name(uuid)).exists()  # the real record stays
    assert (cli.cdi_dir / spec_file_name(uuid)).exists()
    assert _recover(cli) == 0
    assert state_of(cli, uuid) == "Idle"


def test_forget_by_name_of_a_record_file_that_is_not_there_is_not_found(cli: Cli) -> None:
    idle(cli, "ns/done", "1g.10gb", "0")
    message = refused(cli.json("forget", "hami-owned-nothing.json"), 6, "not-found")
    assert "hami-owned-nothing.json" in message


def test_a_readable_record_named_by_its_device_name_keeps_the_active_check(cli: Cli) -> None:
    uuid = allocated(cli, "ns/run", "1g.10gb", "0")
    record = cli.state_dir / record_name(uuid)
    for name in (_device(uuid), record.name):
        message = refused(cli.json("forget", name), 3, "conflict")
        assert message.startswith(f"{uuid} is Active"), message
    assert record.exists()


def test_an_intent_naming_the_instance_blocks_forgetting_its_record_by_name(cli: Cli) -> None:
    """The intent's rollback could destroy the instance once no record protects it."""
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    record = _corrupt(cli, uuid)
    gpu = sim(cli, "show")["gpus"][0]["uuid"]
    IntentStore(cli.state_dir).write(
        Intent(
            id="half",
            op="allocate",
            gpu_uuid=gpu,
            gpu_index=0,
            profile="1g.10gb",
            profile_id=19,
            placement=Placement(0, 1),
            owner=Owner("ns", "half"),
            created_at="2024-01-01T00:00:00.000+00:00",
            mig_uuid=uuid,
        )
    )
    message = refused(cli.json("forget", _device(uuid)), 3, "conflict")
    assert "intent half" in message
    assert message.endswith(_pasteable(cli, "forget --intent half")), message
    assert record.exists()


# ---------------------------------------------------------------------------------------------
# list, show and metrics: Unreadable


def test_list_show_and_metrics_call_the_instance_unreadable(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    other = allocated(cli, "ns/run", "1g.10gb", "1")
    record = _corrupt(cli, uuid)

    assert state_of(cli, uuid) == "Unreadable"
    assert state_of(cli, other) == "Active"
    kept = ok(cli.json("list", "--state", "Unreadable"))["instances"]
    assert [i["migUUID"] for i in kept] == [uuid]
    assert ok(cli.json("list", "--state", "Unmanaged"))["instances"] == []
    plain = cli("list", "--state", "Unreadable", "--no-headers")
    assert plain.exit_code == 0, (plain.stdout, plain.stderr)
    [row] = plain.stdout.splitlines()
    assert row.split()[1] == uuid and "Unreadable" in row.split()

    shown = ok(cli.json("show", uuid[:12]))
    assert (shown["migUUID"], shown["state"], shown["record"]) == (uuid, "Unreadable", str(record))
    assert shown["error"].endswith(_pasteable(cli, f"forget {_device(uuid)}"))
    assert ok(cli.json("show", _device(uuid)[:16]))["state"] == "Unreadable"

    ran = cli("metrics")
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    families = {f.name: f.samples for f in text_string_to_metric_families(ran.stdout)}
    by_state: dict[str, float] = {}
    for sample in families["hamimig_mig_instances"]:
        state = sample.labels["state"]
        by_state[state] = by_state.get(state, 0) + sample.value
    assert (by_state["Unreadable"], by_state["Unmanaged"]) == (1, 0)
    info = {s.labels["mig_uuid"]: s.labels["state"] for s in families["hamimig_mig_instance_info"]}
    assert info == {uuid: "Unreadable", other: "Active"}


def test_an_unreadable_instance_stays_fail_closed(cli: Cli) -> None:
    """Unreadable is a view: allocate, reclaim and recover still refuse the node, and nothing
    touches the instance."""
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    _corrupt(cli, uuid)
    refused(
        cli.json("allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb"),
        5,
        "unverifiable",
    )
    refused(cli.json("reclaim", "--mig-uuid", uuid), 5, "unverifiable")
    assert _recover(cli) == 5
    assert uuid in live_uuids(cli)
    assert [i["state"] for i in instances(cli)] == ["Unreadable"]


@pytest.mark.slow
@pytest.mark.parametrize("action", ["crash-before", "crash-after"])
@pytest.mark.parametrize("op", ["record.remove", "cdi.remove"])
def test_a_crash_in_forget_by_name_leaves_what_a_rerun_or_recover_finishes(
    cli: Cli, op: str, action: str
) -> None:
    """No removal can be queued without the MIG UUID: the record goes first, and a spec left
    behind by a crash is one no record accounts for, which `recover` removes."""
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    record = _corrupt(cli, uuid)
    spec = cli.cdi_dir / spec_file_name(uuid)
    assert cli("sim", "fault", "add", "--op", op, "--action", action).exit_code == 0

    crashed = run_hamimig(*cli.globals(), "forget", _device(uuid))

    assert crashed.returncode == CRASH_EXIT_STATUS, crashed.stderr
    if record.exists():
        rerun = run_hamimig(*cli.globals(), "forget", _device(uuid))
        assert rerun.returncode == 0, rerun.stderr
    recovered = run_hamimig(*cli.globals(), "--node", "n", "recover", "--assume-no-pods")
    assert recovered.returncode == 0, recovered.stderr
    assert not record.exists() and not spec.exists()
    assert uuid in live_uuids(cli) and state_of(cli, uuid) == "Unmanaged"
