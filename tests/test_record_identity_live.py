"""What `reconcile`, `recover` and `reclaim` do from a record is done only once the record is
verified against the live instance (docs/design.md "Trust model"), never from what it says alone.

- A spec is made of the GI and CI IDs: `reconcile` rewrites one (a driver upgrade) only for a
  record verified live, or it would hand another GI's device nodes, another tenant's slice, to
  the record's pod at its next container start. A record that disagrees stops the pass (exit 5,
  nothing changed), its dry run too.
- A GI at a record's placement that lost its CI is the record's to destroy only when the
  record's MIG UUID is live nowhere else: otherwise the record is wrong, and that GI (an
  allocation in flight, another's) is left alone, on the same GPU or on another.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hamimig.store.cdi import device_name
from tests.support.cdi import base_file, spec_path
from tests.support.cli import Cli, allocate, fail_destroys, ok, refused, sim, sim_create
from tests.support.files import lifecycle_files
from tests.support.node import gpus
from tests.support.nvml import call_diff, calls, mutating, mutating_calls
from tests.support.records import hami_record, record_path
from tests.support.unchanged import Unchanged

DRIVER = "550.127.05"


def edit_record(cli: Cli, mig: str, **fields: Any) -> None:
    """Change fields of a record by hand, as the red team did (HAMi's v1 field names)."""
    path = record_path(cli, mig)
    doc = json.loads(path.read_text())
    doc.update(fields)
    path.write_text(json.dumps(doc))


def upgrade_driver(cli: Cli) -> None:
    """What a driver upgrade does to NVIDIA's spec: every library path changes, so every
    instance spec differs from what it needs and reconcile means to rewrite it."""
    path = base_file(cli)
    path.write_text(path.read_text().replace(DRIVER, "560.35.03"))


MODES = (("reconcile", "--dry-run"), ("reconcile",))


def refuses(cli: Cli, *wanted: str, modes: tuple[tuple[str, ...], ...] = MODES) -> None:
    """`reconcile` and its dry run (or only those of `modes`) exit 5 naming `wanted`, and
    change nothing."""
    unchanged = Unchanged(cli)
    for args in modes:
        message = refused(cli.json(*args), 5, "unverifiable")
        for text in wanted:
            assert text in message, (args, message)
        assert message.endswith("run 'hamimig recover'; nothing was changed"), message
        unchanged.check()


@pytest.mark.parametrize("args", MODES, ids=["dry-run", "real"])
def test_a_record_naming_another_instances_gi_never_gets_its_device_nodes(
    cli: Cli, args: tuple[str, ...]
) -> None:
    inst = allocate(cli, "team-a/job", "1g.10gb", "0")["instance"]
    mig, gpu, own = inst["migUUID"], inst["gpuUUID"], inst["gpuInstanceID"]
    other = sim_create(cli, "1g.10gb", "2")["gpuInstanceID"]
    edit_record(cli, mig, gpuInstanceID=other)
    before = spec_path(cli, mig).read_bytes()
    refuses(
        cli,
        f"{mig}: recorded GPU/GI/CI/placement/profile {gpu}/{other}/0/0:1/1g.10gb",
        f"but live {gpu}/{own}/0/0:1/1g.10gb",
        modes=(args,),
    )
    assert spec_path(cli, mig).read_bytes() == before


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("placement", {"start": 4, "size": 1}, "/0/4:1/1g.10gb but live"),
        ("profile", "1g.20gb", "/0/0:1/1g.20gb but live"),
        ("computeInstanceID", 1, "/1/0:1/1g.10gb but live"),
    ],
)
def test_a_spec_a_driver_upgrade_changed_is_rewritten_only_for_a_verified_record(
    cli: Cli, field: str, value: Any, shown: str
) -> None:
    mig = allocate(cli, "ns/idle", "1g.10gb", "0")["instance"]["migUUID"]
    ok(cli.json("release", "--mig-uuid", mig))
    edit_record(cli, mig, **{field: value})
    upgrade_driver(cli)
    refuses(cli, mig, shown)


