"""Red-team regressions for issue 27 (the declarative data layer, one pipeline, a frozen node):
behaviour that changed against the code before the refactor, found by running both on the same
inputs and comparing their output byte for byte."""

from __future__ import annotations

from tests.support.cli import Cli, allocated, ok, sim


def test_sim_show_json_keeps_its_key_order(cli: Cli) -> None:
    """`sim show -o json` prints each GPU and GPU instance with its keys in the documented order
    (`migMode` before `gpuInstances`, `placement` right after `profileId`, `heldFor` last), as
    before the simulated node became pydantic models: JSON output is a contract, and scripts
    and golden files compare it as text."""
    mig = allocated(cli, "team-a/p", "1g.10gb", "0")
    sim(cli, "busy", "--mig-uuid", mig, "--gi-only")
    gpu = ok(cli.json("sim", "show"))["gpus"][0]
    assert list(gpu) == ["index", "uuid", "model", "minor", "migMode", "gpuInstances"]
    gi = gpu["gpuInstances"][0]
    assert list(gi) == ["id", "profileId", "placement", "computeInstances", "held", "heldFor"]
    assert list(gi["placement"]) == ["start", "size"]
    assert list(gpu["migMode"]) == ["current", "pending"]
