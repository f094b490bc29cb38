"""`release --pod` and pod incarnations: a pod recreated under the same name (a StatefulSet's)
is another owner. `--pod-uid` releases only that incarnation's instances; without it, records of
that name with different UIDs (or UIDs and none) are refused, exit 2, naming the UIDs; a repeated
release of the same pod is exit 0 `unchanged`, because an Idle record keeps its last holder
(`lastOwner` in the `"hamimig"` key, docs/formats.md "Ownership records"); a pod name that
never held anything here stays exit 6."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.cli import Cli, alloc, allocate, ok, refused
from tests.support.files import lifecycle_files
from tests.support.node import gpus
from tests.support.records import ext, record, record_path

POD = "ns/web-0"
U1 = "1f0c0a2e-0000-4000-8000-000000000001"
U2 = "1f0c0a2e-0000-4000-8000-000000000002"


def snapshot(cli: Cli) -> tuple[Any, ...]:
    """What a refused or unchanged release must leave as it was: every file and the layout."""
    return lifecycle_files(cli.state_dir), lifecycle_files(cli.cdi_dir), gpus(cli)


def incarnation(cli: Cli, uid: str | None, placement: str) -> str:
    """Allocate for POD (with its UID, when given) at `placement`; its MIG UUID."""
    extra = ("--pod-uid", uid) if uid is not None else ()
    found: str = allocate(cli, POD, "1g.10gb", placement, "0", *extra)["instance"]["migUUID"]
    return found


def two_incarnations(cli: Cli) -> tuple[str, str]:
    """The first incarnation (U1) allocated and released, then the second (U2) allocated at
    another placement: an Idle record whose last owner is U1, an Active one owned by U2."""
    old = incarnation(cli, U1, "0")
    ok(cli.json("release", "--pod", POD, "--pod-uid", U1))
    new = incarnation(cli, U2, "3")
    assert ext(cli, old)["lastOwner"]["uid"] == U1
    assert ext(cli, new)["owner"]["uid"] == U2
    return old, new


def released(ran_data: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(i["migUUID"], i["state"], i["outcome"]) for i in ran_data["released"]]


def test_release_without_uid_refuses_when_the_name_has_two_incarnations(cli: Cli) -> None:
    old, new = two_incarnations(cli)
    assert ext(cli, old)["state"] == "Idle"
    before = snapshot(cli)
    for dry in ([], ["--dry-run"]):
        message = refused(cli.json("release", "--pod", POD, *dry), 2, "usage")
        assert U1 in message and U2 in message, message
        assert POD in message
        assert snapshot(cli) == before
    assert ext(cli, new)["state"] == "Active"


def test_uid_and_no_uid_under_one_name_is_ambiguous(cli: Cli) -> None:
    incarnation(cli, None, "0")
    ok(cli.json("release", "--pod", POD))
    new = incarnation(cli, U2, "3")
    before = snapshot(cli)
    message = refused(cli.json("release", "--pod", POD), 2, "usage")
    assert U2 in message and "no UID" in message, message
    assert snapshot(cli) == before
    assert ext(cli, new)["state"] == "Active"


def test_pod_uid_releases_only_its_own_incarnation(cli: Cli) -> None:
    old, new = two_incarnations(cli)
    # The old incarnation's release again: nothing of it is Active, so nothing changes.
    before = snapshot(cli)
    data = ok(cli.json("release", "--pod", POD, "--pod-uid", U1))
    assert released(data) == [(old, "Idle", "unchanged")]
    assert snapshot(cli) == before
    assert ext(cli, new)["state"] == "Active"
    # The new incarnation's: only its instance.
    data = ok(cli.json("release", "--pod", POD, "--pod-uid", U2))
    assert released(data) == [(new, "Idle", "released")]
    assert ext(cli, new)["lastOwner"]["uid"] == U2
    assert ext(cli, old)["lastOwner"]["uid"] == U1


def test_pod_uid_is_matched_ignoring_case(cli: Cli) -> None:
    old, new = two_incarnations(cli)
    dry = ok(cli.json("release", "--pod", POD, "--pod-uid", U2.upper(), "--dry-run"))
    assert released(dry) == [(new, "Idle", "released")]
    data = ok(cli.json("release", "--pod", POD, "--pod-uid", U2.upper()))
    assert released(data) == [(new, "Idle", "released")]
    assert ext(cli, old)["state"] == "Idle"


def test_pod_uid_of_another_incarnation_never_releases_the_running_one(cli: Cli) -> None:
    incarnation(cli, U1, "0")
    before = snapshot(cli)
    ran = cli.json("release", "--pod", POD, "--pod-uid", U2)
    assert U2 in refused(ran, 6, "not-found")
    assert snapshot(cli) == before


@pytest.mark.parametrize("uid", [None, U1])
def test_repeated_release_is_unchanged(cli: Cli, uid: str | None) -> None:
    first = incarnation(cli, U1, "0")
    second = ok(alloc(cli, POD, "1g.10gb", "1", "0", "--pod-uid", U1, "--device-index", "1"))
    migs = sorted([first, second["instance"]["migUUID"]])
    extra = ["--pod-uid", uid] if uid is not None else []
    data = ok(cli.json("release", "--pod", POD, *extra))
    assert released(data) == [(m, "Idle", "released") for m in migs]
    before = snapshot(cli)
    for dry in ([], ["--dry-run"]):
        again = ok(cli.json("release", "--pod", POD, *extra, *dry))
        assert released(again) == [(m, "Idle", "unchanged") for m in migs]
        assert snapshot(cli) == before
    table = cli("release", "--pod", POD, *extra)
    assert table.exit_code == 0, table.stdout
    assert "unchanged" in table.stdout


def test_a_pod_that_never_held_anything_is_not_found(cli: Cli) -> None:
    two_incarnations(cli)
    before = snapshot(cli)
    for dry in ([], ["--dry-run"]):
        refused(cli.json("release", "--pod", "ns/web-1", *dry), 6, "not-found")
        refused(cli.json("release", "--pod", "other/web-0", *dry), 6, "not-found")
    assert snapshot(cli) == before


def test_last_owner_is_written_on_release_and_cleared_on_reuse(cli: Cli) -> None:
    mig = incarnation(cli, U1, "2")
    assert "lastOwner" not in ext(cli, mig)
    ok(cli.json("release", "--mig-uuid", mig))
    last = ext(cli, mig)["lastOwner"]
    assert last == {
        "namespace": "ns",
        "name": "web-0",
        "uid": U1,
        "containerIndex": 0,
        "deviceIndex": 0,
    }
    assert ext(cli, mig)["owner"] is None
    reused = allocate(cli, "ns/other", "1g.10gb", "2", "0")
    assert (reused["instance"]["migUUID"], reused["reused"]) == (mig, True)
    assert "lastOwner" not in ext(cli, mig)
    # Handed to someone else, the instance is no longer the old pod's to release again.
    refused(cli.json("release", "--pod", POD), 6, "not-found")


def test_reconcile_release_keeps_the_last_owner(cli: Cli, pods_file: Any) -> None:
    mig = incarnation(cli, U1, "0")
    gone = pods_file()  # a complete list without the pod
    ok(cli.json("reconcile", "--pods", gone))
    assert ext(cli, mig)["state"] == "Idle"
    assert ext(cli, mig)["lastOwner"]["uid"] == U1
    data = ok(cli.json("release", "--pod", POD))
    assert released(data) == [(mig, "Idle", "unchanged")]


def test_an_old_record_without_last_owner_still_loads(cli: Cli) -> None:
    mig = incarnation(cli, U1, "0")
    ok(cli.json("release", "--mig-uuid", mig))
    path = record_path(cli, mig)
    doc = json.loads(path.read_text())
    del doc["hamimig"]["lastOwner"]  # as a hamimig that did not keep it wrote it
    path.write_text(json.dumps(doc, indent=2) + "\n")
    listed = ok(cli.json("list"))["instances"]
    assert [(i["migUUID"], i["state"]) for i in listed] == [(mig, "Idle")]
    # Without a last owner nothing says this pod held it: the release finds nothing.
    refused(cli.json("release", "--pod", POD), 6, "not-found")
    reused = allocate(cli, "ns/other", "1g.10gb", "0", "0")
    assert reused["instance"]["migUUID"] == mig
    assert record(cli, mig)["hamimig"]["owner"]["name"] == "other"


def test_a_bad_last_owner_makes_the_record_unusable(cli: Cli) -> None:
    mig = incarnation(cli, U1, "0")
    ok(cli.json("release", "--mig-uuid", mig))
    path = record_path(cli, mig)
    doc = json.loads(path.read_text())
    doc["hamimig"]["lastOwner"] = {"namespace": "ns", "name": "Not_A_Name"}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    message = refused(cli.json("release", "--pod", POD), 5, "unverifiable")
    assert "hamimig.lastOwner.name" in message, message


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--pod", POD, "--pod-uid", "not-a-uid"], "--pod-uid"),
        (["--mig-uuid", "MIG-0", "--pod-uid", U1], "--pod-uid"),
    ],
)
def test_pod_uid_is_validated(cli: Cli, args: list[str], needle: str) -> None:
    incarnation(cli, U1, "0")
    before = snapshot(cli)
    assert needle in refused(cli.json("release", *args), 2, "usage")
    assert snapshot(cli) == before


def test_recover_restoring_an_active_record_idle_keeps_the_last_owner(
    cli: Cli, pods_file: Any
) -> None:
    mig = incarnation(cli, U1, "0")
    data = ok(cli.json("recover", "--pods", pods_file()))  # the pod is gone
    assert [a["action"] for a in data["actions"] if a.get("migUUID") == mig] == ["restore-idle"]
    assert ext(cli, mig)["lastOwner"]["uid"] == U1
    again = ok(cli.json("release", "--pod", POD, "--pod-uid", U1))
    assert released(again) == [(mig, "Idle", "unchanged")]
