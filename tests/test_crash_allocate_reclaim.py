"""A crash (kill -9) at every step boundary of `allocate` and `reclaim` leaves durable state that
says enough to finish or undo the step (docs/design.md "Crash safety").

The scenarios, with what each of their steps leaves, are in tests/support/crash_scenarios.py,
the invariants in tests/support/crash.py. Each case sets up a node in-process, injects one
simulator fault `crash-before` or `crash-after` on the K-th call of one operation, and runs the
command in a real subprocess, which must die with status 137. Then it reads the simulated node
and the state and CDI directories and checks two things: the invariants every crash point must
keep (every live GI/CI hamimig made is named by a record or covered by an intent, every record
explains its instance, no CDI spec without a reason to exist, no overlap), and the exact durable
state expected after the steps that completed. Recovery is tests/test_crash_recover.py's
subject: only the durable state is asserted here, plus that `list` still runs and shows the
in-flight instance.

The step sequences are enumerated explicitly; `test_clean_run_makes_exactly_the_enumerated_steps`
proves each enumeration complete by counting every mutating NVML call and every file operation
of the same command run cleanly.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hamimig.rehearsal.simulator import sim_init
from hamimig.sim.state import CRASH_EXIT_STATUS, DURABLE_OPS
from tests.support.cli import Cli, run_hamimig, sim
from tests.support.crash import check_invariants, count_file_ops, counted, snapshot
from tests.support.crash_scenarios import (
    CREATE,
    CREATE_AT,
    CREATE_COMMAND,
    KEEP_AT,
    RECLAIM,
    SCENARIOS,
    Scenario,
    Setup,
    allocate_at,
    entries_at,
    expect_neighbour,
    setup_node,
)
from tests.support.nvml import DESTROY_CI, MUTATING_NVML

pytestmark = pytest.mark.slow

Prepare = Callable[[Scenario], tuple[Cli, Setup]]


@pytest.fixture(scope="module")
def templates() -> dict[str, tuple[Path, Setup]]:
    return {}


@pytest.fixture
def prepare(
    templates: dict[str, tuple[Path, Setup]],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
) -> Prepare:
    """A node set up for `scenario`: built once per scenario, then copied for each test."""

    def make(scenario: Scenario) -> tuple[Cli, Setup]:
        if scenario.name not in templates:
            base = tmp_path_factory.mktemp(f"template-{scenario.name}")
            sim_init(base / "sim" / "node.json", "H100-SXM5-80GB", 2)
            template = Cli(base / "sim" / "node.json", base / "state", base / "cdi")
            setup = setup_node(template, scenario.idle)
            templates[scenario.name] = (base, setup)
        base, setup = templates[scenario.name]
        for sub in ("sim", "state", "cdi"):
            shutil.copytree(base / sub, tmp_path / sub)
        cli = Cli(tmp_path / "sim" / "node.json", tmp_path / "state", tmp_path / "cdi")
        assert snapshot(cli) == setup.before
        return cli, setup

    return make


def _crash_cases() -> list[Any]:
    cases = []
    for scenario in SCENARIOS:
        for index in scenario.crash_steps:
            op, skip = scenario.steps[index]
            for action in ("crash-before", "crash-after"):
                done = index if action == "crash-before" else index + 1
                cases.append(
                    pytest.param(
                        scenario, index, action, done, id=f"{scenario.name}-{op}#{skip}-{action}"
                    )
                )
    return cases


CRASH_CASES = _crash_cases()


def test_the_crash_matrix_covers_every_step() -> None:
    assert len(CRASH_CASES) == 2 * (8 + 5 + 2 + 11 + 1 + 4) == 62
    ops = {scenario.steps[i][0] for scenario in SCENARIOS for i in scenario.crash_steps}
    assert ops == set(MUTATING_NVML) | set(DURABLE_OPS)


@pytest.mark.parametrize(("scenario", "index", "action", "done"), CRASH_CASES)
def test_crash_leaves_durable_state_that_explains_the_step(
    prepare: Prepare, scenario: Scenario, index: int, action: str, done: int
) -> None:
    cli, setup = prepare(scenario)
    check_invariants(setup.before)
    scenario.expect(setup.before, setup, 0)
    for args in scenario.pre_faults:
        sim(cli, "fault", "add", *args)
    op, skip = scenario.steps[index]
    sim(cli, "fault", "add", "--op", op, "--action", action, "--skip", str(skip))

    ran = run_hamimig(*cli.globals(), "-o", "json", *scenario.command(setup))

    assert ran.returncode == CRASH_EXIT_STATUS, (ran.stdout, ran.stderr)
    assert (ran.stdout, ran.stderr) == ("", "")
    after = snapshot(cli)
    assert after.faults == ()  # the injected fault (and any failing one) fired, nothing else
    check_invariants(after)
    expect_neighbour(after, setup)
    scenario.expect(after, setup, done)

    listed = cli.json("list")
    assert listed.exit_code == 0, listed.stdout
    doc = listed.json()
    assert (doc["kind"], doc["warnings"]) == ("InstanceList", [])
    items: list[dict[str, Any]] = doc["instances"]
    keep = [i for i in items if i["migUUID"] == setup.keep.mig_uuid]
    assert [(i["state"], i["owner"]["name"]) for i in keep] == [("Active", "keep")]
    scenario.list_expect(items, after, setup, done)


def test_list_shows_one_entry_per_instance_after_record_write(cli: Cli) -> None:
    allocate_at(cli, "ns/keep", "1g.10gb", KEEP_AT)
    sim(cli, "fault", "add", "--op", "record.write", "--action", "crash-after")
    ran = run_hamimig(*cli.globals(), "-o", "json", *CREATE_COMMAND)
    assert ran.returncode == CRASH_EXIT_STATUS
    after = snapshot(cli)
    gi = after.gi_at(0, CREATE_AT)
    assert gi is not None
    listed = cli.json("list")
    assert listed.exit_code == 0
    entries = entries_at(listed.json()["instances"], CREATE_AT)
    # One instance, one entry; an intent still exists, so the allocation is still in flight.
    assert [(e["state"], e["migUUID"], e["gpuInstanceID"]) for e in entries] == [
        ("Creating", gi.cis[0][1], gi.id)
    ]


def test_show_agrees_with_list_on_a_half_destroyed_instance(prepare: Prepare) -> None:
    cli, setup = prepare(RECLAIM)
    (record,) = setup.idle
    sim(cli, "fault", "add", "--op", DESTROY_CI, "--action", "crash-after")
    ran = run_hamimig(*cli.globals(), "reclaim", "--mig-uuid", record.mig_uuid)
    assert ran.returncode == CRASH_EXIT_STATUS
    listed = [i for i in cli.json("list").json()["instances"] if i["migUUID"] == record.mig_uuid]
    assert [i["state"] for i in listed] == ["Reclaiming"]
    shown = cli.json("show", record.mig_uuid)
    assert shown.exit_code == 0
    doc = shown.json()
    assert (doc["state"], doc["gpuInstanceID"], doc["gpuIndex"]) == (
        "Reclaiming",
        record.gpu_instance_id,
        0,
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_clean_run_makes_exactly_the_enumerated_steps(prepare: Prepare, scenario: Scenario) -> None:
    cli, setup = prepare(scenario)
    failing = frozenset(args[1] for args in scenario.pre_faults)
    for args in scenario.pre_faults:
        sim(cli, "fault", "add", *args)
    count_file_ops(cli, failing)
    before = snapshot(cli)

    ran = run_hamimig(*cli.globals(), "-o", "json", *scenario.command(setup))

    assert ran.returncode == scenario.clean_exit, (ran.stdout, ran.stderr)
    assert ran.stderr == ""
    kinds = {"allocate": "Allocation", "reclaim": "Reclaim"}
    kind = json.loads(ran.stdout)["kind"]
    assert kind == ("Error" if scenario.clean_exit else kinds[scenario.command(setup)[0]])
    after = snapshot(cli)
    assert counted(before, after, failing) == Counter(op for op, _ in scenario.steps)
    check_invariants(after)
    expect_neighbour(after, setup)
    scenario.expect(after, setup, len(scenario.steps))


def test_counting_faults_count(cli: Cli) -> None:
    """The counting trick above: a `raise` fault with a large skip only counts calls."""
    count_file_ops(cli, frozenset())
    before = snapshot(cli)
    allocate_at(cli, "ns/keep", "1g.10gb", KEEP_AT)
    after = snapshot(cli)
    assert counted(before, after, frozenset()) == Counter(op for op, _ in CREATE.steps)
