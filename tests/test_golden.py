"""Golden outputs: what every command prints (`-o json`) and leaves on disk, for one scripted
lifecycle on the simulated node, compared with a recorded copy.

This is the safety net for reshaping the engine: a refactor that changes no behaviour leaves
this file unchanged. Volatile values are normalised before comparing: UUIDs and their sha256
digests become numbered placeholders in order of first appearance, times become `<time>`, the
temporary directory becomes `<tmp>`. Regenerate after an intended change with
`HAMIMIG_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py` and review the diff.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from hamimig.engine.simulator import sim_init
from tests.conftest import Cli

GOLDEN = Path(__file__).parent / "data" / "golden" / "lifecycle.json"
UPDATE = "HAMIMIG_UPDATE_GOLDEN"

_UUID = re.compile(r"(MIG|GPU)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SHA = re.compile(r"\b[0-9a-f]{64}\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)")
_INTENT = re.compile(r"intent-[A-Za-z0-9_-]+")


class Normaliser:
    """Stable placeholders for what differs from run to run."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = str(tmp)
        self.names: dict[str, str] = {}
        self.digests: dict[str, str] = {}

    def _uuid(self, match: re.Match[str]) -> str:
        text = match.group(0)
        if text not in self.names:
            kind = match.group(1)
            number = sum(1 for v in self.names.values() if v.startswith(f"<{kind}-")) + 1
            self.names[text] = f"<{kind}-{number}>"
            self.digests[hashlib.sha256(text.encode()).hexdigest()] = f"<sha:{kind}-{number}>"
        return self.names[text]

    def text(self, value: str) -> str:
        value = value.replace(self.tmp, "<tmp>")
        value = _UUID.sub(self._uuid, value)
        value = _SHA.sub(lambda m: self.digests.get(m.group(0), "<sha:?>"), value)
        value = _TIME.sub("<time>", value)
        return _INTENT.sub("intent-<id>", value)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.value(v) for k, v in value.items()}
        return value


def _digest(value: Any) -> str:
    """CDI specs are long and the same across steps: their normalised content's digest."""
    text = json.dumps(value, sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _tree(directory: Path, norm: Normaliser, digest: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not directory.is_dir():
        return out
    for path in sorted(directory.iterdir()):
        if path.name in ("hamimig.lock", "counters.json"):
            continue
        data = path.read_text()
        try:
            content: Any = json.loads(data)
        except ValueError:
            content = data
        content = norm.value(content)
        out[norm.text(path.name)] = _digest(content) if digest else content
    return dict(sorted(out.items()))


def _scenario(cli: Cli, norm: Normaliser) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []

    def run(*args: str) -> dict[str, Any]:
        ran = cli.json(*args)
        parsed: dict[str, Any] = json.loads(ran.stdout)
        shown = {k: v for k, v in parsed.items() if k != "calls"}  # NVML call counts may move
        if args[0] == "doctor":  # its messages name the host (uid, /etc/cdi): verdicts only
            shown = {
                "checks": [[c["name"], c["status"]] for c in parsed["checks"]],
                "exitCode": parsed["exitCode"],
            }
        output = norm.value(shown)
        if "actions" in output:  # planned in MIG UUID order, and those are random
            output["actions"].sort(key=lambda a: json.dumps(a, sort_keys=True))
        steps.append(
            {
                "command": norm.text(" ".join(args)),
                "exit": ran.exit_code,
                "output": output,
                "state": _tree(cli.state_dir, norm),
                "cdi": _tree(cli.cdi_dir, norm, digest=True),
            }
        )
        return parsed

    def alloc(pod: str, profile: str, placement: str, gpu: str = "0") -> str:
        args = ("--pod", pod, "--gpu", gpu, "--profile", profile, "--placement", placement)
        mig: str = run("allocate", *args)["instance"]["migUUID"]
        return mig

    a = alloc("team-a/train-1", "2g.20gb", "0")
    b = alloc("team-b/infer-1", "1g.10gb", "2")
    c = alloc("team-c/job-1", "1g.10gb", "3")
    run("release", "--mig-uuid", c)
    run("allocate", "--pod", "team-d/job-2", "--gpu", "0", "--profile", "1g.10gb")  # reuse
    run("release", "--pod", "team-d/job-2")
    run("allocate", "--pod", "team-a/train-1", "--gpu", "0", "--profile", "2g.20gb")  # again
    run("allocate", "--pod", "team-e/big", "--gpu", "0", "--profile", "7g.80gb")  # blocked
    run("sim", "create", "--gpu", "1", "--profile", "3g.40gb", "--placement", "4")
    run("list")
    run("show", a)
    run("profiles", "--gpu", "0")
    run("reclaim", "--gpu", "0", "--all-idle", "--dry-run")
    run("release", "--mig-uuid", b)
    run("reclaim", "--gpu", "0", "--placement", "2")
    run("recover", "--assume-no-pods", "--dry-run")
    run("reconcile")
    run("doctor")
    run("forget", c, "--dry-run")
    run("recover", "--assume-no-pods")
    run("list")
    return steps


@pytest.mark.slow
def test_the_lifecycle_prints_and_leaves_what_it_did_before(tmp_path: Path) -> None:
    sim = tmp_path / "sim" / "node.json"
    sim_init(sim, "H100-SXM5-80GB", 2)
    cli = Cli(sim, tmp_path / "state", tmp_path / "cdi")
    norm = Normaliser(tmp_path)
    for gpu in json.loads(sim.read_text())["gpus"]:  # GPUs first: stable numbering
        norm.text(gpu["uuid"])
    steps = _scenario(cli, norm)
    text = json.dumps(steps, indent=1, sort_keys=True) + "\n"
    if os.environ.get(UPDATE):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    expected = json.loads(GOLDEN.read_text())
    for want, got in zip(expected, steps, strict=True):
        assert got == want, want["command"]
