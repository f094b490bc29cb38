"""Start-up: an idempotent `hamimig allocate` (the slot already holds its instance, so nothing
changes) against a minimal Typer app with the same dependencies that parses the same options
and prints one JSON object. Each runs as a fresh process, as a device plugin's hook would.

    python -m bench.startup [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MINIMAL = """
import json
from typing import Annotated

import typer

app = typer.Typer(add_completion=False)


@app.callback()
def root(
    sim: Annotated[str, typer.Option()] = "",
    state_dir: Annotated[str, typer.Option()] = "",
    cdi_dir: Annotated[str, typer.Option()] = "",
    config: Annotated[str, typer.Option()] = "",
    output: Annotated[str, typer.Option("--output", "-o")] = "table",
) -> None:
    pass


@app.command()
def allocate(
    pod: Annotated[str, typer.Option()],
    gpu: Annotated[str, typer.Option()],
    profile: Annotated[str, typer.Option()],
    placement: Annotated[str, typer.Option()] = "",
    container_index: Annotated[int, typer.Option()] = 0,
    device_index: Annotated[int, typer.Option()] = 0,
) -> None:
    print(json.dumps({"kind": "Allocation", "pod": pod, "gpu": gpu, "profile": profile}))


@app.command()
def other() -> None:
    pass


app()
"""


def timed(argv: list[str]) -> float:
    began = time.perf_counter()
    ran = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hamimig-startup-") as tmp:
        root = Path(tmp)
        (root / "state").mkdir(mode=0o700)
        (root / "config.yaml").write_text("cdi:\n  baseSpec: none\n", encoding="utf-8")
        base = [
            *("--sim", str(root / "sim" / "node.json"), "--state-dir", str(root / "state")),
            *("--cdi-dir", str(root / "cdi"), "--config", str(root / "config.yaml")),
        ]
        hamimig = [sys.executable, "-m", "hamimig", *base]
        timed([*hamimig, "sim", "init", "--model", "H100-SXM5-80GB"])
        request = ["--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0"]
        allocate = [*hamimig, "-o", "json", "allocate", *request]
        first = subprocess.run(allocate, capture_output=True, text=True, check=True)
        assert json.loads(first.stdout)["created"] is True
        script = root / "minimal.py"
        script.write_text(MINIMAL, encoding="utf-8")
        minimal = [sys.executable, str(script), *base, "-o", "json", "allocate", *request]
        ours, theirs = [], []
        for _ in range(args.runs):
            theirs.append(timed(minimal))
            ours.append(timed(allocate))
        again = subprocess.run(allocate, capture_output=True, text=True, check=True)
        assert json.loads(again.stdout)["created"] is False  # idempotent: nothing changed
    m, h = statistics.median(theirs), statistics.median(ours)
    print(
        f"median of {args.runs}: minimal Typer app {m * 1000:.0f} ms, idempotent hamimig "
        f"allocate {h * 1000:.0f} ms, ratio {h / m:.2f}"
    )


if __name__ == "__main__":
    main()
