"""Global options anywhere, as kubectl takes its flags: `--sim`, `--state-dir`, `--cdi-dir`,
`--config`, `--node` and `-o/--output` before or after the command name, on sub-subcommands
too; given twice, the last wins; a command's own option values and whatever follows `--` are
never taken for them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hamimig.cli.app import app, command, hoist_globals
from tests.support.cli import Cli, allocated
from tests.support.pods import PodsFile, kube_pod


def run(cli: Cli, *args: str) -> Any:
    """`hamimig ARGS` exactly as given: the caller places the global options."""
    return cli.runner.invoke(app, list(args), catch_exceptions=False)


def test_output_after_the_command(cli: Cli) -> None:
    allocated(cli, "ns/a", "1g.10gb")
    ran = run(cli, "list", *cli.globals(), "-o", "json")
    assert ran.exit_code == 0, ran.stdout
    listed = json.loads(ran.stdout)
    assert listed["kind"] == "InstanceList" and len(listed["instances"]) == 1
    mig = listed["instances"][0]["migUUID"]
    shown = run(cli, "show", mig, *cli.globals(), "--output", "yaml")
    assert shown.exit_code == 0 and shown.stdout.startswith("kind: Instance")


@pytest.mark.parametrize(
    "form", [["-o", "json"], ["-ojson"], ["--output=json"], ["--output", "json"]]
)
def test_every_spelling_of_output_after_a_sub_subcommand(cli: Cli, form: list[str]) -> None:
    ran = run(cli, "sim", "fault", "add", "--op", "nvmlInit", *form, *cli.globals())
    assert ran.exit_code == 0, ran.stdout
    assert json.loads(ran.stdout)["kind"] == "SimNode"


def test_given_twice_the_last_wins(cli: Cli) -> None:
    assert run(cli, "-o", "yaml", "list", *cli.globals(), "-o", "json").stdout.startswith("{")
    ran = run(cli, "-o", "json", "list", *cli.globals(), "-o", "yaml")
    assert ran.stdout.startswith("kind: InstanceList")


def test_node_and_pods_after_the_command(cli: Cli, pods_file: PodsFile) -> None:
    pods = pods_file(kube_pod("ns/a", node="n1"))
    ran = run(cli, "recover", "--node", "n1", "--pods", pods, *cli.globals(), "-o", "json")
    assert ran.exit_code == 0, ran.stdout
    assert json.loads(ran.stdout)["kind"] == "Recovery"


def test_a_parse_error_after_the_command_honours_the_output(cli: Cli) -> None:
    ran = run(cli, "list", "--bogus", *cli.globals(), "-o", "json")
    assert ran.exit_code == 2
    error = json.loads(ran.stdout)["error"]
    assert error["code"] == "usage" and "No such option: --bogus" in error["message"]


def test_values_and_the_end_of_options_stay_where_they_are() -> None:
    root = command()
    kept = ["allocate", "--pod", "-o", "--gpu", "0"]
    assert hoist_globals(root, kept) == kept  # `-o` is the value of --pod here
    assert hoist_globals(root, ["show", "--", "-o", "json"]) == ["show", "--", "-o", "json"]
    assert hoist_globals(root, ["list", "--sim", "S", "-o", "json", "--gpu", "1"]) == [
        *("--sim", "S", "-o", "json"),
        *("list", "--gpu", "1"),
    ]
    # Those given before the command stay first, so the one after it is the last one read.
    assert hoist_globals(root, ["-o", "yaml", "list", "-o", "json"]) == [
        *("-o", "yaml", "-o", "json", "list")
    ]


def test_no_command_has_an_option_named_like_a_global_one() -> None:
    root = command()
    names = {o for p in root.params if p.param_type_name == "option" for o in p.opts}
    names -= {"--help", "-h", "--version"}
    assert {"--sim", "--state-dir", "--cdi-dir", "--config", "--node", "-o", "--output"} <= names
    seen = 0

    def walk(cmd: Any, path: str) -> None:
        nonlocal seen
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            seen += 1
            own = {o for p in sub.params if p.param_type_name == "option" for o in p.opts}
            assert not own & names, f"{path} {sub_name}: {sorted(own & names)}"
            walk(sub, f"{path} {sub_name}")

    walk(root, "hamimig")
    assert seen > 20


@pytest.mark.parametrize(
    "args",
    [["list", "-o"], ["release", "--pod", "ns/a", "--node"], ["sim", "show", "--node"]],
)
def test_a_global_option_without_its_value_is_named(cli: Cli, args: list[str]) -> None:
    ran = run(cli, *args)
    assert ran.exit_code == 2
    assert f"option {args[-1]} needs a value" in ran.stderr
    as_json = cli.runner.invoke(app, args, env={"HAMIMIG_OUTPUT": "json"})
    assert json.loads(as_json.stdout)["error"]["message"] == f"option {args[-1]} needs a value"
