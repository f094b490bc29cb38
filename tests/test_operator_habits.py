"""What an operator used to nvidia-smi and kubectl expects: a MIG mode change waiting for the next
GPU reset is visible where instances are listed, planned and counted; `-o=json` and `-o name`
work as kubectl's do; `profiles` counts free and total instances per profile as `nvidia-smi mig
-lgip` does; and the messages of a refusal name the file, field or list that is wrong and what
to do about it."""

from __future__ import annotations

import pytest

from tests.support.cli import Cli, allocated, fault, idle, instances, ok, refused, sim, sim_create
from tests.support.pods import PodsFile, entry, kube_pod

# ---------------------------------------------------------------------------------------------
# A pending MIG mode change


def test_list_shows_the_mig_mode_after_the_next_reset(cli: Cli) -> None:
    sim(cli, "mig-mode", "--gpu", "0", "--disable", "--pending")
    sim(cli, "mig-mode", "--gpu", "1", "--disable")
    sim(cli, "mig-mode", "--gpu", "1", "--enable", "--pending")
    gpus = ok(cli.json("list"))["gpus"]
    assert [(g["migMode"], g["migModePending"]) for g in gpus] == [
        ("enabled", "disabled"),
        ("disabled", "enabled"),
    ]
    lines = [line for line in cli("list").stdout.splitlines() if line.startswith("GPU ")]
    assert lines[0].endswith("MIG enabled, disabled after the next GPU reset")
    assert lines[1].endswith("MIG disabled, enabled after the next GPU reset")


def test_list_says_nothing_of_a_reset_when_none_is_pending(cli: Cli) -> None:
    gpus = ok(cli.json("list"))["gpus"]
    assert {(g["migMode"], g["migModePending"]) for g in gpus} == {("enabled", "enabled")}
    assert "reset" not in cli("list").stdout


def test_allocate_warns_that_the_next_reset_disables_mig(cli: Cli) -> None:
    mig = idle(cli, "ns/first", "1g.10gb", "0")
    sim(cli, "mig-mode", "--gpu", "0", "--disable", "--pending")
    for data in (
        ok(cli.json("allocate", "--pod", "ns/reuse", "--gpu", "0", "--profile", "1g.10gb")),
        ok(cli.json("allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb")),
        ok(
            cli.json(
                "allocate", "--pod", "ns/dry", "--gpu", "0", "--profile", "1g.10gb", "--dry-run"
            )
        ),
        ok(cli.json("allocate", "--pod", "ns/new", "--gpu", "0", "--profile", "1g.10gb")),
    ):
        (warning,) = data["warnings"]
        assert warning["file"] == "GPU 0"
        assert "disabled after the next GPU reset" in warning["reason"]
        assert "nvidia-smi -i 0 -mig 1" in warning["reason"]
    assert [i["migUUID"] for i in ok(cli.json("list", "--pod", "ns/reuse"))["instances"]] == [mig]
    assert len(ok(cli.json("list", "--pod", "ns/new"))["instances"]) == 1  # created, then held
    table = cli("allocate", "--pod", "ns/table", "--gpu", "0", "--profile", "1g.10gb")
    assert table.exit_code == 0
    assert "warning: GPU 0: MIG is enabled now but disabled after the next GPU reset" in (
        table.stdout.replace("\n", " ")
    )
    other = ok(cli.json("allocate", "--pod", "ns/other", "--gpu", "1", "--profile", "1g.10gb"))
    assert "warnings" not in other


def test_an_allocation_stands_when_the_mig_mode_cannot_be_read_after_it(cli: Cli) -> None:
    mig = idle(cli, "ns/first", "1g.10gb", "0")
    # The reuse path reads the mode only after handing the instance out.
    fault(cli, "nvmlDeviceGetMigMode", "UNKNOWN")
    data = ok(cli.json("allocate", "--pod", "ns/next", "--gpu", "0", "--profile", "1g.10gb"))
    assert (data["reused"], data["instance"]["migUUID"]) == (True, mig)
    (warning,) = data["warnings"]
    assert warning["file"] == "GPU 0"
    assert warning["reason"].startswith("MIG mode after the next GPU reset not read: NVML call")
    assert [i["owner"]["name"] for i in instances(cli) if i["migUUID"] == mig] == ["next"]


