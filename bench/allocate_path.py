"""The path `hamimig allocate` (create) takes: how many hamimig modules it enters (a function of
the module called while `cli/app.py:run` runs, not a class body its import runs; the CLI app
is imported before measuring, and the modules first imported on the way are counted apart),
and how many hamimig frames lie between `cli/app.py:run` and the first NVML mutation
(`hw/nvml.py:_c` creating the GI).
Measured with `sys.setprofile` in a fresh process against a fresh simulated node (one A100,
no instances, no pods: the allocation creates).

    python -m bench.allocate_path [--path]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys

entered, loaded, first = set(), set(), []

def module(frame):
    name = frame.f_globals.get("__name__", "")
    return name if name == "hamimig" or name.startswith("hamimig.") else None

def profile(frame, event, arg):
    if event != "call" or (name := module(frame)) is None:
        return
    if frame.f_code.co_name == "<module>":
        loaded.add(name)
        return
    back = frame.f_back
    if back is not None and back.f_code.co_name == "<module>" and module(back) == name:
        return  # a class body or expression its module runs while it is imported
    entered.add(name)
    if first or name != "hamimig.hw.nvml" or frame.f_code.co_name != "_c":
        return
    if not any(w in str(frame.f_locals.get("call")) for w in ("Create", "Destroy")):
        return
    chain, at = [], frame
    while at is not None:
        if module(at) is not None:
            chain.append(f"{module(at)}:{at.f_code.co_name}")
        at = at.f_back
    start = next(i for i, c in enumerate(chain) if c == "hamimig.cli.app:run")
    first.extend(reversed(chain[: start + 1]))

from hamimig.cli.app import run
sys.setprofile(profile)
code = run(sys.argv[1:])
sys.setprofile(None)
found = {"exit": code, "entered": sorted(entered), "loaded": sorted(loaded), "first": first}
json.dump(found, sys.stderr)
"""


def measure(sim: Path) -> dict[str, object]:
    base = [sys.executable, "-m", "hamimig", "--sim", str(sim), "-o", "json"]
    subprocess.run([*base, "sim", "init", "--model", "A100-SXM4-40GB"], check=True, stdout=-3)
    args = ["--sim", str(sim), "-o", "json", "allocate", "--pod", "default/p", "--gpu", "0"]
    args += ["--profile", "1g.5gb", "--assume-no-pods"]
    ran = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=True
    )
    assert json.loads(ran.stdout)["created"] is True, ran.stdout
    found = json.loads(ran.stderr)
    entered = found["entered"]
    return {
        "modules": len(entered),
        "modulesOutsideSim": len([m for m in entered if not m.startswith("hamimig.sim")]),
        "modulesImportedOnTheWay": len(found["loaded"]),
        "framesToFirstMutation": len(found["first"]),
        "path": found["first"],
        "entered": entered,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", action="store_true", help="also list the frames and modules")
    show = parser.parse_args().path
    with tempfile.TemporaryDirectory() as tmp:
        found = measure(Path(tmp) / "node.json")
    if not show:
        found = {k: v for k, v in found.items() if k not in ("path", "entered")}
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
