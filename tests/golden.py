"""Shared machinery of the golden-output tests: normalise what differs from run to run, record
each command's exit code, `-o json` output and the state/CDI trees it leaves, and compare the
steps with a recorded copy one by one.

A golden file changes only when behaviour changes. Volatile values become placeholders: UUIDs
and their sha256 digests are numbered in order of first appearance (live instances are numbered
in layout order before and after every command, so two instances appearing in one step get the
same numbers every run), intent IDs likewise, times become `<time>`, the temporary directory
`<tmp>`. Regenerate after an intended change with `HAMIMIG_UPDATE_GOLDEN=1 python -m pytest
tests/test_golden*.py` and review the diff.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hamimig.cli.app import app
from hamimig.rehearsal.simulator import sim_init
from tests.support.cli import Cli, Ran, run_hamimig, with_pod_source
from tests.support.node import sim_state

GOLDEN_DIR = Path(__file__).parent / "data" / "golden"
UPDATE = "HAMIMIG_UPDATE_GOLDEN"

_UUID = re.compile(r"(MIG|GPU)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SHA = re.compile(r"\b[0-9a-f]{64}\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)")
_INTENT_FILE = re.compile(r"intent-[A-Za-z0-9_-]+")
_SHORT_SHA = re.compile(r"\b[0-9a-f]{12}\b")  # shortened device names (doctor's check names)
_INTENT_ID = re.compile(r"\b[0-9a-f]{32}\b")  # uuid4().hex: the ID inside intents and messages
_SKIPPED_FILES = ("hamimig.lock", "counters.json", "events.jsonl", "events.jsonl.1")


class Normaliser:
    """Stable placeholders for what differs from run to run."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = str(tmp)
        self.names: dict[str, str] = {}
        self.digests: dict[str, str] = {}
        self.intents: dict[str, str] = {}

    def _uuid(self, match: re.Match[str]) -> str:
        text = match.group(0)
        if text not in self.names:
            kind = match.group(1)
            number = sum(1 for v in self.names.values() if v.startswith(f"<{kind}-")) + 1
            self.names[text] = f"<{kind}-{number}>"
            self.digests[hashlib.sha256(text.encode()).hexdigest()] = f"<sha:{kind}-{number}>"
        return self.names[text]

    def _intent(self, match: re.Match[str]) -> str:
        return self.intents.setdefault(match.group(0), f"<intent-{len(self.intents) + 1}>")

    def _short(self, match: re.Match[str]) -> str:
        found = [v for k, v in self.digests.items() if k.startswith(match.group(0))]
        return found[0] if len(found) == 1 else match.group(0)

    def text(self, value: str) -> str:
        value = value.replace(self.tmp, "<tmp>")
        value = _UUID.sub(self._uuid, value)
        value = _SHA.sub(lambda m: self.digests.get(m.group(0), "<sha:?>"), value)
        value = _SHORT_SHA.sub(self._short, value)
        value = _TIME.sub("<time>", value)
        value = _INTENT_FILE.sub("intent-<id>", value)
        return _INTENT_ID.sub(self._intent, value)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.value(v) for k, v in value.items()}
        return value

    def layout(self, sim: Path) -> None:
        """Number the node's GPUs and live MIG UUIDs in layout order (GPU, placement), not in
        the random order of their names."""
        for gpu in sim_state(sim)["gpus"]:
            self.text(gpu["uuid"])
            gis = sorted(gpu["gpuInstances"], key=lambda gi: (gi["placement"]["start"], gi["id"]))
            for gi in gis:
                for ci in gi["computeInstances"]:
                    self.text(ci["migUUID"])


def hardware(sim: Path, norm: Normaliser) -> dict[str, Any]:
    """The simulated node without its NVML call counts: GIs in placement order, pending faults."""
    node = sim_state(sim)
    gpus = {}
    for gpu in node["gpus"]:
        gis = sorted(gpu["gpuInstances"], key=lambda gi: (gi["placement"]["start"], gi["id"]))
        gpus[str(gpu["index"])] = {"migMode": gpu["migMode"], "gpuInstances": gis}
    return {"gpus": norm.value(gpus), "faults": norm.value(node["faults"])}