def test_allocate_on_a_gpu_whose_mig_waits_for_a_reset_says_so(cli: Cli) -> None:
    sim(cli, "mig-mode", "--gpu", "1", "--disable")
    sim(cli, "mig-mode", "--gpu", "1", "--enable", "--pending")
    message = refused(
        cli.json("allocate", "--pod", "ns/p", "--gpu", "1", "--profile", "1g.10gb"), 2, "usage"
    )
    assert message == "GPU 1 has MIG disabled (enabled after the next GPU reset)"


def test_profiles_warns_of_a_pending_mig_mode_change(cli: Cli) -> None:
    assert "warnings" not in ok(cli.json("profiles"))
    sim(cli, "mig-mode", "--gpu", "1", "--disable", "--pending")
    (warning,) = ok(cli.json("profiles"))["warnings"]
    assert warning["file"] == "GPU 1"
    assert "disabled after the next GPU reset" in warning["reason"]
    table = cli("profiles")
    assert table.exit_code == 0
    assert "warning: GPU 1: MIG is enabled now but disabled" in table.stdout


# ---------------------------------------------------------------------------------------------
# kubectl's and nvidia-smi's habits


@pytest.mark.parametrize(
    "args",
    [
        ["-o=json", "list"],
        ["list", "-o=json"],
        ["-o=yaml", "list"],
    ],
)
def test_the_equals_form_of_the_short_output_option(cli: Cli, args: list[str]) -> None:
    allocated(cli, "ns/a", "1g.10gb")
    ran = cli(*args)
    assert ran.exit_code == 0, ran.stderr
    if "-o=json" in args:
        assert ran.json()["kind"] == "InstanceList"
    else:
        assert ran.stdout.startswith("kind: InstanceList")


def test_the_equals_form_formats_errors_too(cli: Cli) -> None:
    ran = cli("-o=json", "show", "MIG-00000000")
    assert ran.exit_code == 6
    assert ran.json()["kind"] == "Error"


def test_output_name_prints_one_mig_uuid_a_line(cli: Cli) -> None:
    a = allocated(cli, "ns/a", "1g.10gb", "0")
    b = idle(cli, "ns/b", "1g.10gb", "1")
    orphan = sim_create(cli, "1g.10gb", "2", no_ci=True)
    assert orphan["migUUID"] is None
    listed = cli("-o", "name", "list")
    assert listed.exit_code == 0
    assert sorted(listed.stdout.splitlines()) == sorted([a, b])  # the orphan GI has no line
    assert cli("list", "-o=name").stdout == listed.stdout
    assert cli("-o", "name", "show", a).stdout == f"{a}\n"
    made = cli("-o", "name", "allocate", "--pod", "ns/c", "--gpu", "1", "--profile", "2g.20gb")
    assert made.exit_code == 0
    (c,) = made.stdout.splitlines()
    assert c.startswith("MIG-") and c not in (a, b)
    assert cli("-o", "name", "release", "--pod", "ns/c").stdout == f"{c}\n"
    reclaimed = cli("-o", "name", "reclaim", "--mig-uuid", b, "--assume-no-pods")
    assert (reclaimed.exit_code, reclaimed.stdout) == (0, f"{b}\n")


@pytest.mark.parametrize(
    "args",
    [
        ["doctor"],
        ["profiles"],
        ["metrics"],
        ["sim", "show"],
        ["recover", "--assume-no-pods"],
    ],
)
def test_output_name_is_a_usage_error_where_no_instances_are_printed(
    cli: Cli, args: list[str]
) -> None:
    allocated(cli, "ns/a", "1g.10gb")
    before = ok(cli.json("list"))
    ran = cli("-o", "name", *args)
    assert ran.exit_code == 2, (ran.stdout, ran.stderr)
    assert ran.stdout == ""
    assert f"-o name prints MIG UUIDs, and {args[0]} shows no instances" in ran.stderr
    assert ok(cli.json("list")) == before


