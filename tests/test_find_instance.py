"""Finding an instance: `show` and every `--mig-uuid` (and `forget`'s MIG_UUID) take a unique
prefix of a MIG UUID or its CDI device name (`mig-<sha256>`, or `KIND=mig-<sha256>`); an
ambiguous one is exit 2 naming the candidates, one that matches nothing exit 6. Commands that
change something need at least 8 hex digits after `MIG-` and act on (and echo) the full UUID;
a full MIG UUID works exactly as before, known to the node or not."""

from __future__ import annotations

import hashlib
import itertools
import types
from collections.abc import Iterator

import pytest

import hamimig.sim.state
from hamimig.store.intents import IntentStore
from tests.support.cli import (
    Cli,
    allocate,
    allocated,
    idle,
    instances,
    ok,
    refused,
    sim,
    sim_create,
    state_of,
)
from tests.support.files import tree
from tests.support.records import an_intent

UNKNOWN = "MIG-00000000-0000-0000-0000-000000000000"


def _sha(mig_uuid: str) -> str:
    return hashlib.sha256(mig_uuid.encode()).hexdigest()


def _unchanged(cli: Cli) -> tuple[dict[str, tuple[int, bytes]], object]:
    """Every file of the state and CDI directories, and the simulated GPUs' instances (the
    simulator's file also counts the NVML calls, which reading makes too)."""
    return tree(cli.state_dir, cli.cdi_dir), sim(cli, "show")["gpus"]


@pytest.fixture
def crafted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """MIG UUIDs the simulator hands out share their first 8 hex digits:
    MIG-deadbeef-000N-4000-8000-000000000000 for N = 1, 2, ..."""
    counter = itertools.count(1)
    fake = types.SimpleNamespace(uuid4=lambda: f"deadbeef-{next(counter):04x}-4000-8000-{0:012x}")
    monkeypatch.setattr(hamimig.sim.state, "uuid", fake)
    yield


# ---------------------------------------------------------------------------------------------
# show


def test_show_by_prefix_by_device_name_and_by_qualified_name(cli: Cli) -> None:
    uid = "0b6e7a2c-1111-4222-8333-444455556666"
    made = allocate(cli, "ns/p", "1g.10gb", "2", "0", "--pod-uid", uid)["instance"]
    a = made["migUUID"]
    assert made["cdiDevice"] == f"k8s.device-plugin.nvidia.com/dynamic-mig=mig-{_sha(a)}"
    for text in (a, a[:12], a[:5], f"mig-{_sha(a)}", made["cdiDevice"]):
        shown = ok(cli.json("show", text))
        assert (shown["kind"], shown["migUUID"], shown["state"]) == ("Instance", a, "Active")
    # `MIG-` alone names no digit: an empty variable, never "the only instance there is".
    assert "names no digits" in refused(cli.json("show", "MIG-"), 2, "usage")
    shown = ok(cli.json("show", a[:10]))
    assert shown["owner"]["uid"] == uid
    assert shown["createdAt"] and shown["updatedAt"]
    assert shown["processes"] is False
    # The CDI device name in upper case is the same device.
    assert ok(cli.json("show", f"mig-{_sha(a).upper()}"))["migUUID"] == a


def test_show_by_prefix_has_the_idle_time_and_the_processes(cli: Cli) -> None:
    a = idle(cli, "ns/p", "1g.10gb", "0")
    shown = ok(cli.json("show", a[:9]))
    assert (shown["migUUID"], shown["state"], shown["owner"]) == (a, "Idle", None)
    assert shown["idleSince"]
    sim(cli, "busy", "--mig-uuid", a)
    assert ok(cli.json("show", a[:9]))["processes"] is True


def test_show_by_prefix_finds_unmanaged_instances(cli: Cli) -> None:
    u = sim_create(cli, "2g.20gb", "4")["migUUID"]
    shown = ok(cli.json("show", u[:8]))
    assert (shown["migUUID"], shown["state"], shown["record"]) == (u, "Unmanaged", None)


