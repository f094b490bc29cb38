"""Running `hamimig` the way a script or HAMi does, and reading its answers: the in-process runner
(`Cli`), a real child process (`run_hamimig`), and the steps most tests begin with (allocate,
release, the simulator's own commands). Asserting helpers (`ok`, `refused`) fail with the
command's output, so a failing test shows what hamimig said."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from hamimig.cli.app import app
from tests import forked


@dataclass
class Ran:
    """What one `hamimig` run gave back: exit status, standard output and standard error."""

    exit_code: int
    stdout: str
    stderr: str
    args: tuple[str, ...] = ()
    """The command line after the node's global options, when known (`refused` reads it)."""

    def json(self) -> Any:
        return json.loads(self.stdout)


POD_SOURCE_FLAGS = ("--pods", "--kube", "--assume-no-pods")
NEEDS_POD_SOURCE = ("allocate", "reclaim")


def with_pod_source(args: list[str]) -> list[str]:
    """`args` with `--assume-no-pods` added to an `allocate` or `reclaim` that names no pod
    source: a simulated node runs no device plugin, so no pod holds an instance the records
    call Idle or Error, and the assertion is true. A test that names a source (or one about the
    requirement itself: `Cli(..., pod_source=False)`) is run as written."""
    for i, arg in enumerate(args):
        after_option = i > 0 and args[i - 1].startswith("-") and "=" not in args[i - 1]
        if arg in NEEDS_POD_SOURCE and not after_option:
            rest = args[i + 1 :]
            named = any(a.split("=")[0] in POD_SOURCE_FLAGS for a in rest)
            if named or "--help" in rest:
                return args
            return [*args, "--assume-no-pods"]
        if not arg.startswith("-") and not after_option:
            return args  # another command
    return args


class Cli:
    """Runs `hamimig` in-process through Typer's CliRunner with the node's global options; the
    config file is `config`, else one that does not exist (the built-in defaults). `allocate`
    and `reclaim` get `--assume-no-pods` unless the test names a pod source (`pod_source`
    False: never; see `with_pod_source`)."""

    def __init__(
        self,
        sim: Path,
        state_dir: Path,
        cdi_dir: Path,
        config: Path | None = None,
        pod_source: bool = True,
    ):
        self.sim = sim
        self.state_dir = state_dir
        self.cdi_dir = cdi_dir
        self.config = config
        self.pod_source = pod_source
        self.runner = CliRunner()

    def globals(self) -> list[str]:
        config = self.config or self.state_dir.parent / "absent-config.yaml"
        return [
            "--sim",
            str(self.sim),
            "--state-dir",
            str(self.state_dir),
            "--cdi-dir",
            str(self.cdi_dir),
            "--config",
            str(config),
        ]

    def __call__(self, *args: str, output: str | None = None) -> Ran:
        argv = self.globals() + (["-o", output] if output else []) + list(args)
        if self.pod_source:
            argv = with_pod_source(argv)
        result = self.runner.invoke(app, argv, catch_exceptions=False)
        return Ran(result.exit_code, result.stdout, result.stderr, tuple(args))

    def json(self, *args: str) -> Ran:
        return self(*args, output="json")


ADOPT_CONFIG = "devices:\n  nvidia:\n    adoptExistingMIGInstances: true\n"
"""A config that lets `recover --adopt` and `adopt` take instances hamimig did not make."""
LEGACY_CONFIG = "cdi:\n  enabled: false\n"
"""A config without CDI: hamimig writes no specs (legacy mode)."""


def configured(cli: Cli, text: str) -> Cli:
    """The same node with a config file of our own, written next to its state directory."""
    path = cli.state_dir.parent / "config.yaml"
    path.write_text(text)
    return Cli(cli.sim, cli.state_dir, cli.cdi_dir, config=path, pod_source=cli.pod_source)


COMPLETION_ENV = {
    "bash": lambda line: {"COMP_WORDS": line, "COMP_CWORD": str(len(line.split(" ")) - 1)},
    "zsh": lambda line: {"_TYPER_COMPLETE_ARGS": line},
    "fish": lambda line: {"_TYPER_COMPLETE_ARGS": line, "_TYPER_COMPLETE_FISH_ACTION": "get-args"},
}
"""What each shell's completion script (completions/, Typer's) hands `hamimig` on a TAB."""


def tab(line: str, shell: str = "bash", env: dict[str, str] | None = None) -> list[str]:
    """What a TAB at the end of `line` ("hamimig ...", a word or a space last) offers, asked as
    `shell`'s completion script asks, in process; the values only (fish and zsh give help too)."""
    asked = {"_HAMIMIG_COMPLETE": f"complete_{shell}", **COMPLETION_ENV[shell](line), **(env or {})}
    ran = CliRunner().invoke(app, [], env=asked, catch_exceptions=False)
    assert (ran.exit_code, ran.stderr) == (0, ""), (ran.exit_code, ran.stderr)
    if shell == "zsh":  # _arguments '*: :(("value":"help"\n"value"))', or _files for none
        items = ran.stdout.removeprefix("_arguments '*: :((").rstrip().removesuffix("))'")
        return [] if items == "_files" else [i[1:].split('"', 1)[0] for i in items.splitlines()]
    return [line.split("\t")[0] for line in ran.stdout.splitlines() if line]