def _digest(value: Any) -> str:
    """CDI specs are long and the same across steps: their normalised content's digest."""
    text = json.dumps(value, sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def normalised_tree(directory: Path, norm: Normaliser, digest: bool = False) -> dict[str, Any]:
    """Every file of a directory, normalised; names that normalise alike (intents) map to the
    sorted list of their contents.

    Not `tests.support.files.tree`, which keeps exact bytes and modes to show that nothing
    changed: a golden file must read the same on every run, so contents are parsed and their
    volatile values replaced, and the lock and the metrics counters are left out."""
    found: dict[str, list[Any]] = {}
    if not directory.is_dir():
        return {}
    for path in sorted(directory.iterdir()):
        if path.name in _SKIPPED_FILES:
            continue
        data = path.read_text()
        try:
            content: Any = json.loads(data)
        except ValueError:
            content = data
        content = norm.value(content)
        found.setdefault(norm.text(path.name), []).append(_digest(content) if digest else content)
    out: dict[str, Any] = {}
    for name, contents in sorted(found.items()):
        many = sorted(contents, key=lambda c: json.dumps(c, sort_keys=True))
        out[name] = contents[0] if len(contents) == 1 else many
    return out


def shown(args: tuple[str, ...], parsed: Any) -> Any:
    """What of a command's JSON output is compared: NVML call counts may move with harmless
    changes (caching a query), and doctor's messages name the host (uid, /etc/cdi)."""
    if not isinstance(parsed, dict):
        return parsed
    out = {k: v for k, v in parsed.items() if k != "calls"}
    if args and args[0] == "doctor" and "checks" in parsed:
        out = {
            "checks": [[c["name"], c["status"]] for c in parsed["checks"]],
            "exitCode": parsed["exitCode"],
        }
    return out


def _sort_planned(output: Any) -> Any:
    """Recovery and reconcile plan in MIG UUID order, and those are random; reclaim takes
    instances that went Idle in the same instant in MIG UUID order too, `list` shows records
    whose instance is gone in that order, and a refusal joins its reasons in that order."""
    if isinstance(output, dict):
        for key in ("actions", "reclaimed", "skipped", "instances"):
            if isinstance(output.get(key), list):
                output[key].sort(key=lambda a: json.dumps(a, sort_keys=True))
        error = output.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            error["message"] = "; ".join(sorted(error["message"].split("; ")))
    return output


def _parse(stdout: str) -> Any:
    try:
        return json.loads(stdout)
    except ValueError:
        return stdout.strip()


_COMMAND = typer.main.get_command(app)


class GoldenCli(Cli):
    """`Cli` with the Click command built once (building it costs more than most commands
    take)."""

    def __call__(self, *args: str, output: str | None = None) -> Ran:
        return self.invoke([*(["-o", output] if output else []), *args])

    def invoke(self, args: list[str], stdin: str | None = None) -> Ran:
        argv = [*self.globals(), *args]
        return invoke(with_pod_source(argv) if self.pod_source else argv, stdin)


def invoke(argv: list[str], stdin: str | None = None) -> Ran:
    """What `CliRunner.invoke` does, minus rebuilding the command; exceptions propagate."""
    runner = CliRunner()
    prog = runner.get_default_prog_name(_COMMAND)
    with runner.isolation(input=stdin) as streams:
        try:
            _COMMAND.main(args=argv, prog_name=prog)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = streams[0].getvalue(), streams[1].getvalue()
    return Ran(code, out.decode(), err.decode())


def new_node(root: Path, gpus: int = 2) -> GoldenCli:
    """A fresh simulated node of H100s under ROOT, MIG enabled, no instances."""
    sim = root / "sim" / "node.json"
    sim_init(sim, "H100-SXM5-80GB", gpus)
    return GoldenCli(sim, root / "state", root / "cdi")


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """tmpfs when there is one: every NVML call rewrites the simulated node and every record
    write is fsynced, which costs milliseconds each on a journaling disk."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    root = Path(tempfile.mkdtemp(prefix="hamimig-golden-", dir=shm))
    try:
        yield root
    finally:
        shutil.rmtree(root)


class Recorder:
    """Runs commands on one simulated node and records what each printed and left behind."""

    def __init__(self, cli: GoldenCli, norm: Normaliser, hardware: bool = False) -> None:
        """With `hardware`, each step also records the simulated GPUs' GI/CI layout, busy
        marks and pending faults."""
        self.cli = cli
        self.norm = norm
        self.hardware = hardware
        self.steps: list[dict[str, Any]] = []
        norm.layout(cli.sim)

    def _record(self, command: str, exit_code: int | None, output: Any) -> None:
        self.norm.layout(self.cli.sim)
        step = {
            "command": self.norm.text(command),
            "exit": exit_code,
            "output": _sort_planned(self.norm.value(output)),
            "state": normalised_tree(self.cli.state_dir, self.norm),
            "cdi": normalised_tree(self.cli.cdi_dir, self.norm, digest=True),
        }
        if self.hardware:
            step["hw"] = hardware(self.cli.sim, self.norm)
        self.steps.append(step)

    def run(self, *args: str, cli: GoldenCli | None = None, stdin: str | None = None) -> Any:
        """`hamimig -o json ARGS` in-process; returns the parsed output."""
        self.norm.layout(self.cli.sim)
        ran = (cli or self.cli).invoke(["-o", "json", *args], stdin)
        parsed = _parse(ran.stdout)
        self._record(" ".join(args), ran.exit_code, shown(args, parsed))
        return parsed

    def crash(self, *args: str) -> int:
        """`hamimig -o json ARGS` in a real subprocess, for a simulated crash (exit 137)."""
        self.norm.layout(self.cli.sim)
        ran = run_hamimig(*self.cli.globals(), "-o", "json", *args)
        self._record(" ".join(args), ran.returncode, shown(args, _parse(ran.stdout)))
        return ran.returncode

    def note(self, what: str, change: Callable[[], object]) -> None:
        """A change made behind hamimig's back (a file written or damaged), recorded as a step."""
        self.norm.layout(self.cli.sim)
        change()
        self._record(f"# {what}", None, None)


def dump(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True) + "\n"


def check_steps(name: str, steps: list[dict[str, Any]]) -> None:
    """Compare one recorded run with tests/data/golden/NAME step by step (or rewrite it)."""
    check_scenarios(name, {"": steps})


def check_scenarios(name: str, scenarios: dict[str, list[dict[str, Any]]]) -> None:
    """As `check_steps` for several named runs in one file; a single run unnamed ("") is
    stored as a plain list of steps."""
    path = GOLDEN_DIR / name
    stored: Any = scenarios[""] if list(scenarios) == [""] else scenarios
    if os.environ.get(UPDATE):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(stored))
    loaded = json.loads(path.read_text())
    expected = {"": loaded} if isinstance(loaded, list) else loaded
    assert sorted(scenarios) == sorted(expected), f"{name}: scenarios differ"
    for scenario, steps in scenarios.items():
        want_steps = expected[scenario]
        for i, (want, got) in enumerate(zip(want_steps, steps, strict=False)):
            label = f"{name} {scenario} step {i + 1}: {want['command']}".replace("  ", " ")
            assert got == want, label
        assert len(steps) == len(want_steps), f"{name} {scenario}: number of steps differs"
