"""The CLI owns its flags: choices of the Enum options in help, completions and the man page;
each conflicting combination refused by the CLI before anything is read or changed; the layers
below the CLI never name a flag (they name the setting, and the CLI says which flag sets it)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from docgen import generate
from hamimig.cli.app import app
from hamimig.sim.models import MODELS
from hamimig.sim.nvml import WRITES, SimNvml
from hamimig.sim.ops import SIMULATED_NVML, FaultAction
from hamimig.sim.state import SimStore
from hamimig.vocabulary import FileOpName, State
from tests.support.cli import Cli, Ran, tab
from tests.support.files import tree

ROOT = Path(__file__).resolve().parent.parent

CHOICES: dict[tuple[str, ...], tuple[str, list[str]]] = {
    (): ("--output", ["table", "wide", "json", "yaml", "name"]),
    ("list",): ("--state", [s.value for s in State]),
    ("sim", "fault", "add"): ("--action", [a.value for a in FaultAction]),
    ("sim", "init"): ("--model", list(MODELS)),
}
OPS = [*SIMULATED_NVML, *(op.value for op in FileOpName)]


def one_line_usage_error(ran: Ran, *needles: str) -> None:
    assert ran.exit_code == 2, (ran.stdout, ran.stderr)
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("hamimig: error: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# --- choices --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", list(CHOICES), ids=lambda p: " ".join(p) or "hamimig")
def test_help_lists_the_choices(cli: Cli, path: tuple[str, ...]) -> None:
    flag, values = CHOICES[path]
    ran = cli(*path, "--help")
    assert ran.exit_code == 0
    text = " ".join(ran.stdout.split())
    line = next(x for x in ran.stdout.splitlines() if flag in x)
    for value in values:
        assert value in text or value.lower() in line.lower(), (flag, value)


def test_fault_add_help_lists_every_op(cli: Cli) -> None:
    ran = cli("sim", "fault", "add", "--help")
    words = set(re.findall(r"\w+(?:\.\w+)?", ran.stdout))
    assert set(OPS) <= words


def test_completion_and_man_page_offer_every_choice() -> None:
    expected = {flag: values for flag, values in CHOICES.values()} | {"--op": OPS}
    commands = {flag: path for path, (flag, _) in CHOICES.items()} | {
        "--op": ("sim", "fault", "add")
    }
    for flag, values in expected.items():
        for shell in ("bash", "zsh", "fish"):
            line = " ".join(("hamimig", *commands[flag], flag, ""))
            assert tab(line, shell) == values, (shell, flag)
    man = " ".join(generate(app)["man/hamimig.1"].replace("\\-", "-").split())
    for flag, values in expected.items():
        listed = "One of: " + ", ".join(values) + "." in man or ", ".join(values) + "." in man
        assert listed, flag


def test_the_simulators_functions_are_the_op_choices() -> None:
    implemented = {
        f for f in vars(SimNvml).values() if getattr(f, "__name__", "").startswith("nvml")
    }
    names = {f.__name__ for f in implemented}
    assert set(SIMULATED_NVML) == names
    assert names >= WRITES


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["-o", "xml", "list"], "'--output'"),
        (["list", "--state", "Sleeping"], "'--state'"),
        (["sim", "fault", "add", "--op", "nvmlNoSuchCall"], "'--op'"),
        (["sim", "fault", "add", "--op", "record.delete"], "'--op'"),
        (["sim", "fault", "add", "--op", "cdi.write", "--action", "explode"], "'--action'"),
        (["sim", "init", "--model", "H300"], "'--model'"),
    ],
)
def test_a_value_outside_the_choices_is_one_usage_line(
    cli: Cli, sim_path: Path, args: list[str], flag: str
) -> None:
    before = sim_path.read_bytes()
    one_line_usage_error(cli(*args), flag, "is not one of")
    assert sim_path.read_bytes() == before
    if args[0] != "-o":
        ran = cli.json(*args)
        assert ran.exit_code == 2
        doc = json.loads(ran.stdout)
        assert (doc["kind"], doc["error"]["code"]) == ("Error", "usage")
        assert flag in doc["error"]["message"]


def test_state_is_matched_in_any_case(cli: Cli) -> None:
    assert (
        cli("sim", "create", "--gpu", "0", "--profile", "1g.10gb", "--placement", "0").exit_code
        == 0
    )
    for spelled in ("Unmanaged", "unmanaged", "UNMANAGED"):
        listed = cli.json("list", "--state", spelled).json()["instances"]
        assert [i["state"] for i in listed] == ["Unmanaged"], spelled
    assert cli.json("list", "--state", "idle").json()["instances"] == []


def test_each_choice_works(cli: Cli, tmp_path: Path) -> None:
    for model in MODELS:
        node = Cli(tmp_path / model / "node.json", tmp_path / "state", tmp_path / "cdi")
        ran = node.json("sim", "init", "--model", model)
        assert ran.exit_code == 0, ran.stdout
    for action in FaultAction:
        ran = cli.json("sim", "fault", "add", "--op", "cdi.write", "--action", action.value)
        assert ran.exit_code == 0, ran.stdout
    shown = cli.json("sim", "show").json()
    assert [f["action"] for f in shown["faults"]] == [a.value for a in FaultAction]
    for fmt in ("table", "json", "yaml"):
        assert cli("-o", fmt, "profiles").exit_code == 0


# --- conflicting combinations ----------------------------------------------------------------


CONFLICTS: list[tuple[list[str], list[str]]] = [
    (["release"], ["--pod", "--mig-uuid"]),
    (["release", "--pod", "ns/a", "--mig-uuid", "MIG-x"], ["--pod", "--mig-uuid"]),
    (["reclaim"], ["--mig-uuid", "--gpu"]),
    (["reclaim", "--mig-uuid", "MIG-x", "--gpu", "0"], ["--mig-uuid", "--gpu"]),
    (["reclaim", "--mig-uuid", "MIG-x", "--all-idle"], ["--mig-uuid", "--all-idle"]),
    (["reclaim", "--mig-uuid", "MIG-x", "--placement", "0"], ["--mig-uuid", "--placement"]),
    (["reclaim", "--gpu", "0"], ["--placement", "--all-idle"]),
    (["reclaim", "--gpu", "0", "--placement", "0", "--all-idle"], ["--placement", "--all-idle"]),
    (["reclaim", "--all-idle"], ["--mig-uuid", "--gpu"]),
    (["recover"], ["--pods", "--kube", "--assume-no-pods"]),
    (["recover", "--pods", "p.json", "--assume-no-pods"], ["only one pod source"]),
    (["recover", "--kube", "--assume-no-pods"], ["only one pod source"]),
    (["recover", "--pods", ""], ["--pods needs a file name"]),
    (["recover", "--kube"], ["--kube needs", "--node"]),
    (["adopt", "--exclusive-owner"], ["--pods", "--kube", "--assume-no-pods"]),
    (["adopt", "--assume-no-pods", "--kube", "--exclusive-owner"], ["only one pod source"]),
    (["adopt", "--assume-no-pods"], ["--exclusive-owner"]),
    (["reconcile", "--pods", "p.json", "--kube"], ["only one pod source"]),
    (["reconcile", "--kube"], ["--kube needs", "--node"]),
    (["doctor", "--pods", "p.json", "--kube"], ["only one pod source"]),
    (["forget"], ["MIG_UUID", "--intent"]),
    (["forget", "MIG-x", "--intent", "abc"], ["MIG_UUID", "--intent"]),
    (["allocate", "--pod", "ns", "--gpu", "0", "--profile", "1g.10gb"], ["NAMESPACE/NAME"]),
    (
        ["allocate", "--pod", "ns/a", "--gpu", "0", "--profile", "1g.10gb", "--device-index", "-1"],
        ["--device-index"],
    ),
    (["sim", "fault", "add", "--op", "cdi.write", "--times", "0"], ["--times"]),
    (["sim", "fault", "add", "--op", "cdi.write", "--skip", "-1"], ["--skip"]),
    (["sim", "init", "--model", "H100-SXM5-80GB", "--count", "0"], ["--count"]),
    (["sim", "fault", "add", "--op", "cdi.write", "--error", ""], ["--error"]),
    (["sim", "busy", "--mig-uuid", ""], ["--mig-uuid"]),
]


@pytest.mark.parametrize(("args", "needles"), CONFLICTS, ids=lambda a: " ".join(a))
def test_a_conflicting_combination_is_refused_before_anything_changes(
    cli: Cli, sim_path: Path, args: list[str], needles: list[str]
) -> None:
    cli("reclaim", "--gpu", "0", "--all-idle")  # the state directory exists, empty
    before = tree(cli.state_dir, cli.cdi_dir, sim_path.parent)
    one_line_usage_error(cli(*args), *needles)
    ran = cli.json(*args)
    assert ran.exit_code == 2
    assert json.loads(ran.stdout)["error"]["code"] == "usage"
    assert tree(cli.state_dir, cli.cdi_dir, sim_path.parent) == before


def test_a_wrong_node_name_is_named_by_the_cli(cli: Cli, tmp_path: Path) -> None:
    """Below the CLI the pod source says "the node name is wrong"; the CLI names the flag."""
    made = cli.json("allocate", "--pod", "ns/a", "--gpu", "0", "--profile", "1g.10gb").json()
    inst = made["instance"]
    claim = [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": inst["gpuUUID"],
            "profile": "1g.10gb",
            "placement": inst["placement"],
            "migUUID": inst["migUUID"],
            "gpuInstanceID": inst["gpuInstanceID"],
            "computeInstanceID": inst["computeInstanceID"],
        }
    ]
    pod: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {
            "namespace": "ns",
            "name": "a",
            "annotations": {"hami.io/vgpu-mig-allocations": json.dumps(claim)},
        },
        "spec": {"nodeName": "other-node"},
        "status": {"phase": "Running"},
    }
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "PodList", "items": [pod]}), encoding="utf-8")
    ran = cli("--node", "this-node", "recover", "--pods", str(pods))
    assert ran.exit_code == 5, ran.stderr
    assert "the node name is wrong" in ran.stderr
    assert ran.stderr.rstrip().endswith("(node name: --node NAME or NODE_NAME)")


# --- no flags below the CLI ------------------------------------------------------------------

_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
_REMEDY = re.compile(r"'hamimig [^']*'")  # a whole command to run next may name its flags


def _raised_texts(tree: ast.Module) -> list[tuple[int, str]]:
    constants = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        parts: list[str] = []
        # A command line built for the operator to paste (`Node.pasteable`) names its flags.
        pasted = {
            id(c)
            for call in ast.walk(node.exc)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "pasteable"
            for c in ast.walk(call)
        }
        for inner in ast.walk(node.exc):
            if id(inner) in pasted:
                continue
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                parts.append(inner.value)
            elif isinstance(inner, ast.Name) and inner.id in constants:
                parts += [
                    c.value
                    for c in ast.walk(constants[inner.id])
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                ]
        found.append((node.lineno, "".join(parts)))
    return found


def test_no_layer_below_the_cli_names_a_flag_in_an_error() -> None:
    offenders = []
    for layer in ("engine", "pods", "store", "hw", "sim"):
        for path in sorted((ROOT / "hamimig" / layer).glob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for line, text in _raised_texts(tree):
                if _FLAG.search(_REMEDY.sub("", text)):
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    for path in (ROOT / "hamimig" / "config.py", ROOT / "hamimig" / "errors.py"):
        for line, text in _raised_texts(ast.parse(path.read_text(encoding="utf-8"))):
            if _FLAG.search(_REMEDY.sub("", text)):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert offenders == []


def test_the_flag_check_finds_a_flag() -> None:
    tree = ast.parse(
        'X = "give --pods FILE"\ndef f():\n    raise E(X)\n    raise E(f"a --kube {1}")\n'
    )
    texts = [text for _, text in _raised_texts(tree)]
    assert [bool(_FLAG.search(t)) for t in texts] == [True, True]
    assert not _FLAG.search(_REMEDY.sub("", "run 'hamimig forget --intent x' first"))
    pasted = ast.parse('def f(node):\n    raise E("a " + node.pasteable("forget --intent x"))\n')
    assert [t for _, t in _raised_texts(pasted)] == ["a "]


# --- found by a red team ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sim", "init"], "Missing option '--model'. Choose from: A100-SXM4-40GB,"),
        (["sim", "fault", "add"], "Missing option '--op'. Choose from: nvmlInit,"),
        (["list", "--gpu", "\u00b2"], "invalid GPU"),
        (["list", "--gpu", "\uff10"], "invalid GPU"),
        (["release", "--mig-uuid", "MIG-x\ny\x1b[31m"], "MIG-x y\\x1b[31m"),
        (["show", "MIG\n\x1b[2J"], "MIG \\x1b[2J"),
        (["reconcile", "--pods", "p.json", "--kube"], "--pods FILE|- or --kube"),
        (["release", "--pod", "ns/a", "--mig-uuid", "MIG-x"], "exclude each other"),
        (["reclaim", "--mig-uuid", "MIG-x", "--gpu", "0"], "exclude each other"),
    ],
)
def test_every_refusal_is_one_line_and_drives_no_terminal(
    cli: Cli, args: list[str], needle: str
) -> None:
    ran = cli(*args)
    assert ran.exit_code in (2, 6), ran.stderr
    one_line_usage_error(Ran(2, ran.stdout, ran.stderr), needle)
    assert "\x1b" not in ran.stderr
    doc = json.loads(cli.json(*args).stdout)
    assert "\n" not in doc["error"]["message"]


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda doc: doc["gpus"][0].update(model="Z100"), "unknown model 'Z100'"),
        (
            lambda doc: doc["faults"].append(
                {
                    "op": "cdi.write",
                    "error": "BOGUS",
                    "action": "raise",
                    "times": 1,
                    "skip": 0,
                    "gpu": None,
                }
            ),
            "BOGUS",
        ),
    ],
)
def test_a_hand_edited_node_file_is_malformed_not_a_crash(
    cli: Cli, sim_path: Path, edit: Any, needle: str
) -> None:
    doc = json.loads(sim_path.read_text())
    edit(doc)
    sim_path.write_text(json.dumps(doc))
    ran = cli("list")
    one_line_usage_error(ran, "is malformed", needle)


def test_a_node_file_that_is_not_utf8_is_a_usage_error(cli: Cli, sim_path: Path) -> None:
    sim_path.write_bytes(b'{"kind": "HamimigSimNode", "x": "\xff"}')
    one_line_usage_error(cli("list"), "not UTF-8")


def test_a_failed_write_of_the_node_never_lives_on_in_the_process(
    sim_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node this process keeps must be what the file says: after a write of the node file
    fails, neither a read nor a later write may see the change that was not saved."""
    store = SimStore(sim_path)
    nv = SimNvml(store)
    nv.nvmlInit()
    gpu0, gpu1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
    before = sim_path.read_bytes()
    real_write = Path.write_text

    def failing_write(self: Path, *args: Any, **kwargs: Any) -> int:
        if self.name.startswith(".node.json"):
            monkeypatch.setattr(Path, "write_text", real_write)
            raise OSError(28, "No space left on device")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing_write)
    placement = nv.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = 0, 1
    with pytest.raises(OSError):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(gpu0, 19, placement)
    assert sim_path.read_bytes() == before
    assert nv.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu0, 19) == 7
    nv.nvmlDeviceCreateGpuInstanceWithPlacement(gpu1, 19, placement)
    saved = json.loads(sim_path.read_text())
    assert [len(g["gpuInstances"]) for g in saved["gpus"]] == [0, 1]
    nv.nvmlShutdown()