def run_hamimig(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`hamimig ARGS` in a real child process (crash and concurrency tests), forked from this
    one: see `tests/forked.py`; a pod source as `with_pod_source` adds one."""
    return forked.run(*with_pod_source(list(args)), env=env)


# ---------------------------------------------------------------------------------------------
# Answers


def ok(ran: Ran) -> dict[str, Any]:
    """The JSON document of a run that must have succeeded (exit 0)."""
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    data: dict[str, Any] = ran.json()
    return data


PLAN_KINDS = {
    "allocate": "Allocation",
    "release": "Release",
    "reclaim": "Reclaim",
    "forget": "Forget",
    "recover": "Recovery",
    "adopt": "Adoption",
    "reconcile": "Reconcile",
}
"""The `kind` of each mutating command's result: a refused dry run's JSON object keeps it."""


def refusal_kind(args: tuple[str, ...] | list[str]) -> str:
    """The `kind` a refusal of this command line prints: `Error`, or, for a dry run of a
    mutating command, that command's own (see `refused`)."""
    command = next((a for a in args if a in PLAN_KINDS), None)
    return PLAN_KINDS[command] if command is not None and "--dry-run" in args else "Error"


def refused(ran: Ran, exit_code: int, code: str, kind: str | None = None) -> str:
    """Assert a refusal with this exit status and error code; returns its message. A refused
    dry run carries its error on its plan object, whose `kind` is the command's: by default
    the kind its command line calls for (`refusal_kind`)."""
    assert ran.exit_code == exit_code, (ran.stdout, ran.stderr)
    data = ran.json()
    kind = kind if kind is not None else refusal_kind(ran.args)
    assert data["kind"] == kind, (kind, ran.stdout)
    assert kind == "Error" or data["dryRun"] is True
    assert data["error"]["code"] == code
    message: str = data["error"]["message"]
    assert message
    return message


# ---------------------------------------------------------------------------------------------
# Allocations


def allocate_args(
    pod: str, profile: str, placement: str | None = None, gpu: str = "0"
) -> list[str]:
    """`allocate` with its options: placement left to hamimig when None; the pod source as
    `with_pod_source` adds it (these arguments may go to a child `python -m hamimig`)."""
    args = ["allocate", "--pod", pod, "--gpu", gpu, "--profile", profile]
    return with_pod_source(args + (["--placement", placement] if placement is not None else []))


def alloc(
    cli: Cli, pod: str, profile: str, placement: str | None = None, gpu: str = "0", *extra: str
) -> Ran:
    """Run `allocate` (JSON output); the caller judges the outcome."""
    return cli.json(*allocate_args(pod, profile, placement, gpu), *extra)


def allocate(
    cli: Cli, pod: str, profile: str, placement: str | None = None, gpu: str = "0", *extra: str
) -> dict[str, Any]:
    """Allocate, which must succeed; returns the Allocation object."""
    return ok(alloc(cli, pod, profile, placement, gpu, *extra))


def allocated(
    cli: Cli, pod: str, profile: str, placement: str | None = None, gpu: str = "0"
) -> str:
    """Allocate, which must succeed; returns the instance's MIG UUID."""
    mig: str = allocate(cli, pod, profile, placement, gpu)["instance"]["migUUID"]
    return mig


def idle(cli: Cli, pod: str, profile: str, placement: str | None = None, gpu: str = "0") -> str:
    """An Idle instance: allocated for `pod`, then released; returns its MIG UUID."""
    mig = allocated(cli, pod, profile, placement, gpu)
    ok(cli.json("release", "--mig-uuid", mig))
    return mig


# ---------------------------------------------------------------------------------------------
# The simulator's own commands


def sim(cli: Cli, *args: str) -> dict[str, Any]:
    """`hamimig sim ARGS`, which must succeed; returns its JSON document."""
    return ok(cli.json("sim", *args))


def fault(cli: Cli, op: str, error: str | None = None, *, action: str = "raise") -> None:
    """Arm one simulator fault on `op`: an error it raises, or a crash (`action`)."""
    args = ["fault", "add", "--op", op, "--action", action]
    sim(cli, *args, *(["--error", error] if error is not None else []))


def sim_create(
    cli: Cli, profile: str, placement: str, gpu: str = "0", no_ci: bool = False
) -> dict[str, Any]:
    """An instance made behind hamimig's back; returns its Instance object."""
    args = ["create", "--gpu", gpu, "--profile", profile, "--placement", placement]
    inst: dict[str, Any] = sim(cli, *args, *(["--no-ci"] if no_ci else []))["instance"]
    return inst


def fail_destroys(cli: Cli) -> None:
    """Every CI destroy fails with IN_USE until `sim fault clear`: a process that started
    after hamimig found the instance idle (busy instances are never destroyed at all)."""
    fail = ("--op", "nvmlComputeInstanceDestroy", "--error", "IN_USE", "--times", "1000")
    sim(cli, "fault", "add", *fail)


# ---------------------------------------------------------------------------------------------
# What `list` shows


def instances(cli: Cli) -> list[dict[str, Any]]:
    """Every instance `list` shows (which must succeed)."""
    found: list[dict[str, Any]] = ok(cli.json("list"))["instances"]
    return found


def state_of(cli: Cli, mig: str) -> str:
    """The state `list` shows for `mig`, which it must show exactly once."""
    matches = [i["state"] for i in instances(cli) if i["migUUID"] == mig]
    assert len(matches) == 1, matches
    found: str = matches[0]
    return found


def owners_running(cli: Cli) -> str:
    """A fresh pod list (its path, for `--pods`) in which the owner of every Active instance
    runs and no annotation claims anything: what `reconcile` needs to retry destroying an Error
    instance that is still complete, without releasing anyone."""
    from tests.support.pods import kube_pod, write_pod_list

    owners = sorted(
        {
            f"{i['owner']['namespace']}/{i['owner']['name']}"
            for i in instances(cli)
            if i["state"] == "Active" and i["owner"]
        }
    )
    path = cli.state_dir.parent / f"running-{len(list(cli.state_dir.parent.glob('running-*')))}"
    return write_pod_list(path.with_suffix(".json"), *(kube_pod(key) for key in owners))
