"""Start-up: an idempotent `hamimig allocate` (the slot already holds its instance, so nothing
changes) against a minimal Typer app that parses the same options and prints one JSON object,
in two forms: importing only Typer, and also importing the other libraries that allocate loads
(PyYAML for the config file, pynvml for the NVML types). Each runs as a fresh process, as a
device plugin's hook would.

    python -m bench.startup [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.recover import timed

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
    assume_no_pods: Annotated[bool, typer.Option()] = False,
) -> None:
    print(json.dumps({"kind": "Allocation", "pod": pod, "gpu": gpu, "profile": profile}))


@app.command()
def other() -> None:
    pass


app()
"""


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
        request.append("--assume-no-pods")  # the bench runs no pods
        allocate = [*hamimig, "-o", "json", "allocate", *request]
        first = subprocess.run(allocate, capture_output=True, text=True, check=True)
        assert json.loads(first.stdout)["created"] is True
        bare, same = root / "minimal.py", root / "minimal_same_libraries.py"
        bare.write_text(MINIMAL, encoding="utf-8")
        same.write_text("import pynvml\nimport yaml\n" + MINIMAL, encoding="utf-8")
        tail = [*base, "-o", "json", "allocate", *request]
        ours, theirs, theirs_same = [], [], []
        for _ in range(args.runs):
            theirs.append(timed([sys.executable, str(bare), *tail]))
            theirs_same.append(timed([sys.executable, str(same), *tail]))
            ours.append(timed(allocate))
        again = subprocess.run(allocate, capture_output=True, text=True, check=True)
        assert json.loads(again.stdout)["created"] is False  # idempotent: nothing changed
    m, s, h = (statistics.median(x) for x in (theirs, theirs_same, ours))
    print(
        f"median of {args.runs}: idempotent hamimig allocate {h * 1000:.0f} ms; minimal Typer "
        f"app {m * 1000:.0f} ms (ratio {h / m:.2f}), importing PyYAML and pynvml too "
        f"{s * 1000:.0f} ms (ratio {h / s:.2f})"
    )


if __name__ == "__main__":
    main()