def test_a_simulated_node_in_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "absent" / "node.json", tmp_path / "state", tmp_path / "cdi")
    one_line_usage_error(cli("list"), "no simulated node at", "sim init")
    assert not (tmp_path / "absent").exists()


def test_shared_options_are_declared_once() -> None:
    """`--pods`, `--kube`, `--assume-no-pods`, `--dry-run`, `--lock-timeout` and the optional
    `--gpu` filter are declared in `cli/options.py` only; the commands use those declarations."""
    declared: dict[str, list[str]] = {}
    for path in sorted((ROOT / "hamimig" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Option":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        declared.setdefault(arg.value, []).append(path.name)
    for flag in ("--pods", "--kube", "--assume-no-pods", "--dry-run", "--lock-timeout"):
        assert declared.get(flag) == ["options.py"], (flag, declared.get(flag))
    assert set(declared["--gpu"]) == {"options.py"}


@pytest.mark.parametrize(
    "fields",
    [{}, {"pods_file": "p.json", "kube": True}, {"kube": True, "assume_no_pods": True}],
)
def test_a_pod_source_names_exactly_one_source(fields: dict[str, Any]) -> None:
    """An engine caller cannot build a source that names nothing (which would read as "no pod
    holds anything") or two at once."""
    from hamimig.engine.podsource import PodSource
    from hamimig.errors import UsageError

    with pytest.raises(UsageError, match="exactly one"):
        PodSource(**fields)
