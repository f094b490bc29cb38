"""`list` never hides a live instance behind an intent.

An interrupted allocation leaves an intent at its slot. A live GI/CI pair there is the intent's
only when the request can have created it: the GI ID the intent journaled (or, before it
journaled one, a GI without a CI: the CI comes only after the GI ID is journaled), and the MIG
UUID it journaled, if any. That half-built instance is the intent's one Creating row. Any other
pair at the slot (made behind hamimig's back after the intent's GI went) is listed as what it
is, Unmanaged with its MIG UUID, GI and CI, and the intent keeps its Creating row beside it:
in the table, `-o wide`, JSON, the `--state` filters, `show` and `metrics`.
"""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hamimig.sim.state import CRASH_EXIT_STATUS
from tests.support.cli import Cli, allocate_args, instances, ok, refused, run_hamimig, sim

PLACEMENT = {"start": 3, "size": 1}


def _intent_file(cli: Cli) -> dict[str, Any]:
    [path] = sorted(cli.state_dir.glob("intent-*.json"))
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def _crashed(cli: Cli, op: str, action: str) -> dict[str, Any]:
    """An allocation of 1g.10gb at 3 on GPU 0 killed at `op` in a real child process; returns
    the intent file it left."""
    sim(cli, "fault", "add", "--op", op, "--action", action)
    ran = run_hamimig(*cli.globals(), "-o", "json", *allocate_args("ns/a", "1g.10gb", "3"))
    assert ran.returncode == CRASH_EXIT_STATUS, (ran.stdout, ran.stderr)
    return _intent_file(cli)


def _foreign_pair(cli: Cli) -> dict[str, Any]:
    """The intent's GI goes (a GPU reset) and someone makes a complete pair at its slot."""
    sim(cli, "reset", "--gpu", "0")
    args = ("create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "3")
    pair: dict[str, Any] = sim(cli, *args)["instance"]
    return pair


def _rows(cli: Cli, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ok(cli.json("list", *args))["instances"]
    return found


def _shape(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("migUUID", "gpuUUID", "gpuIndex", "profile", "placement", "gpuInstanceID")
    return {k: row[k] for k in (*keys, "computeInstanceID", "state", "owner")}


def _unmanaged_row(pair: dict[str, Any]) -> dict[str, Any]:
    """The row of a pair made behind hamimig's back: `sim create`'s own view of it."""
    return {**_shape(pair), "state": "Unmanaged", "owner": None}


def _creating(intent: dict[str, Any]) -> dict[str, Any]:
    return {
        "migUUID": intent["migUUID"],
        "gpuUUID": intent["gpuUUID"],
        "gpuIndex": 0,
        "profile": "1g.10gb",
        "placement": PLACEMENT,
        "gpuInstanceID": intent["gpuInstanceID"],
        "computeInstanceID": intent["computeInstanceID"],
        "state": "Creating",
        "owner": intent["owner"],
    }


def test_a_pair_at_the_slot_of_an_intent_without_a_gi_id_is_listed_beside_it(cli: Cli) -> None:
    intent = _crashed(cli, "nvmlDeviceCreateGpuInstanceWithPlacement", "crash-after")
    assert intent["gpuInstanceID"] is None  # killed before it journaled the GI's ID
    pair = _foreign_pair(cli)
    mig = pair["migUUID"]
    # recover agrees the pair is not the intent's: it refuses rather than roll it back
    message = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    assert f"GI {pair['gpuInstanceID']} there holds a compute instance" in message

    rows = _rows(cli)
    assert sorted(map(_shape, rows), key=lambda r: r["state"]) == [
        _creating(intent),
        _unmanaged_row(pair),
    ]
    assert [r["migUUID"] for r in _rows(cli, "--state", "Unmanaged")] == [mig]
    assert [r["state"] for r in _rows(cli, "--state", "Creating")] == ["Creating"]

    for output in (None, "wide"):
        table = cli("list", output=output)
        assert table.exit_code == 0, table.stdout
        [line] = [ln for ln in table.stdout.splitlines() if mig in ln]
        cells = line.replace("\u2502", " ").split()
        assert cells[:7] == [
            "0",
            mig,
            "1g.10gb",
            "3:1",
            str(pair["gpuInstanceID"]),
            str(pair["computeInstanceID"]),
            "Unmanaged",
        ]
        assert [ln for ln in table.stdout.splitlines() if "Creating" in ln and "ns/a" in ln]

    shown = ok(cli.json("show", mig))
    assert _shape(shown) == _unmanaged_row(pair)

    text = cli("metrics").stdout
    found = {f.name: list(f.samples) for f in text_string_to_metric_families(text)}
    gpu0 = {
        s.labels["state"]: s.value
        for s in found["hamimig_mig_instances"]
        if s.labels["device_index"] == "0"
    }
    assert (gpu0["Unmanaged"], gpu0["Creating"]) == (1, 1)
    info = [s.labels for s in found["hamimig_mig_instance_info"]]
    assert [(i["mig_uuid"], i["state"]) for i in info] == [(mig, "Unmanaged")]


def test_a_pair_with_the_journaled_gi_id_and_another_mig_uuid_is_not_the_intents(
    cli: Cli,
) -> None:
    """The driver gives a slot's next GI the same ID: the MIG UUID tells them apart."""
    intent = _crashed(cli, "record.write", "crash-before")
    assert intent["migUUID"] is not None
    pair = _foreign_pair(cli)
    assert pair["gpuInstanceID"] == intent["gpuInstanceID"]
    assert pair["migUUID"] != intent["migUUID"]

    rows = sorted(map(_shape, _rows(cli)), key=lambda r: r["state"])
    assert rows == [_creating(intent), _unmanaged_row(pair)]
    assert [r["migUUID"] for r in _rows(cli, "--state", "Unmanaged")] == [pair["migUUID"]]
    assert _shape(ok(cli.json("show", pair["migUUID"]))) == _unmanaged_row(pair)


def test_the_intents_own_half_built_instance_stays_one_creating_row(cli: Cli) -> None:
    """Killed after creating the CI and before journaling it: the CI is the request's own."""
    intent = _crashed(cli, "nvmlGpuInstanceCreateComputeInstance", "crash-after")
    assert intent["gpuInstanceID"] is not None and intent["migUUID"] is None
    [row] = instances(cli)
    assert row["state"] == "Creating"
    assert row["gpuInstanceID"] == intent["gpuInstanceID"]


def test_the_intents_own_gi_without_a_journaled_id_stays_one_creating_row(cli: Cli) -> None:
    intent = _crashed(cli, "nvmlDeviceCreateGpuInstanceWithPlacement", "crash-after")
    assert intent["gpuInstanceID"] is None
    [row] = instances(cli)
    assert row["state"] == "Creating"
    assert row["gpuInstanceID"] is not None  # the live GI's ID, which the intent never learned


def test_recover_never_rolls_back_a_pair_that_only_shares_the_intents_gi_id(cli: Cli) -> None:
    """The intent journaled GI G and MIG-A; after a reset the slot's next GI is G again, with
    another MIG UUID. That pair is not the intent's: recover refuses instead of destroying it."""
    intent = _crashed(cli, "record.write", "crash-before")
    assert intent["migUUID"] is not None
    pair = _foreign_pair(cli)
    assert pair["gpuInstanceID"] == intent["gpuInstanceID"]
    assert pair["migUUID"] != intent["migUUID"]
    for dry in (["--dry-run"], []):
        refused(cli.json("recover", "--assume-no-pods", *dry), 5, "unverifiable")
    assert [i["migUUID"] for i in instances(cli) if i["state"] == "Unmanaged"] == [pair["migUUID"]]