def test_show_by_prefix_finds_an_allocation_in_flight(cli: Cli) -> None:
    gpu = allocate(cli, "ns/keep", "1g.10gb", "0")["instance"]["gpuUUID"]
    mig = "MIG-0123abcd-0000-4000-8000-000000000001"
    IntentStore(cli.state_dir).write(an_intent(gpu_uuid=gpu, mig_uuid=mig))
    shown = ok(cli.json("show", "MIG-0123ab"))
    assert (shown["migUUID"], shown["state"]) == (mig, "Creating")
    assert shown["owner"]["name"] == "pod"
    assert shown["gpuIndex"] == 0


def test_an_ambiguous_prefix_names_the_candidates(cli: Cli, crafted: None) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    b = allocated(cli, "ns/b", "1g.10gb", "1")
    message = refused(cli.json("show", "MIG-d"), 2, "usage")
    assert "ambiguous" in message and a in message and b in message


def test_an_ambiguous_prefix_names_at_most_five_candidates(cli: Cli, crafted: None) -> None:
    made = sorted(sim_create(cli, "1g.10gb", str(start))["migUUID"] for start in range(7))
    message = refused(cli.json("show", "MIG-dead"), 2, "usage")
    assert "matches 7 instances" in message
    assert all(u in message for u in made[:5]) and "and 2 more" in message
    assert not any(u in message for u in made[5:])


