"""Input is validated where it enters: exit 2 with one line, and nothing changed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hamimig.cli.app import app
from hamimig.engine import validate
from hamimig.errors import UsageError
from hamimig.hw.types import parse_placement
from tests.support.cli import Cli, allocate_args
from tests.support.node import sim_state

UID = "0b5c5f0e-3f59-4d5a-9d43-7d1c1c5b2a10"


def gis(sim: Path) -> int:
    return sum(len(gpu["gpuInstances"]) for gpu in sim_state(sim)["gpus"])


def refused(cli: Cli, *args: str, needle: str) -> None:
    """Exit 2, one line naming the problem, and no GI created."""
    before = gis(cli.sim)
    ran = cli(*args)
    assert ran.exit_code == 2, (ran.stdout, ran.stderr)
    assert ran.stdout == ""
    assert len(ran.stderr.strip().splitlines()) == 1
    assert needle in ran.stderr, ran.stderr
    assert gis(cli.sim) == before


@pytest.mark.parametrize(
    ("pod", "needle"),
    [
        ("NS/p", "invalid namespace 'NS'"),
        ("-ns/p", "invalid namespace '-ns'"),
        ("ns-/p", "invalid namespace 'ns-'"),
        ("n_s/p", "invalid namespace 'n_s'"),
        (f"{'a' * 64}/p", "invalid namespace"),
        ("ns/P", "invalid pod name 'P'"),
        ("ns/a..b", "invalid pod name 'a..b'"),
        ("ns/.a", "invalid pod name '.a'"),
        ("ns/a.", "invalid pod name 'a.'"),
        ("ns/a b", "invalid pod name 'a b'"),
        (f"ns/{'a' * 254}", "invalid pod name"),
        ("ns/p/q", "use NAMESPACE/NAME"),
        ("ns/", "use NAMESPACE/NAME"),
    ],
)
def test_allocate_and_release_refuse_pods_kubernetes_never_names(
    cli: Cli, pod: str, needle: str
) -> None:
    refused(cli, *allocate_args(pod, "1g.10gb"), needle=needle)
    refused(cli, "release", "--pod", pod, needle=needle)


@pytest.mark.parametrize(
    "pod", ["ns/p", "a/b", f"{'a' * 63}/x", "kube-system/web-0.a-1", f"ns/{'a.' * 126}a"]
)
def test_pods_kubernetes_names_are_accepted(cli: Cli, pod: str) -> None:
    ran = cli.json(*allocate_args(pod, "1g.10gb"), "--pod-uid", UID.upper())
    assert ran.exit_code == 0, ran.stdout
    assert cli.json("release", "--pod", pod).exit_code == 0


@pytest.mark.parametrize(
    "uid",
    ["", "x", "0b5c5f0e3f594d5a9d437d1c1c5b2a10", f"{UID}0", f"{UID[:-1]}g", f" {UID}"],
)
def test_pod_uid_must_be_rfc_4122_text(cli: Cli, uid: str) -> None:
    refused(cli, *allocate_args("ns/p", "1g.10gb"), "--pod-uid", uid, needle="--pod-uid")


@pytest.mark.parametrize("option", ["--container-index", "--device-index"])
@pytest.mark.parametrize("value", ["-1", str(2**31), str(2**64)])
def test_indexes_are_within_int32(cli: Cli, option: str, value: str) -> None:
    refused(
        cli,
        *allocate_args("ns/p", "1g.10gb"),
        option,
        value,
        needle=f"{option} must be between 0 and",
    )


def test_largest_index_is_accepted(cli: Cli) -> None:
    ran = cli.json(*allocate_args("ns/p", "1g.10gb"), "--container-index", str(2**31 - 1))
    assert ran.exit_code == 0, ran.stdout


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
@pytest.mark.parametrize("command", [["reconcile"], allocate_args("ns/p", "1g.10gb")])
def test_lock_timeout_is_finite_and_not_negative(cli: Cli, value: str, command: list[str]) -> None:
    refused(cli, *command, "--lock-timeout", value, needle="--lock-timeout must be a finite")


@pytest.mark.parametrize("window", ["8", "0:0", "7:2", "0:9", "999"])
def test_reclaim_window_must_lie_on_the_gpu(cli: Cli, window: str) -> None:
    refused(
        cli, "reclaim", "--gpu", "0", "--placement", window, needle="outside the GPU's 8 memory"
    )


@pytest.mark.parametrize("window", ["0", "7", "0:8", "6:2"])
def test_reclaim_windows_on_the_gpu_are_accepted(cli: Cli, window: str) -> None:
    ran = cli.json("reclaim", "--gpu", "0", "--placement", window)
    assert ran.exit_code == 0, ran.stdout
    assert ran.json()["reclaimed"] == []


def test_slice_count_comes_from_the_profiles(cli: Cli) -> None:
    from tests.support.node import open_hw

    hw = open_hw(cli.sim)
    try:
        assert validate.slice_count(hw.profiles(0)) == 8
    finally:
        hw.close()
    assert validate.slice_count([]) == 0


@pytest.mark.parametrize("command", [["show", ""], ["release", "--mig-uuid", ""]])
def test_empty_mig_uuid_is_a_usage_error(cli: Cli, command: list[str]) -> None:
    refused(cli, *command, needle="must not be empty")


def test_empty_mig_uuid_to_reclaim_is_a_usage_error(cli: Cli) -> None:
    refused(cli, "reclaim", "--mig-uuid", "", needle="--mig-uuid must not be empty")


GLOBALS = [
    ("--sim", "HAMIMIG_SIM"),
    ("--state-dir", "HAMIMIG_STATE_DIR"),
    ("--cdi-dir", "HAMIMIG_CDI_DIR"),
    ("--config", "HAMIMIG_CONFIG"),
    ("--node", "NODE_NAME"),
]


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, args, env=env, catch_exceptions=False)


@pytest.mark.parametrize(("flag", "var"), GLOBALS)
def test_empty_global_option_is_a_usage_error(tmp_path: Path, flag: str, var: str) -> None:
    ran = invoke([flag, "", "list"])
    assert ran.exit_code == 2
    assert ran.stderr.strip() == f"hamimig: error: {flag} must not be empty"
    ran = invoke(["-o", "json", flag, "", "list"])
    assert ran.exit_code == 2
    assert ran.stdout.count('"code": "usage"') == 1


@pytest.mark.parametrize(("flag", "var"), GLOBALS)
def test_empty_environment_variable_is_a_usage_error(tmp_path: Path, flag: str, var: str) -> None:
    ran = invoke(["list"], env={var: ""})
    assert ran.exit_code == 2
    assert ran.stderr.strip() == (
        f"hamimig: error: environment variable {var} is set but empty (for {flag})"
    )


def test_empty_environment_variable_is_fine_when_the_option_is_given(cli: Cli) -> None:
    ran = CliRunner().invoke(
        app,
        [*cli.globals(), "--node", "n1", "-o", "json", "list"],
        env={"NODE_NAME": ""},
        catch_exceptions=False,
    )
    assert ran.exit_code == 0, ran.stdout


def test_empty_node_name_in_a_real_process(sim_path: Path, tmp_path: Path) -> None:
    env = dict(os.environ, NODE_NAME="", HAMIMIG_SIM=str(sim_path))
    for args in (["list"], ["--node", "", "list"]):
        ran = subprocess.run(
            [sys.executable, "-m", "hamimig", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert ran.returncode == 2, ran.stderr
        assert "NODE_NAME" in ran.stderr or "--node must not be empty" in ran.stderr


def run_bytes(*args: bytes, output: str | None = None) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, LC_ALL="C.UTF-8")
    env.pop("HAMIMIG_OUTPUT", None)
    if output:
        env["HAMIMIG_OUTPUT"] = output
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"hamimig", *args],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        [b"show", b"\xff"],
        [b"show", b"MIG-\xc3\x28"],
        [b"--state-dir", b"/tmp/\xfe", b"list"],
        [b"allocate", b"--pod", b"ns/\xff", b"--gpu", b"0", b"--profile", b"1g.10gb"],
    ],
)
def test_non_utf8_arguments_are_one_line_not_a_traceback(args: list[bytes]) -> None:
    ran = run_bytes(*args)
    assert ran.returncode == 2
    assert ran.stdout == b""
    err = ran.stderr.decode("utf-8")
    assert len(err.strip().splitlines()) == 1, err
    assert "is not valid UTF-8" in err
    assert "Traceback" not in err


def test_non_utf8_argument_with_json_output() -> None:
    ran = run_bytes(b"show", b"\xff", output="json")
    assert ran.returncode == 2
    assert b'"code": "usage"' in ran.stdout
    assert b"\\\\udcff" in ran.stdout  # the escape, shown as text


def test_error_rendering_survives_surrogates(capsys: pytest.CaptureFixture[str]) -> None:
    from hamimig.cli import render

    render.error(UsageError("bad \udcff name"), "table")
    render.error(UsageError("bad \udcff name"), "yaml")
    out = capsys.readouterr()
    assert out.err == "hamimig: error: bad \\udcff name\n"
    assert "bad \\udcff name" in out.out


@pytest.mark.parametrize(
    ("check", "value"),
    [
        (lambda v: validate.namespace(v), "a" * 64),
        (lambda v: validate.pod_name(v), "a" * 254),
        (lambda v: validate.pod_uid(v, "uid"), "nope"),
        (lambda v: validate.index(v, "i"), -1),
        (lambda v: validate.timeout(v, "t"), float("nan")),
        (lambda v: validate.nonempty(v, "x"), ""),
        (lambda v: validate.reclaim_window(parse_placement(v), 8), "x:1"),
    ],
)
def test_validators_raise_usage_errors(check: Any, value: Any) -> None:
    with pytest.raises(UsageError):
        check(value)


def test_validators_return_what_they_accept() -> None:
    assert validate.namespace("a" * 63) == "a" * 63
    assert validate.pod_name("a" * 253) == "a" * 253
    # Stored as the API server writes UIDs (lowercase), so that records compare equal.
    assert validate.pod_uid(UID.upper(), "uid") == UID.lower()
    assert validate.index(2**31 - 1, "i") == 2**31 - 1
    assert validate.timeout(0.0, "t") == 0.0
    assert validate.reclaim_window(parse_placement(" 2:2 "), 8).end == 4
