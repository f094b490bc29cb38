"""`hamimig forget`: the supported way out when recovery refuses, hardware untouched.

The crash suite kills a real `forget` process at every durable step (simulator file-op faults)
and shows that the node always ends consistent: no CDI spec without a record or a queued
removal, and a rerun of `forget` or one `reconcile` finishes the job.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path

import pytest

from hamimig.hw.types import Placement
from hamimig.sim.state import CRASH_EXIT_STATUS, DURABLE_OPS
from hamimig.store.cdi import spec_file_name
from hamimig.store.intents import Intent, IntentStore
from hamimig.store.lock import NodeLock
from hamimig.store.queue import QUEUE_NAME, RemovalQueue
from hamimig.store.records import Owner, RecordStore, record_name
from tests.support.cli import Cli, allocated, idle, run_hamimig, state_of
from tests.support.files import tree
from tests.support.node import live_uuids, sim_state


def _queued(cli: Cli) -> list[str]:
    removals, problems = RemovalQueue(cli.state_dir).load()
    assert not problems
    return [r.mig_uuid for r in removals]


def _has_spec(cli: Cli, uuid: str) -> bool:
    return (cli.cdi_dir / spec_file_name(uuid)).exists()


def _has_record(cli: Cli, uuid: str) -> bool:
    return (cli.state_dir / record_name(uuid)).exists()


def _intent(cli: Cli, intent_id: str, placement: Placement, mig_uuid: str | None = None) -> Path:
    gpu_uuid = sim_state(cli.sim)["gpus"][0]["uuid"]
    store = IntentStore(cli.state_dir)
    store.write(
        Intent(
            id=intent_id,
            op="allocate",
            gpu_uuid=gpu_uuid,
            gpu_index=0,
            profile="1g.10gb",
            profile_id=19,
            placement=placement,
            owner=Owner("ns", "half"),
            created_at="2024-01-01T00:00:00.000+00:00",
            mig_uuid=mig_uuid,
        )
    )
    return store.path_of(intent_id)


def _recover(cli: Cli) -> int:
    return cli("--node", "n", "recover", "--assume-no-pods").exit_code


def _recover_argv(cli: Cli) -> list[str]:
    return [*cli.globals(), "--node", "n", "-o", "json", "recover", "--assume-no-pods"]


# --------------------------------------------------------------------------------------------
# Records


def test_forget_drops_record_and_spec_and_leaves_the_instance_unmanaged(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    record = cli.state_dir / record_name(uuid)
    spec = cli.cdi_dir / spec_file_name(uuid)
    layout = sim_state(cli.sim)["gpus"]

    ran = cli.json("forget", uuid)

    assert ran.exit_code == 0, ran.stdout + ran.stderr
    [instance] = ran.json().pop("instances")  # the record's instance, outcome forgotten
    assert (instance["migUUID"], instance["state"], instance["outcome"]) == (
        uuid,
        "Idle",
        "forgotten",
    )
    forgotten = ran.json()
    del forgotten["instances"]
    assert forgotten == {
        "kind": "Forget",
        "dryRun": False,
        "forgotten": [
            {
                "migUUID": uuid,
                "state": "Idle",
                "record": str(record),
                "cdiSpec": str(spec),
                "unreadable": None,
            }
        ],
    }
    assert not record.exists() and not spec.exists()
    assert _queued(cli) == []
    assert sim_state(cli.sim)["gpus"] == layout  # no NVML mutation at all
    assert state_of(cli, uuid) == "Unmanaged"
    recovered = cli.json("--node", "n", "recover", "--assume-no-pods")
    assert recovered.exit_code == 0
    assert [(a["action"], a["migUUID"]) for a in recovered.json()["actions"]] == [
        ("preserve-unmanaged", uuid)
    ]


def test_forget_table_output_is_one_line_per_thing(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    ran = cli("forget", uuid)
    assert ran.exit_code == 0
    lines = ran.stdout.splitlines()
    # The instance table (OUTCOME forgotten), then one line per dropped file.
    assert lines[0].startswith("forgotten (ownership dropped")
    assert lines[-2] == f"forgot {uuid} (Idle): its record and CDI spec"
    assert lines[-1:] == ["the hardware was not touched: see 'hamimig list'"]


def test_forget_dry_run_changes_nothing(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    before = tree(cli.state_dir, cli.cdi_dir)
    ran = cli.json("forget", uuid, "--dry-run")
    assert ran.exit_code == 0
    assert ran.json()["dryRun"] is True
    assert ran.json()["forgotten"][0]["cdiSpec"] == str(cli.cdi_dir / spec_file_name(uuid))
    assert tree(cli.state_dir, cli.cdi_dir) == before
    table = cli("forget", uuid, "--dry-run").stdout.splitlines()
    assert table[0] == "would forget (dry run: nothing changed)"
    assert table[-1].startswith(f"would forget {uuid} (Idle)")


def test_forget_refuses_an_active_record(cli: Cli) -> None:
    uuid = allocated(cli, "team-a/train-1", "1g.10gb", "0")
    before = tree(cli.state_dir, cli.cdi_dir)
    ran = cli("forget", uuid)
    assert ran.exit_code == 3
    assert f"{uuid} is Active (held by team-a/train-1): release it first" in ran.stderr
    assert len(ran.stderr.splitlines()) == 1
    assert tree(cli.state_dir, cli.cdi_dir) == before


def test_forget_refuses_a_uuid_named_by_an_intent(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    _intent(cli, "pending1", Placement(5, 1), mig_uuid=uuid)
    before = tree(cli.state_dir, cli.cdi_dir)
    ran = cli("forget", uuid)
    assert ran.exit_code == 3
    assert "intent pending1" in ran.stderr
    assert tree(cli.state_dir, cli.cdi_dir) == before


def test_forget_refuses_a_record_an_intent_overlaps(cli: Cli) -> None:
    """An intent at the record's slices could roll back (destroy) the instance once its record
    is gone, even when it does not name the UUID yet."""
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    _intent(cli, "pending2", Placement(0, 1))
    ran = cli("forget", uuid)
    assert ran.exit_code == 3
    assert "is overlapped by intent pending2" in ran.stderr
    assert _has_record(cli, uuid)


def test_forget_unknown_uuid_is_not_found(cli: Cli) -> None:
    idle(cli, "ns/done", "1g.10gb", "0")
    ran = cli("forget", "MIG-00000000-0000-0000-0000-000000000000")
    assert ran.exit_code == 6
    assert "no hamimig record for MIG-00000000-0000-0000-0000-000000000000" in ran.stderr


@pytest.mark.parametrize(
    "bad",
    [
        "MIG-bad",
        "GPU-00000000-0000-0000-0000-000000000000",
        "MIG-00000000-0000-0000-0000-000000000000\n",
        "MIG-../../etc/passwd",
        "MIG-00000000-0000-0000-0000-00000000000g",
        "",
    ],
)
def test_forget_malformed_uuid_is_a_usage_error(cli: Cli, bad: str) -> None:
    ran = cli.json("forget", bad)
    assert ran.exit_code == 2
    assert ran.json()["error"]["code"] == "usage"
    assert not cli.state_dir.exists()  # refused before even taking the lock


@pytest.mark.parametrize(
    "args",
    [[], ["MIG-00000000-0000-0000-0000-000000000000", "--intent", "abc"]],
    ids=["neither", "both"],
)
def test_forget_needs_exactly_one_target(cli: Cli, args: list[str]) -> None:
    ran = cli("forget", *args)
    assert ran.exit_code == 2
    assert "exactly one" in ran.stderr


def test_forget_drops_a_corrupt_record_that_recovery_refuses(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    record = cli.state_dir / record_name(uuid)
    record.write_text("{not json")
    assert _recover(cli) == 5

    ran = cli.json("forget", uuid)

    assert ran.exit_code == 0, ran.stdout + ran.stderr
    item = ran.json()["forgotten"][0]
    assert item["state"] is None and "not valid JSON" in item["unreadable"]
    assert not record.exists() and not _has_spec(cli, uuid)
    assert _recover(cli) == 0
    assert state_of(cli, uuid) == "Unmanaged"


def test_forget_drops_a_record_that_does_not_match_the_hardware(cli: Cli) -> None:
    """The record's instance was replaced behind hamimig's back: recovery refuses (5); forget
    needs no verification against the hardware, and afterwards recovery runs."""
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    assert cli("sim", "reset", "--gpu", "0").exit_code == 0
    assert (
        cli("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0").exit_code
        == 0
    )
    assert _recover(cli) == 5
    assert cli("forget", uuid).exit_code == 0
    assert _recover(cli) == 0
    assert not _has_record(cli, uuid) and not _has_spec(cli, uuid)


def test_other_unreadable_records_do_not_block_forget(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    other = cli.state_dir / record_name("MIG-11111111-1111-1111-1111-111111111111")
    other.write_text("garbage")
    assert cli("forget", uuid).exit_code == 0
    assert not _has_record(cli, uuid)
    assert other.read_text() == "garbage"


def test_an_active_record_is_refused_even_when_another_file_claims_its_uuid(cli: Cli) -> None:
    """The loader refuses both files of a duplicate claim; forget reads its own file directly,
    so the Active check still applies to it."""
    uuid = allocated(cli, "team-a/train-1", "1g.10gb", "0")
    record = cli.state_dir / record_name(uuid)
    (cli.state_dir / "hami-owned-copy.json").write_bytes(record.read_bytes())
    assert cli("forget", uuid).exit_code == 3
    assert record.exists()


def test_a_symlink_at_the_record_name_is_removed_not_followed(cli: Cli, tmp_path: Path) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    record = cli.state_dir / record_name(uuid)
    target = tmp_path / "precious.json"
    target.write_bytes(record.read_bytes())
    record.unlink()
    record.symlink_to(target)
    ran = cli.json("forget", uuid)
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    assert "symbolic link" in ran.json()["forgotten"][0]["unreadable"]
    assert not record.is_symlink() and target.exists()


def test_an_unreadable_queue_refuses_before_anything_changes(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    (cli.state_dir / QUEUE_NAME).write_text("[")
    before = tree(cli.state_dir, cli.cdi_dir)
    for args in (["--dry-run"], []):
        ran = cli("forget", uuid, *args)
        assert ran.exit_code == 5, ran.stderr
        assert QUEUE_NAME in ran.stderr
    assert tree(cli.state_dir, cli.cdi_dir) == before


def test_an_unreadable_intent_blocks_forgetting_a_record_until_it_is_forgotten(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    (cli.state_dir / "intent-broken.json").write_text("{")
    ran = cli("forget", uuid)
    assert ran.exit_code == 5
    assert ran.stderr.rstrip().endswith(
        shlex.join(["hamimig", *cli.globals(), "forget", "--intent", "broken"])
    )
    assert _has_record(cli, uuid)
    assert cli("forget", "--intent", "broken").exit_code == 0
    assert cli("forget", uuid).exit_code == 0


def test_forget_in_legacy_mode_removes_only_the_record(cli: Cli) -> None:
    config = cli.state_dir.parent / "absent-config.yaml"
    config.write_text("cdi:\n  enabled: false\n")
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    assert not cli.cdi_dir.exists()
    cli("sim", "fault", "add", "--op", "queue.write", "--action", "crash-before")

    ran = cli.json("forget", uuid)

    assert ran.exit_code == 0, ran.stdout + ran.stderr
    assert ran.json()["forgotten"][0]["cdiSpec"] is None
    assert not _has_record(cli, uuid)
    assert not (cli.state_dir / QUEUE_NAME).exists()
    assert sim_state(cli.sim)["faults"]  # the queue was never written


def test_a_failed_spec_removal_is_queued_for_reconcile(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    cli("sim", "fault", "add", "--op", "cdi.remove", "--error", "EIO", "--action", "raise")
    ran = cli.json("forget", uuid)
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    assert "queued" in ran.json()["forgotten"][0]["note"]
    assert not _has_record(cli, uuid) and _has_spec(cli, uuid)
    assert _queued(cli) == [uuid]
    assert cli("reconcile").exit_code == 0
    assert not _has_spec(cli, uuid) and _queued(cli) == []


def test_forget_waits_for_the_node_lock(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    with NodeLock(cli.state_dir):
        ran = cli("forget", uuid, "--lock-timeout", "0")
    assert ran.exit_code == 7
    assert _has_record(cli, uuid)


# --------------------------------------------------------------------------------------------
# Intents


def test_forget_intent_drops_it_and_leaves_the_hardware(cli: Cli) -> None:
    path = _intent(cli, "left0ver", Placement(3, 1))
    layout = sim_state(cli.sim)["gpus"]
    ran = cli.json("forget", "--intent", "left0ver")
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    assert ran.json()["forgotten"] == [
        {
            "intent": "left0ver",
            "intentFile": str(path),
            "record": None,
            "cdiSpec": None,
            "unreadable": None,
        }
    ]
    assert not path.exists()
    assert sim_state(cli.sim)["gpus"] == layout
    assert cli("forget", "--intent", "left0ver").exit_code == 6


def test_forget_intent_dry_run_keeps_it(cli: Cli) -> None:
    path = _intent(cli, "keep1", Placement(3, 1))
    ran = cli("forget", "--intent", "keep1", "--dry-run")
    assert ran.exit_code == 0
    assert ran.stdout.splitlines()[-1] == "would forget intent keep1"
    # The intent's allocation in the table, as Creating, and what the real run would do.
    assert any("Creating" in line and "would forget" in line for line in ran.stdout.splitlines())
    assert path.exists()


def test_forget_intent_drops_an_unreadable_one(cli: Cli) -> None:
    cli.state_dir.mkdir(parents=True)
    path = cli.state_dir / "intent-mangled.json"
    path.write_text('{"version": 99}')
    ran = cli.json("forget", "--intent", "mangled")
    assert ran.exit_code == 0
    assert "unsupported intent version" in ran.json()["forgotten"][0]["unreadable"]
    assert not path.exists()


@pytest.mark.parametrize("bad", ["a/b", "../x", "a.b", "x" * 65, ""])
def test_forget_malformed_intent_id_is_a_usage_error(cli: Cli, bad: str) -> None:
    ran = cli("forget", "--intent", bad)
    assert ran.exit_code == 2
    assert "invalid intent ID" in ran.stderr


def test_forget_unknown_intent_is_not_found(cli: Cli) -> None:
    ran = cli("forget", "--intent", "nosuch")
    assert ran.exit_code == 6
    assert "no intent nosuch" in ran.stderr


# --------------------------------------------------------------------------------------------
# Crash at every durable step


CRASH_STEPS = [
    ("queue.write", 0),  # queue the spec's removal
    ("record.remove", 0),
    ("cdi.remove", 0),
    ("queue.write", 1),  # drop the queue entry
]
COUNTING_SKIP = 10_000


def _check_consistent(cli: Cli, uuid: str) -> None:
    """No spec without a record or a queued removal; the hardware never changes."""
    assert uuid in live_uuids(cli)
    for name in (p.name for p in cli.cdi_dir.iterdir()):
        assert name != spec_file_name(uuid) or _has_record(cli, uuid) or uuid in _queued(cli)


@pytest.mark.slow
def test_clean_forget_makes_exactly_the_enumerated_file_operations(cli: Cli) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    for op in DURABLE_OPS:
        cli("sim", "fault", "add", "--op", op, "--action", "raise", "--skip", str(COUNTING_SKIP))
    ran = run_hamimig(*cli.globals(), "forget", uuid)
    assert ran.returncode == 0, ran.stderr
    left = {f["op"]: f["skip"] for f in sim_state(cli.sim)["faults"]}
    done = Counter(
        {op: COUNTING_SKIP - left[op] for op in DURABLE_OPS if left[op] != COUNTING_SKIP}
    )
    assert done == Counter(op for op, _ in CRASH_STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("action", ["crash-before", "crash-after"])
@pytest.mark.parametrize(("op", "skip"), CRASH_STEPS, ids=lambda v: str(v))
def test_crash_in_forget_leaves_a_node_that_rerun_or_reconcile_finishes(
    cli: Cli, op: str, skip: int, action: str
) -> None:
    uuid = idle(cli, "ns/done", "1g.10gb", "0")
    keep = idle(cli, "ns/keep", "1g.10gb", "4")
    fault = ["sim", "fault", "add", "--op", op, "--action", action, "--skip", str(skip)]
    assert cli(*fault).exit_code == 0

    crashed = run_hamimig(*cli.globals(), "forget", uuid)

    assert crashed.returncode == CRASH_EXIT_STATUS, crashed.stderr
    _check_consistent(cli, uuid)
    if _has_record(cli, uuid):
        # Nothing durable is lost yet: forget starts over.
        assert RecordStore(cli.state_dir).load()[0][uuid].state.value == "Idle"
        rerun = run_hamimig(*cli.globals(), "forget", uuid)
        assert rerun.returncode == 0, rerun.stderr
    else:
        # The record is gone: a rerun says so and points at reconcile, which finishes.
        rerun = run_hamimig(*cli.globals(), "forget", uuid)
        assert rerun.returncode == 6
        if _has_spec(cli, uuid) or _queued(cli):
            assert "hamimig reconcile" in rerun.stderr
        done = run_hamimig(*cli.globals(), "reconcile")
        assert done.returncode == 0, done.stderr
    assert not _has_record(cli, uuid) and not _has_spec(cli, uuid)
    assert _queued(cli) == []
    assert _has_record(cli, keep) and _has_spec(cli, keep)
    assert uuid in live_uuids(cli)
    recovered = run_hamimig(*_recover_argv(cli))
    assert recovered.returncode == 0, recovered.stdout
    actions = {a["migUUID"]: a["action"] for a in json.loads(recovered.stdout)["actions"]}
    assert actions[uuid] == "preserve-unmanaged"