def test_a_prefix_or_device_name_that_matches_nothing_is_not_found(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    before = _unchanged(cli)
    for args in (
        ("show", "MIG-ffffffff-ffff"),
        ("show", f"mig-{'0' * 64}"),
        ("release", "--mig-uuid", "MIG-ffffffff"),
        ("reclaim", "--mig-uuid", "MIG-ffffffff"),
        ("forget", "MIG-ffffffff"),
    ):
        assert "matches" in refused(cli.json(*args), 6, "not-found"), args
    assert _unchanged(cli) == before


def test_another_cdi_kind_or_a_bad_device_name_is_a_usage_error(cli: Cli) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    message = refused(cli.json("show", f"nvidia.com/gpu=mig-{_sha(a)}"), 2, "usage")
    assert "nvidia.com/gpu" in message and "k8s.device-plugin.nvidia.com/dynamic-mig" in message
    for bad in ("mig-xyz", f"mig-{'0' * 65}"):
        assert "64 hex" in refused(cli.json("show", bad), 2, "usage"), bad
    assert "names no digits" in refused(cli.json("show", "mig-"), 2, "usage")


def test_a_full_mig_uuid_is_answered_as_before(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb", "0")
    message = refused(cli.json("show", UNKNOWN), 6, "not-found")
    assert message == f"no MIG instance {UNKNOWN} on this node and no record of it"
    message = refused(cli.json("release", "--mig-uuid", UNKNOWN), 6, "not-found")
    assert message == f"no hamimig record for {UNKNOWN}"
    message = refused(cli.json("reclaim", "--mig-uuid", UNKNOWN), 6, "not-found")
    assert message == f"no MIG instance {UNKNOWN} on this node and no record of it"
    assert refused(cli.json("forget", UNKNOWN), 6, "not-found").startswith(
        f"no hamimig record for {UNKNOWN}"
    )
    assert "invalid MIG UUID" in refused(cli.json("forget", "bogus"), 2, "usage")


# ---------------------------------------------------------------------------------------------
# commands that change something


@pytest.mark.parametrize(
    "args",
    [
        ("release", "--mig-uuid"),
        ("release", "--dry-run", "--mig-uuid"),
        ("reclaim", "--mig-uuid"),
        ("forget",),
        ("forget", "--dry-run"),
    ],
)
def test_a_mutating_command_needs_eight_hex_digits(cli: Cli, args: tuple[str, ...]) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    idle(cli, "ns/b", "1g.10gb", "1")
    before = _unchanged(cli)
    for short in ("MIG-", a[:11]):
        message = refused(cli.json(*args, short), 2, "usage")
        assert "at least 8 hex digits" in message, message
    # An old-form prefix's digits are its GPU's: taken only whole (tests/test_old_mig_uuids.py).
    message = refused(cli.json(*args, "MIG-GPU-1234"), 2, "usage")
    assert "whole MIG-GPU-<GPU UUID>/<GI>/<CI>" in message, message
    assert _unchanged(cli) == before
    # One digit more is enough (when it is unique), for show it never was needed.
    assert ok(cli.json("show", a[:9]))["migUUID"] == a


@pytest.mark.parametrize(
    "args",
    [
        ("show",),
        ("release", "--mig-uuid"),
        ("release", "--dry-run", "--mig-uuid"),
        ("reclaim", "--mig-uuid"),
        ("forget",),
        ("sim", "busy", "--mig-uuid"),
    ],
)
def test_a_uuid_a_table_shortened_is_refused_alike_everywhere(
    cli: Cli, args: tuple[str, ...]
) -> None:
    """Pasted from a table with its '…' (or as '...'), a MIG UUID or device name is the same
    usage error (exit 2) for show and for commands that change something, saying what to give."""
    a = idle(cli, "ns/a", "1g.10gb", "0")
    before = _unchanged(cli)
    for shortened in (f"{a[:12]}…", f"{a[:12]}...", f"mig-{_sha(a)[:12]}…"):
        message = refused(cli.json(*args, shortened), 2, "usage")
        assert message.startswith(f"{shortened} was shortened by a table"), message
        assert "give the whole MIG UUID" in message and "without the '…'" in message
    assert _unchanged(cli) == before


def test_an_ambiguous_eight_digit_prefix_changes_nothing(cli: Cli, crafted: None) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    b = idle(cli, "ns/b", "1g.10gb", "1")
    assert (a[:17], b[:17]) == ("MIG-deadbeef-0001", "MIG-deadbeef-0002")
    before = _unchanged(cli)
    for args in (
        ("release", "--mig-uuid", "MIG-deadbeef"),
        ("reclaim", "--mig-uuid", "MIG-deadbeef-000"),
        ("forget", "MIG-deadbeef"),
        ("forget", "--dry-run", "MIG-deadbeef"),
    ):
        message = refused(cli.json(*args), 2, "usage")
        assert "ambiguous" in message and a in message and b in message, args
    assert _unchanged(cli) == before
    # The digits that tell them apart pick one.
    released = ok(cli.json("release", "--mig-uuid", "MIG-deadbeef-0001"))["released"]
    assert [r["migUUID"] for r in released] == [a]


def test_release_by_prefix_acts_on_that_instance_and_echoes_it(cli: Cli) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    b = allocated(cli, "ns/b", "1g.10gb", "1")
    dry = ok(cli.json("release", "--dry-run", "--mig-uuid", a[:12]))
    assert [r["migUUID"] for r in dry["released"]] == [a]
    assert state_of(cli, a) == "Active"
    ran = cli("release", "--mig-uuid", a[:12])
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert a in ran.stdout and b not in ran.stdout
    assert (state_of(cli, a), state_of(cli, b)) == ("Idle", "Active")
    # Already released: the same answer, by the CDI device name this time.
    released = ok(cli.json("release", "--mig-uuid", f"mig-{_sha(a)}"))["released"]
    assert [r["migUUID"] for r in released] == [a]


def test_release_by_prefix_refuses_what_it_would_refuse_by_uuid(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "0")
    ok(cli.json("reclaim", "--mig-uuid", a))
    u = sim_create(cli, "1g.10gb", "3")["migUUID"]
    message = refused(cli.json("release", "--mig-uuid", u[:12]), 6, "not-found")
    assert message == f"no hamimig record for {u}"
    message = refused(cli.json("reclaim", "--mig-uuid", u[:12]), 3, "conflict")
    assert message.startswith(f"{u} has no hamimig record (Unmanaged)")


def test_reclaim_by_prefix_and_device_name_act_on_those_instances(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "0")
    b = idle(cli, "ns/b", "1g.10gb", "1")
    c = allocated(cli, "ns/c", "1g.10gb", "2")
    ran = cli("reclaim", "--mig-uuid", a[:12])
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert a in ran.stdout
    qualified = f"k8s.device-plugin.nvidia.com/dynamic-mig=mig-{_sha(b)}"
    reclaimed = ok(cli.json("reclaim", "--mig-uuid", qualified))["reclaimed"]
    assert [r["migUUID"] for r in reclaimed] == [b]
    left = [i["migUUID"] for i in ok(cli.json("list"))["instances"]]
    assert left == [c]
    message = refused(cli.json("reclaim", "--mig-uuid", c[:12]), 3, "conflict")
    assert message.startswith(f"{c} is Active")


def test_forget_by_prefix_acts_on_that_record(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "0")
    b = idle(cli, "ns/b", "1g.10gb", "1")
    dry = ok(cli.json("forget", "--dry-run", a[:12]))
    assert [f["migUUID"] for f in dry["forgotten"]] == [a]
    ran = cli("forget", a[:12])
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert a in ran.stdout
    assert (state_of(cli, a), state_of(cli, b)) == ("Unmanaged", "Idle")
    forgotten = ok(cli.json("forget", f"mig-{_sha(b)}"))["forgotten"]
    assert [f["migUUID"] for f in forgotten] == [b]


# ---------------------------------------------------------------------------------------------
# What `list` prints is what every command takes


def _printed(cli: Cli, monkeypatch: pytest.MonkeyPatch, column: str, width: int) -> dict[str, str]:
    """MIG UUID -> the cell of `column` (`MIG-…` or `mig-…`) as plain `list` prints it on a
    terminal `width` columns wide: at 80, MIG UUIDs cut to a unique prefix and `…`; wider, the
    CDI column (the device name cut to `mig-` and 12 hex digits)."""
    monkeypatch.setenv("COLUMNS", str(width))
    ran = cli("list")
    monkeypatch.delenv("COLUMNS")
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    rows = {i["migUUID"]: i for i in instances(cli)}
    out = {}
    for line in ran.stdout.splitlines():
        cells = [c.strip().rstrip("…") for c in line.replace("│", "|").split("|")]
        cell = next((c for c in cells if c.startswith(column)), None)
        if cell is None:
            continue
        [mig] = [u for u in rows if (u if column == "MIG-" else f"mig-{_sha(u)}").startswith(cell)]
        out[mig] = cell
    return out


def test_every_command_takes_the_cdi_prefix_list_prints(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`list` prints `mig-` and 12 hex digits of the CDI device name; show, release, reclaim,
    forget, events and sim busy take it (as they take a unique MIG UUID prefix)."""
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    b = idle(cli, "ns/b", "1g.10gb", "1")
    c = idle(cli, "ns/c", "1g.10gb", "2")
    cdi = _printed(cli, monkeypatch, "mig-", 200)
    assert cdi[a] == f"mig-{_sha(a)[:12]}"
    shown = ok(cli.json("show", cdi[a]))
    assert (shown["migUUID"], shown["state"]) == (a, "Active")
    assert ok(cli.json("show", cdi[a].upper().replace("MIG-", "mig-")))["migUUID"] == a
    qualified = f"k8s.device-plugin.nvidia.com/dynamic-mig={cdi[a]}"
    assert ok(cli.json("show", qualified))["migUUID"] == a
    events = ok(cli.json("events", "--mig-uuid", cdi[a]))["events"]
    assert events and {e["migUUID"] for e in events} == {a}
    sim(cli, "busy", "--mig-uuid", cdi[a])
    assert ok(cli.json("show", a))["processes"] is True
    sim(cli, "busy", "--clear", "--mig-uuid", cdi[a])
    released = ok(cli.json("release", "--mig-uuid", cdi[a]))["released"]
    assert [r["migUUID"] for r in released] == [a]
    reclaimed = ok(cli.json("reclaim", "--mig-uuid", cdi[b]))["reclaimed"]
    assert [r["migUUID"] for r in reclaimed] == [b]
    forgotten = ok(cli.json("forget", cdi[c]))["forgotten"]
    assert [f["migUUID"] for f in forgotten] == [c]
    assert (state_of(cli, a), state_of(cli, c)) == ("Idle", "Unmanaged")
    assert b not in [i["migUUID"] for i in instances(cli)]


def test_sim_busy_takes_the_mig_uuid_prefix_list_prints(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    u = sim_create(cli, "1g.10gb", "3")["migUUID"]
    printed = _printed(cli, monkeypatch, "MIG-", 80)
    assert printed[a] == a[:12]  # MIG- and 8 hex digits
    sim(cli, "busy", "--mig-uuid", printed[a])
    sim(cli, "busy", "--gi-only", "--mig-uuid", u[:12])
    assert ok(cli.json("show", a))["processes"] is True
    assert ok(cli.json("show", u))["processes"] is False  # only its GI is held
    sim(cli, "busy", "--clear", "--mig-uuid", a[:12])
    assert ok(cli.json("show", a))["processes"] is False


def test_sim_busy_refuses_a_short_or_ambiguous_prefix_and_changes_nothing(
    cli: Cli, crafted: None
) -> None:
    a = sim_create(cli, "1g.10gb", "0")["migUUID"]
    b = sim_create(cli, "1g.10gb", "1")["migUUID"]
    before = sim(cli, "show")["gpus"]
    for short in ("MIG-dead", f"mig-{_sha(a)[:7]}"):
        message = refused(cli.json("sim", "busy", "--mig-uuid", short), 2, "usage")
        assert "at least 8 hex digits" in message, message
    message = refused(cli.json("sim", "busy", "--mig-uuid", "MIG-deadbeef"), 2, "usage")
    assert "ambiguous" in message and a in message and b in message
    message = refused(cli.json("sim", "busy", "--mig-uuid", "MIG-ffffffff"), 6, "not-found")
    assert "matches" in message
    assert sim(cli, "show")["gpus"] == before


def test_a_cdi_prefix_needs_eight_hex_digits_to_change_something(cli: Cli) -> None:
    a = idle(cli, "ns/a", "1g.10gb", "0")
    before = _unchanged(cli)
    short = f"mig-{_sha(a)[:7]}"
    for args in (
        ("release", "--mig-uuid", short),
        ("reclaim", "--mig-uuid", short),
        ("forget", short),
        ("forget", "--dry-run", short),
    ):
        message = refused(cli.json(*args), 2, "usage")
        assert "at least 8 hex digits" in message, (args, message)
    assert _unchanged(cli) == before
    assert ok(cli.json("show", f"mig-{_sha(a)[:1]}"))["migUUID"] == a  # show needs no 8


def test_an_ambiguous_cdi_prefix_names_the_candidates(cli: Cli, crafted: None) -> None:
    made = [sim_create(cli, "1g.10gb", str(start))["migUUID"] for start in range(7)]
    # The crafted MIG UUIDs' device names: the 2nd and the 5th both begin mig-3.
    assert [_sha(u)[0] for u in made] == ["2", "3", "a", "4", "3", "5", "6"]
    message = refused(cli.json("show", "mig-3"), 2, "usage")
    assert "ambiguous" in message and "matches 2 instances" in message
    assert made[1] in message and made[4] in message
    assert ok(cli.json("show", f"mig-{_sha(made[4])[:2]}"))["migUUID"] == made[4]
