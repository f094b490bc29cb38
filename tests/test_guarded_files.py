"""Every file that decides is guarded: a world-writable record or CDI directory blocks."""

from __future__ import annotations

import os

from tests.support.cli import Cli, allocate_args, refused


def test_world_writable_cdi_dir_fails_doctor_and_blocks_mutation(cli: Cli) -> None:
    cli.cdi_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cli.cdi_dir, 0o777)
    ran = cli.json("doctor")
    assert ran.exit_code == 5
    assert "chmod go-w" in ran.stdout
    refused(cli.json(*allocate_args("ns/a", "1g.10gb")), 5, "unverifiable")
