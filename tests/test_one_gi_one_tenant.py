"""One GPU instance is one tenant: a GI holding several compute instances is never ours."""

from __future__ import annotations

from typing import Any

from tests.support.cli import Cli, alloc, idle, instances, ok, refused, sim, state_of
from tests.support.nvml import call_diff, calls
from tests.support.records import hami_record
from tests.support.unchanged import Unchanged


def _shared_gi(cli: Cli) -> None:
    sim(cli, "create", "--gpu", "0", "--profile", "3g.40gb", "--placement", "0")
    sim(
        cli,
        "create",
        "--gpu",
        "0",
        "--profile",
        "3g.40gb",
        "--placement",
        "4",
        "--ci-slices",
        "1",
        "--ci-count",
        "2",
    )


def test_adoption_preserves_each_ci_of_a_shared_gi_as_unmanaged(cli: Cli) -> None:
    _shared_gi(cli)
    ran = cli("recover", "--adopt", "--assume-no-pods")
    assert ran.exit_code == 0, ran.stdout
    assert ran.stdout.count("holds 2 compute instances") == 2
    states = sorted(v["state"] for v in instances(cli))
    assert states == ["Idle", "Unmanaged", "Unmanaged"]


def _narrow_ci(cli: Cli) -> dict[str, Any]:
    """A 3g.40gb GI at 4 whose one CI has 1 of its 3 compute slices (`nvidia-smi mig -cci`
    with a small CI profile): room for another tenant's CI in the same GI."""
    args = ("--gpu", "0", "--profile", "3g.40gb", "--placement", "4", "--ci-slices", "1")
    made: dict[str, Any] = sim(cli, "create", *args)["instance"]
    return made


def test_a_ci_that_does_not_span_its_gi_is_never_adopted(cli: Cli) -> None:
    narrow = _narrow_ci(cli)
    ran = cli.json("recover", "--adopt", "--assume-no-pods")
    data = ok(ran)
    [kept] = [a for a in data["actions"] if a["migUUID"] == narrow["migUUID"]]
    assert kept["action"] == "preserve-unmanaged"
    assert "compute instance does not span it" in kept["reason"]
    assert state_of(cli, narrow["migUUID"]) == "Unmanaged"
    assert not list(cli.state_dir.glob("hami-owned-*.json"))


def test_a_shared_gi_blocks_an_allocation(cli: Cli) -> None:
    _shared_gi(cli)
    ran = alloc(cli, "ns/new", "3g.40gb", "4")
    refused(ran, 3, "conflict")
    [blocked] = ran.json()["error"]["blockers"]
    assert {b["state"] for b in blocked["instances"]} == {"Unmanaged"}


def test_a_record_naming_a_ci_that_does_not_span_its_gi_is_not_handed_out(cli: Cli) -> None:
    """A record naming a CI that leaves room in its GI for another tenant's is unverifiable
    on reuse (exit 5), which reads that one instance, not the layout."""
    narrow = _narrow_ci(cli)
    hami_record(cli, narrow)  # HAMi's own record: no state, so Idle
    before = Unchanged(cli)
    for dry in ([], ["--dry-run"]):
        message = refused(alloc(cli, "ns/new", "3g.40gb", "4", "0", *dry), 5, "unverifiable")
        assert "does not span GI" in message
    before.check()


def test_reuse_costs_one_call_more_for_the_span(cli: Cli) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    before = calls(cli)
    data = ok(alloc(cli, "ns/new", "1g.10gb", "0"))
    assert data["reused"] and data["instance"]["migUUID"] == mig
    assert call_diff(before, calls(cli)).get("nvmlDeviceGetAttributes") == 1


def test_list_and_show_give_one_row_per_ci_with_the_count_of_its_gi(cli: Cli) -> None:
    _shared_gi(cli)
    rows = instances(cli)
    counts = sorted((v["placement"]["start"], v["computeInstanceCount"]) for v in rows)
    assert counts == [(0, 1), (4, 2), (4, 2)]
    shared = [v for v in rows if v["placement"]["start"] == 4]
    assert len({v["migUUID"] for v in shared}) == 2
    for view in shared:
        shown = ok(cli.json("show", view["migUUID"]))
        assert shown["computeInstanceCount"] == 2


def test_the_count_is_null_where_no_gi_is_live(cli: Cli) -> None:
    mig = idle(cli, "ns/old", "1g.10gb", "0")
    sim(cli, "reset", "--gpu", "0")
    shown = ok(cli.json("show", mig))
    assert shown["state"] == "Missing"
    assert shown["computeInstanceCount"] is None
