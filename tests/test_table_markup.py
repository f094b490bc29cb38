"""Paths and messages are data, never rich markup: a state directory whose name reads as a
markup tag (`[/]`) is printed as it is in the warnings under a table, where rich used to fail
the command with a MarkupError (an "internal error", exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hamimig.store.records import record_name
from tests.support.cli import Cli, allocated


@pytest.mark.parametrize("look", [(), ("-o", "wide")])
def test_a_warning_naming_a_markup_like_path_prints_it_whole(
    sim_path: Path, tmp_path: Path, look: tuple[str, ...]
) -> None:
    (tmp_path / "s[/]").mkdir(parents=True)
    cli = Cli(sim_path, tmp_path / "s[/]" / "state", tmp_path / "cdi")
    record = cli.state_dir / record_name(allocated(cli, "ns/p", "1g.10gb", "0"))
    record.write_text('{"version": 1, "migUUID": ')
    ran = cli(*look, "list")
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    warning = f"warning: {record}: record is not valid JSON"
    assert warning.replace(" ", "") in "".join(ran.stdout.split())
