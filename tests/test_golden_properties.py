"""Golden outputs of pseudo-random lifecycles: for three fixed seeds, a driver issues 40 CLI
operations (allocate, release, reclaim, reconcile, recover, adopt, forget, processes and
faults on the simulated node, instances made behind hamimig's back) and records each one's exit
code, `-o json` output, the state/CDI trees and the simulated layout, compared with
tests/data/golden/properties.json (tests/golden.py says how values are normalised).

tests/test_lifecycle_properties.py checks that such sequences keep the invariants; this file
pins what they print and leave, so that reshaping the engine cannot change either unnoticed.
The driver's choices depend only on its seed and on what the node looks like (instances in
layout order), never on random MIG UUIDs, so the same code writes the same file every run.
Only `raise` faults are injected: a simulated crash would end the in-process run.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.golden import Normaliser, Recorder, check_scenarios, new_node, scratch
from tests.support.pods import kube_pod, pod_list

__all__ = ["scratch"]  # the fixture

SEEDS = (1, 2, 3)
OPERATIONS = 40
PODS = tuple(f"ns/p{i}" for i in range(6))
PLACEMENTS = {
    "1g.10gb": (0, 1, 2, 3, 4, 5, 6),
    "1g.20gb": (0, 2, 4, 6),
    "2g.20gb": (0, 2, 4),
    "3g.40gb": (0, 4),
    "4g.40gb": (0,),
    "7g.80gb": (0,),
}
FAULTS = (
    ("nvmlComputeInstanceDestroy", "IN_USE"),
    ("nvmlGpuInstanceDestroy", "IN_USE"),
    ("nvmlDeviceCreateGpuInstanceWithPlacement", "INSUFFICIENT_RESOURCES"),
    ("nvmlGpuInstanceCreateComputeInstance", "UNKNOWN"),
    ("cdi.write", "EIO"),
    ("cdi.remove", "EIO"),
    ("record.write", "EIO"),
)


class Driver:
    """Chooses each next operation from its random seed and the node's layout."""

    def __init__(self, root: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.root = root
        self.cli = new_node(root)
        self.rec = Recorder(self.cli, Normaliser(root), hardware=True)
        self.written = 0

    def live(self) -> list[str]:
        """Live MIG UUIDs in layout order (GPU, placement)."""
        node = json.loads(self.cli.sim.read_text())
        return [
            ci["migUUID"]
            for gpu in node["gpus"]
            for gi in sorted(gpu["gpuInstances"], key=lambda gi: gi["placement"]["start"])
            for ci in gi["computeInstances"]
        ]

    def pick_mig(self) -> str:
        live = self.live()
        return self.rng.choice(live) if live else "MIG-00000000-0000-4000-8000-000000000000"

    def pods(self) -> str:
        """A pod list holding a random subset of the pods, written now."""
        running = [kube_pod(p) for p in PODS if self.rng.random() < 0.5]
        self.written += 1
        path = self.root / f"pods-{self.written}.json"
        path.write_text(json.dumps(pod_list(*running)))
        return str(path)

    def dry(self, share: float = 0.3) -> list[str]:
        return ["--dry-run"] if self.rng.random() < share else []

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        gpu = str(rng.randrange(2))
        if roll < 0.27:
            profile = rng.choice(sorted(PLACEMENTS))
            args = ["--pod", rng.choice(PODS), "--gpu", gpu, "--profile", profile]
            where = rng.random()
            if where < 0.6:
                args += ["--placement", str(rng.choice(PLACEMENTS[profile]))]
            elif where < 0.7:
                args += ["--placement", str(rng.randrange(8))]  # sometimes not legal
            self.rec.run("allocate", *args)
        elif roll < 0.45:
            if rng.random() < 0.5:
                self.rec.run("release", "--pod", rng.choice(PODS))
            else:
                self.rec.run("release", "--mig-uuid", self.pick_mig())
        elif roll < 0.59:
            how = rng.randrange(3)
            if how == 0:
                target = ["--mig-uuid", self.pick_mig()]
            elif how == 1:
                target = ["--gpu", gpu, "--all-idle"]
            else:
                target = ["--gpu", gpu, "--placement", str(rng.randrange(7))]
            self.rec.run("reclaim", *target, *self.dry())
        elif roll < 0.67:
            pods = ["--pods", self.pods()] if rng.random() < 0.6 else []
            self.rec.run("reconcile", *pods, *self.dry(0.25))
        elif roll < 0.72:
            source = ["--pods", self.pods()] if rng.random() < 0.6 else ["--assume-no-pods"]
            adopt = ["--adopt"] if rng.random() < 0.3 else []
            self.rec.run("recover", *source, *adopt, *self.dry())
        elif roll < 0.75:
            self.rec.run("adopt", "--exclusive-owner", "--assume-no-pods", *self.dry())
        elif roll < 0.77:
            self.rec.run("forget", self.pick_mig(), *self.dry(0.5))
        elif roll < 0.81:
            clear = ["--clear"] if rng.random() < 0.3 else []
            self.rec.run("sim", "busy", "--mig-uuid", self.pick_mig(), *clear)
        elif roll < 0.89:
            op, error = rng.choice(FAULTS)
            times = str(rng.choice((1, 1, 2, 5)))
            self.rec.run("sim", "fault", "add", "--op", op, "--error", error, "--times", times)
        elif roll < 0.92:
            self.rec.run("sim", "fault", "clear")
        elif roll < 0.96:
            profile = rng.choice(("1g.10gb", "2g.20gb", "1g.20gb"))
            start = str(rng.choice(PLACEMENTS[profile]))
            no_ci = ["--no-ci"] if rng.random() < 0.3 else []
            self.rec.run("sim", "create", "--gpu", gpu, "--profile", profile,
                         "--placement", start, *no_ci)  # fmt: skip
        else:
            self.rec.run("list")


@pytest.mark.slow
def test_seeded_lifecycles_print_and_leave_what_they_did_before(scratch: Path) -> None:
    recorded: dict[str, list[dict[str, Any]]] = {}
    for seed in SEEDS:
        driver = Driver(scratch / f"seed-{seed}", seed)
        for _ in range(OPERATIONS):
            driver.step()
        driver.rec.run("list")
        recorded[f"seed-{seed}"] = driver.rec.steps
    check_scenarios("properties.json", recorded)