@pytest.mark.parametrize("gpu", [str.lower, lambda uuid: uuid.removeprefix("GPU-")])
def test_a_record_naming_no_gpu_of_the_node_while_its_instance_is_live_is_refused(
    cli: Cli, gpu: Any
) -> None:
    """A record whose parentGPUUUID names no GPU here, while its MIG UUID is live: reconcile
    once said "nothing to change" (and left a stale spec) where recover refuses the record."""
    inst = allocate(cli, "ns/job", "1g.10gb", "0")["instance"]
    mig, uuid = inst["migUUID"], inst["gpuUUID"]
    edit_record(cli, mig, parentGPUUUID=gpu(uuid))
    upgrade_driver(cli)
    refuses(
        cli, mig, f"names GPU {gpu(uuid)}, which is not on this node", f"live on GPU 0 ({uuid})"
    )


def test_an_instance_that_is_gone_gets_no_spec_rewritten(cli: Cli) -> None:
    mig = allocate(cli, "ns/job", "1g.10gb", "0")["instance"]["migUUID"]
    sim(cli, "reset", "--gpu", "0")
    upgrade_driver(cli)
    refuses(cli, f"{mig} is not a live MIG device")


def test_a_record_of_a_gpu_instance_that_holds_two_tenants_gets_no_spec(cli: Cli) -> None:
    """A record HAMi wrote for one of two compute instances of one GI, with a spec naming the
    device nodes of another instance: never rewritten to that shared GI's."""
    mine = allocate(cli, "ns/job", "1g.10gb", "0")["instance"]["migUUID"]
    args = ["create", "--gpu", "0", "--profile", "2g.20gb", "--placement", "2"]
    shared = sim(cli, *args, "--ci-slices", "1", "--ci-count", "2")["instance"]
    hami_record(cli, shared)
    text = spec_path(cli, mine).read_text()
    text = text.replace(device_name(mine), device_name(shared["migUUID"]))
    text = text.replace(mine, shared["migUUID"])
    spec_path(cli, shared["migUUID"]).write_text(text)
    refuses(cli, f"{shared['migUUID']}'s compute instance does not span GI")


def test_a_verified_record_still_gets_its_spec_rewritten(cli: Cli) -> None:
    """The check costs a rewrite nothing when the record is right (and no other instance's
    presence matters)."""
    mig = allocate(cli, "ns/job", "1g.10gb", "0")["instance"]["migUUID"]
    sim_create(cli, "1g.10gb", "2")
    upgrade_driver(cli)
    dry = ok(cli.json("reconcile", "--dry-run"))
    assert [(a["action"], a["migUUID"]) for a in dry["actions"]] == [("repair-cdi", mig)]
    data = ok(cli.json("reconcile"))
    assert [(a["action"], a["changed"]) for a in data["actions"]] == [("repair-cdi", True)]
    assert "560.35.03" in spec_path(cli, mig).read_text()


LAYOUT_SCAN = ("nvmlDeviceGetGpuInstances", "nvmlDeviceGetMigDeviceHandleByIndex")
VERIFY = 11
"""NVML calls that verify one record before its spec is rewritten: the reuse's identity read
(10, the span check among them) and its profile's name."""


def test_the_check_costs_eleven_nvml_calls_per_rewritten_spec_and_no_layout_scan(
    cli: Cli,
) -> None:
    for start in ("0", "1"):
        allocate(cli, f"ns/p{start}", "1g.10gb", start)
    before = calls(cli)
    ok(cli.json("reconcile"))
    steady = call_diff(before, calls(cli))
    upgrade_driver(cli)
    before = calls(cli)
    assert len(ok(cli.json("reconcile"))["actions"]) == 2
    rewrite = call_diff(before, calls(cli))
    assert sum(rewrite.values()) == sum(steady.values()) + 2 * VERIFY, (steady, rewrite)
    assert [n for n in LAYOUT_SCAN if n in rewrite] == [] and mutating(rewrite) == {}
    assert rewrite["nvmlDeviceGetAttributes"] == 2  # each CI spans its GI: one tenant each


