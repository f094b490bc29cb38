"""One GPU instance is one tenant: a GI holding several compute instances is never ours."""

from __future__ import annotations

from tests.support.cli import Cli, instances, sim


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