def test_output_name_from_the_environment_is_refused_the_same_way(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb")
    monkeypatch.setenv("HAMIMIG_OUTPUT", "name")
    assert cli("list").stdout == f"{mig}\n"
    ran = cli("doctor")
    assert ran.exit_code == 2
    assert "HAMIMIG_OUTPUT=name prints MIG UUIDs, and doctor shows no instances" in ran.stderr


def test_profiles_count_free_and_total_instances(cli: Cli) -> None:
    def counts(gpu: int) -> dict[str, tuple[int, int]]:
        (shown,) = ok(cli.json("profiles", "--gpu", str(gpu)))["gpus"]
        return {p["name"]: (p["freeInstances"], p["maxInstances"]) for p in shown["profiles"]}

    fresh = counts(0)
    assert fresh["1g.10gb"] == (7, 7)
    assert fresh["3g.40gb"] == (2, 2)
    assert fresh["7g.80gb"] == (1, 1)
    allocated(cli, "ns/a", "3g.40gb", "0")
    used = counts(0)
    assert used["3g.40gb"] == (1, 2)
    assert used["1g.10gb"] == (3, 7)  # at 4, 5 and 6 (none starts at the H100's slice 7)
    assert used["7g.80gb"] == (0, 1)
    assert counts(1) == fresh  # the other GPU is untouched
    table = cli("profiles", "--gpu", "0").stdout
    assert "FREE/TOTAL" in table
    assert any("3g.40gb" in line and " 1/2 " in line for line in table.splitlines())
    sim(cli, "mig-mode", "--gpu", "1", "--disable")
    assert counts(1) == {name: (0, total) for name, (_, total) in fresh.items()}


# ---------------------------------------------------------------------------------------------
# Messages that say what to do


def test_metrics_textfile_failure_names_the_target(cli: Cli) -> None:
    target = "/proc/hamimig-test.prom"
    message = refused(cli.json("metrics", "--textfile", target), 4, "hardware")
    assert message.startswith(f"cannot write {target}: ")
    assert ".hamimig-tmp" not in message
    assert "/proc" in message and "renames it over hamimig-test.prom" in message


def test_an_incomplete_pod_list_says_why_and_what_to_do(cli: Cli, pods_file: PodsFile) -> None:
    allocated(cli, "ns/a", "1g.10gb")
    pods = pods_file(kube_pod("ns/a"), kind="PodList", more=True)
    message = refused(cli.json("recover", "--pods", pods), 5, "unverifiable")
    assert f"the pod list from file {pods} is incomplete: its metadata.continue is set" in message
    assert "one page of a paginated list" in message
    assert "give the whole list (kubectl get pods -A -o json joins the pages itself" in message
    assert message.endswith("nothing was changed (pod list: --pods FILE|- or --kube)")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"gpuInstanceID": 9}, "gpuInstanceID is 9 in the annotation, {gi} live"),
        ({"computeInstanceID": 3}, "computeInstanceID is 3 in the annotation, 0 live"),
        ({"placement": {"start": 4, "size": 2}}, "placement is 4:2 in the annotation, 2:2 live"),
        ({"profile": "1g.10gb"}, "profile is 1g.10gb in the annotation, 2g.20gb live"),
        (
            {"profile": "1g.10gb", "placement": {"start": 4, "size": 1}},
            "placement is 4:1 in the annotation, 2:2 live; "
            "profile is 1g.10gb in the annotation, 2g.20gb live",
        ),
        (
            {"migUUID": "MIG-00000000-0000-0000-0000-000000000000"},
            "migUUID MIG-00000000-0000-0000-0000-000000000000 is not live on GPU 0 "
            "(GI {gi} holds CI 0 {mig})",
        ),
    ],
)
def test_the_live_layout_differs_names_the_field_and_both_values(
    cli: Cli, pods_file: PodsFile, change: dict[str, object], why: str
) -> None:
    inst = sim_create(cli, "2g.20gb", "2")
    pods = pods_file(kube_pod("ns/p", [entry(inst, **change)]))
    message = refused(cli.json("recover", "--pods", pods), 5, "unverifiable")
    expected = why.format(gi=inst["gpuInstanceID"], mig=inst["migUUID"])
    assert f"but the live layout differs: {expected}; nothing was changed" in message