# --------------------------------------------------------------------------------------------
# A GI that lost its CI is destroyed only for the record whose MIG UUID is live nowhere else


def error_record_pointing_at_an_orphan_gi(cli: Cli, other_gpu: bool) -> tuple[str, str]:
    """An Error instance (a destroy that failed) whose record names, by hand, the GI ID and
    placement (and, with `other_gpu`, the GPU) of a GI without a CI that is not its own.
    Returns its MIG UUID and what the mismatch names."""
    inst = allocate(cli, "ns/job", "1g.10gb", "0")["instance"]
    mig = inst["migUUID"]
    ok(cli.json("release", "--mig-uuid", mig))
    fail_destroys(cli)
    assert cli.json("reclaim", "--mig-uuid", mig).exit_code == 4
    sim(cli, "fault", "clear")
    orphan = sim_create(cli, "1g.10gb", "2", gpu="1" if other_gpu else "0", no_ci=True)
    changes: dict[str, Any] = {
        "gpuInstanceID": orphan["gpuInstanceID"],
        "placement": orphan["placement"],
    }
    if other_gpu:
        changes["parentGPUUUID"] = orphan["gpuUUID"]
    edit_record(cli, mig, **changes)
    shown = "parentGPUUUID recorded" if other_gpu else "placement recorded 2:1 but live 0:1"
    return mig, shown


def hardware_and_files(cli: Cli) -> tuple[Any, ...]:
    """The layout, mutating NVML calls, records and intents, and CDI specs (bookkeeping aside:
    a reconcile pass with a failed step counts it)."""
    return (
        gpus(cli),
        mutating_calls(cli),
        lifecycle_files(cli.state_dir),
        lifecycle_files(cli.cdi_dir),
    )


@pytest.mark.parametrize("other_gpu", [False, True], ids=["same-gpu", "other-gpu"])
@pytest.mark.parametrize("dry_run", [False, True], ids=["real", "dry-run"])
def test_reconcile_never_destroys_a_gi_for_a_record_whose_mig_uuid_is_live_elsewhere(
    cli: Cli, other_gpu: bool, dry_run: bool
) -> None:
    mig, shown = error_record_pointing_at_an_orphan_gi(cli, other_gpu)
    before = hardware_and_files(cli)
    ran = cli.json("reconcile", *(["--dry-run"] if dry_run else []))
    assert ran.exit_code == 4, ran.stdout  # a step this pass could not verify, as before
    [action] = ran.json()["actions"]
    assert (action["action"], action["changed"]) == ("retry-destroy", False), action
    assert mig in action["reason"] and shown in action["reason"], action
    assert hardware_and_files(cli) == before


@pytest.mark.parametrize("other_gpu", [False, True], ids=["same-gpu", "other-gpu"])
@pytest.mark.parametrize(
    "command",
    [("recover", "--assume-no-pods"), ("reclaim", "--mig-uuid")],
    ids=["recover", "reclaim"],
)
def test_recover_and_reclaim_refuse_a_record_whose_mig_uuid_is_live_elsewhere(
    cli: Cli, other_gpu: bool, command: tuple[str, str]
) -> None:
    mig, shown = error_record_pointing_at_an_orphan_gi(cli, other_gpu)
    args = [*command, mig] if command[0] == "reclaim" else list(command)
    unchanged = Unchanged(cli)
    for dry in ([], ["--dry-run"]):
        message = refused(cli.json(*args, *dry), 5, "unverifiable")
        assert mig in message and f"its MIG UUID is live, {shown}" in message, message
        unchanged.check()
