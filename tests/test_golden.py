"""Golden outputs: what every command prints (`-o json`) and leaves on disk, for one scripted
lifecycle on the simulated node, compared with a recorded copy (tests/golden.py says how).

This is the safety net for reshaping the engine: a refactor that changes no behaviour leaves
this file unchanged. Regenerate after an intended change with
`HAMIMIG_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py` and review the diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.golden import Normaliser, Recorder, check_steps, new_node, scratch

__all__ = ["scratch"]  # the fixture


def _scenario(rec: Recorder) -> None:
    def alloc(pod: str, profile: str, placement: str, gpu: str = "0") -> str:
        args = ("--pod", pod, "--gpu", gpu, "--profile", profile, "--placement", placement)
        made: dict[str, Any] = rec.run("allocate", *args)
        mig: str = made["instance"]["migUUID"]
        return mig

    a = alloc("team-a/train-1", "2g.20gb", "0")
    b = alloc("team-b/infer-1", "1g.10gb", "2")
    c = alloc("team-c/job-1", "1g.10gb", "3")
    rec.run("release", "--mig-uuid", c)
    rec.run("allocate", "--pod", "team-d/job-2", "--gpu", "0", "--profile", "1g.10gb")  # reuse
    rec.run("release", "--pod", "team-d/job-2")
    rec.run("allocate", "--pod", "team-a/train-1", "--gpu", "0", "--profile", "2g.20gb")  # again
    rec.run("allocate", "--pod", "team-e/big", "--gpu", "0", "--profile", "7g.80gb")  # blocked
    rec.run("sim", "create", "--gpu", "1", "--profile", "3g.40gb", "--placement", "4")
    rec.run("list")
    rec.run("show", a)
    rec.run("profiles", "--gpu", "0")
    rec.run("reclaim", "--gpu", "0", "--all-idle", "--dry-run")
    rec.run("release", "--mig-uuid", b)
    rec.run("reclaim", "--gpu", "0", "--placement", "2")
    rec.run("recover", "--assume-no-pods", "--dry-run")
    rec.run("reconcile")
    rec.run("doctor")
    rec.run("forget", c, "--dry-run")
    rec.run("recover", "--assume-no-pods")
    rec.run("list")


@pytest.mark.slow
def test_the_lifecycle_prints_and_leaves_what_it_did_before(scratch: Path) -> None:
    rec = Recorder(new_node(scratch), Normaliser(scratch))
    _scenario(rec)
    check_steps("lifecycle.json", rec.steps)
