"""Operator actions on the simulated node that the adapter tests do not reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from hamimig.errors import NvmlError, UsageError
from hamimig.reports.simulator import sim_busy, sim_create
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
