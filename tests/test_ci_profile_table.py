"""One compute-instance profile table (`hw.types.FULL_CI_PROFILE_BY_SLICES`): NVML's constants,
which the real adapter asks for and the simulator offers (issue 27: there were two, and the
simulator's lacked the 6- and 8-slice profiles)."""

from __future__ import annotations

import re

import pynvml
import pytest

from hamimig.hw import types
from hamimig.sim import models, state
from hamimig.sim.models import MODELS
from tests.support.cli import Cli, refused, sim

_CONSTANT = re.compile(r"NVML_COMPUTE_INSTANCE_PROFILE_(\d+)_SLICE")


def test_the_table_is_nvmls_constants() -> None:
    nvml = {
        int(m.group(1)): getattr(pynvml, name)
        for name in dir(pynvml)
        if (m := _CONSTANT.fullmatch(name))
    }
    assert set(nvml) >= {1, 2, 3, 4, 6, 7, 8}
    assert nvml == types.FULL_CI_PROFILE_BY_SLICES


def test_the_simulator_reads_the_same_table() -> None:
    assert state.FULL_CI_PROFILE_BY_SLICES is types.FULL_CI_PROFILE_BY_SLICES
    assert not hasattr(models, "FULL_CI_PROFILE_BY_SLICES")


@pytest.mark.parametrize("profile", [p.name for p in MODELS["H100-SXM5-80GB"].profiles])
def test_a_whole_gi_ci_has_nvmls_profile_for_its_slices(cli: Cli, profile: str) -> None:
    spec = next(p for p in MODELS["H100-SXM5-80GB"].profiles if p.name == profile)
    start = str(spec.starts[-1])
    sim(cli, "create", "--gpu", "0", "--profile", profile, "--placement", start)
    (gi,) = sim(cli, "show")["gpus"][0]["gpuInstances"]
    (ci,) = gi["computeInstances"]
    assert ci["profileId"] == types.FULL_CI_PROFILE_BY_SLICES[spec.slice_count]


@pytest.mark.parametrize("slices", ["5", "6", "8"])
def test_a_ci_size_the_board_does_not_offer_is_still_not_a_ci_layout(cli: Cli, slices: str) -> None:
    args = ("--gpu", "0", "--profile", "7g.80gb", "--placement", "0", "--ci-slices", slices)
    message = refused(cli.json("sim", "create", *args), 2, "usage")
    assert message == f"{slices} compute slices x 1 compute instances: not a CI layout"
    assert sim(cli, "show")["gpus"][0]["gpuInstances"] == []
