"""Operator actions on the simulated node that the adapter tests do not reach."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hamimig.cli.app import app
from hamimig.errors import NvmlError, UsageError
from hamimig.rehearsal.simulator import sim_busy, sim_create
from tests.support.node import open_hw


def test_gi_hold_can_be_cleared_after_the_ci_is_gone(sim_path: Path) -> None:
    created = sim_create(sim_path, "0", "1g.10gb", "2", no_ci=False).created
    assert created is not None and created.mig_uuid is not None
    sim_busy(sim_path, created.mig_uuid, gi_only=True, clear=False)
    hw = open_hw(sim_path)
    try:
        gi = created.gpu_instance_id
        assert gi is not None
        hw.destroy_compute_instance(0, gi, 0)
        with pytest.raises(NvmlError) as held:
            hw.destroy_gpu_instance(0, gi)
        assert held.value.name == "IN_USE"
        message = sim_busy(sim_path, created.mig_uuid, gi_only=False, clear=True).message
        assert "no longer held" in message
        hw.destroy_gpu_instance(0, gi)
        assert hw.layout(0) == ()
    finally:
        hw.close()


def test_clearing_an_unknown_instance_is_a_usage_error(sim_path: Path) -> None:
    with pytest.raises(UsageError):
        sim_busy(sim_path, "MIG-00000000-0000-0000-0000-000000000000", False, True)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_sim_init_on_a_directory_is_refused_before_anything_is_made(
    tmp_path: Path, kind: str
) -> None:
    """`sim init --sim X` where X is another node's home (a directory) or no regular file:
    exit 2 naming it, no `X.d/` and no `X.lock` left behind."""
    # A FIFO stands for a device such as /dev/null: a test must never risk the real one.
    target = tmp_path / ("ab.d" if kind == "directory" else "fifo")
    if kind == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)
    before = sorted(p.name for p in target.parent.iterdir())
    ran = CliRunner().invoke(
        app, ["--sim", str(target), "sim", "init", "--model", "H100-SXM5-80GB"]
    )
    assert ran.exit_code == 2, ran.stderr
    assert ran.stderr.startswith(f"hamimig: error: {target} is "), ran.stderr
    assert "cannot be a simulated node's file" in ran.stderr
    assert sorted(p.name for p in target.parent.iterdir()) == before


@pytest.mark.parametrize(
    ("option", "value", "bounds"),
    [
        ("--times", "99999999999999999999999", "between 1 and 2147483647"),
        ("--times", "2147483648", "between 1 and 2147483647"),
        ("--times", "0", "between 1 and 2147483647"),
        ("--skip", "2147483648", "between 0 and 2147483647"),
        ("--skip", "-1", "between 0 and 2147483647"),
    ],
)
def test_sim_fault_add_bounds_its_counts(
    sim_path: Path, option: str, value: str, bounds: str
) -> None:
    add = ["--sim", str(sim_path), "sim", "fault", "add", "--op", "nvmlInit", option]
    before = sim_path.read_bytes()
    ran = CliRunner().invoke(app, [*add, value])
    assert ran.exit_code == 2, ran.stderr
    assert f"{option} must be {bounds}, not {value}" in ran.stderr, ran.stderr
    assert sim_path.read_bytes() == before
    assert CliRunner().invoke(app, [*add, "2147483647"]).exit_code == 0  # the bound itself


def test_a_fifo_named_as_the_node_is_refused_never_read(tmp_path: Path) -> None:
    """Reading a FIFO (or a device) would block forever, or never end: exit 2, nothing made."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (["list"], ["sim", "show"], ["sim", "init", "--model", "H100-SXM5-80GB"]):
        ran = subprocess.run(
            [sys.executable, "-m", "hamimig", "--sim", str(fifo), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert ran.returncode == 2, (args, ran.stderr)
        assert ran.stderr.startswith(f"hamimig: error: {fifo} is no regular file"), ran.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]
