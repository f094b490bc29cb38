"""Golden output of `hamimig demo -o json`: the narrated lifecycle, step by step, and the state
and CDI trees it leaves, compared with tests/data/golden/demo.json (tests/golden.py says how
values are normalised). NVML call counts are left out: caching a query changes them without
changing behaviour; the creation and destruction counts stay. An outcome's parts are sorted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.golden import Normaliser, check_steps, invoke, normalised_tree, scratch

__all__ = ["scratch"]  # the fixture


def test_the_demo_tells_what_it_told_before(scratch: Path) -> None:
    kept = scratch / "demo"
    kept.mkdir()
    norm = Normaliser(kept)
    ran = invoke(["-o", "json", "demo", "--keep", str(kept)])
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    transcript: dict[str, Any] = json.loads(ran.stdout)
    for gpu in json.loads((kept / "node.json").read_text())["gpus"]:  # stable numbering
        norm.text(gpu["uuid"])
    steps: list[dict[str, Any]] = []
    for raw in transcript.pop("steps"):
        raw.pop("nvmlCalls")
        norm.value(raw["instances"])  # number new instances in layout order first
        step = norm.value(raw)
        # A recovery's outcome lists its actions in MIG UUID order, and those are random.
        step["outcome"] = "; ".join(sorted(step["outcome"].split("; ")))
        steps.append({"command": f"{step['step']}. {step['title']}", "output": step})
    ending = {
        "state": normalised_tree(kept / "state", norm),
        "cdi": normalised_tree(kept / "cdi", norm, digest=True),
    }
    steps.append({"command": "the demo's node", "output": norm.value(transcript), **ending})
    check_steps("demo.json", steps)
