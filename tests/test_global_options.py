"""Global options anywhere, as kubectl takes its flags: `--sim`, `--state-dir`, `--cdi-dir`,
`--config`, `--node` and `-o/--output` before or after the command name, on sub-subcommands
too; given twice, the last wins; a command's own option values and whatever follows `--` are
never taken for them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hamimig.cli.app import app, command
from hamimig.cli.context import GLOBAL_OPTIONS
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


def test_values_and_the_end_of_options_stay_where_they_are(cli: Cli) -> None:
    """`-o` as the value of a command's own option, and after `--`, is never the output option."""
    ran = run(cli, "allocate", "--pod", "-o", "--gpu", "0", "--profile", "1g.10gb", *cli.globals())
    assert (ran.exit_code, ran.stdout) == (2, "")
    assert "invalid pod '-o'" in ran.stderr
    for word in ("-o", "-o=json"):
        ran = run(cli, "show", *cli.globals(), "--", word)
        assert ran.exit_code in (2, 6) and ran.stdout == "", ran.stdout  # a one-line error
        assert f"'{word}'" in ran.stderr or f" {word} " in ran.stderr, ran.stderr


def test_the_environment_never_overrides_an_option_given_before_the_command(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command also takes the global options, whose environment variables it reads too:
    only a value given on its own command line may replace the one given before its name."""
    monkeypatch.setenv("HAMIMIG_OUTPUT", "yaml")
    monkeypatch.setenv("HAMIMIG_STATE_DIR", str(cli.state_dir.parent / "elsewhere"))
    ran = run(cli, "-o", "json", *cli.globals(), "sim", "show")
    assert json.loads(ran.stdout)["kind"] == "SimNode"
    ran = run(cli, "-o", "json", *cli.globals(), "config", "show")
    settings = {s["key"]: s for s in json.loads(ran.stdout)["settings"]}
    assert settings["stateDir"]["source"] == "option --state-dir"
    assert settings["stateDir"]["value"] == str(cli.state_dir)
    ran = run(cli, "config", "show", *cli.globals(), "-o", "json")
    assert json.loads(ran.stdout)["kind"] == "Config"
    ran = run(cli, "config", "show", *cli.globals())
    assert ran.stdout.startswith("kind: Config")  # not given on the line: the environment's


def _paths(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, cmd)]
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        found += _paths(sub, (*path, name))
    return found


def test_every_commands_help_lists_the_global_options(cli: Cli) -> None:
    for path, _ in _paths(command()):
        ran = run(cli, *path, "--help")
        assert ran.exit_code == 0, path
        for flag in ("--state-dir PATH", "--cdi-dir PATH", "--config PATH", "--sim PATH"):
            assert flag in ran.stdout, (path, flag)
        assert "--node NAME" in ran.stdout and "-o, --output FORMAT" in ran.stdout, path


def test_no_command_has_an_option_named_like_a_global_one() -> None:
    """Each command takes the global options as the root declares them, once each, and has no
    option of its own that a global one would shadow."""
    root = command()
    declared = {p.name: p for p in root.params if p.name in GLOBAL_OPTIONS}
    names = {o for p in declared.values() for o in p.opts}
    assert names == {"--sim", "--state-dir", "--cdi-dir", "--config", "--node", "-o", "--output"}
    paths = _paths(root)[1:]
    for path, sub in paths:
        shared = [p for p in sub.params if p.name in GLOBAL_OPTIONS]
        assert [p.name for p in shared] == list(GLOBAL_OPTIONS), path
        assert all(p.opts == declared[p.name].opts for p in shared), path
        own = {o for p in sub.params if p.param_type_name == "option" for o in p.opts}
        assert not (own - names) & names, path
        assert len([p for p in sub.params if set(p.opts) & names]) == len(GLOBAL_OPTIONS), path
    assert len(paths) > 20


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
