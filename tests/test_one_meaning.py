"""Files that mean one thing: a YAML key given twice is refused wherever hamimig reads YAML (the
config, pod lists, NVIDIA's CDI base spec), JSON keeps the last value as Go's decoder does, and a
record's `version` is an integer, never `1.0`.

Before, PyYAML kept the last of two equal keys without a word: a config saying
`adoptExistingMIGInstances: false` and, further down, `true` turned adoption on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import Cli, allocated, configured, ok, refused, sim_create
from tests.support.pods import ANNOTATION, entry, kube_pod, pod_list
from tests.support.records import ext, record_path, state_files
from tests.support.unchanged import Unchanged

TWICE = (
    "devices:\n"
    "  nvidia:\n"
    "    adoptExistingMIGInstances: false\n"
    "    adoptExistingMIGInstances: true\n"
)


@pytest.fixture(params=["libyaml", "pure"])
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each YAML case runs with libyaml's loader and with PyYAML's pure-Python one."""
    if request.param == "libyaml":
        if not hasattr(yaml, "CSafeLoader"):
            pytest.skip("PyYAML was built without libyaml")
    else:
        monkeypatch.delattr(yaml, "CSafeLoader")
    return str(request.param)


# ---------------------------------------------------------------------------------------------
# The config


def test_config_show_refuses_a_key_given_twice(cli: Cli) -> None:
    node = configured(cli, TWICE)
    message = refused(node.json("config", "show"), 2, "usage")
    assert message == (
        f"{node.config}: duplicate key 'adoptExistingMIGInstances' in devices.nvidia "
        "(lines 3 and 4)"
    )


def test_a_top_level_section_given_twice_is_refused(cli: Cli) -> None:
    node = configured(cli, "cdi:\n  enabled: true\ndevices: {}\ncdi:\n  enabled: false\n")
    message = refused(node.json("config", "show"), 2, "usage")
    assert "duplicate key 'cdi' at the top level (lines 1 and 4)" in message


def test_a_repeated_true_does_not_turn_adoption_on(cli: Cli) -> None:
    pair = sim_create(cli, "1g.10gb", "2")["migUUID"]
    node = configured(cli, TWICE)
    before = Unchanged(node)
    for args in (
        ["recover", "--assume-no-pods", "--adopt"],
        ["adopt", "--exclusive-owner", "--assume-no-pods"],
        ["allocate", "--pod", "ns/p", "--gpu", "0", "--profile", "1g.10gb"],
    ):
        message = refused(node.json(*args), 2, "usage")
        assert "duplicate key 'adoptExistingMIGInstances'" in message, args
        before.check()
    assert state_files(node) == []
    # Said once, the same file adopts: the refusal was the repeated key alone.
    once = configured(cli, TWICE.replace("    adoptExistingMIGInstances: false\n", ""))
    actions = ok(once.json("recover", "--assume-no-pods", "--adopt"))["actions"]
    assert [(a["action"], a["migUUID"]) for a in actions] == [("adopt-idle", pair)]


def test_yaml_merge_keys_are_no_duplicates(cli: Cli) -> None:
    """`<<` merges defaults that the mapping's own keys override, as YAML defines."""
    node = configured(
        cli,
        "x-defaults: &d {enabled: false, annotations: true}\ncdi:\n  <<: *d\n  enabled: true\n",
    )
    message = refused(node.json("config", "show"), 2, "usage")
    assert "unknown key 'x-defaults'" in message  # read past the merge, to the next rule


# ---------------------------------------------------------------------------------------------
# Pod lists


def _with_annotation_twice(text: str, first: str) -> tuple[str, int]:
    """`text` (YAML) with the allocation annotation given once more, as `first`, just before
    itself; returns the text and the 1-based line of the added key."""
    lines = text.splitlines(keepends=True)
    [at] = [i for i, line in enumerate(lines) if line.lstrip().startswith(f"{ANNOTATION}:")]
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines.insert(at, f"{indent}{ANNOTATION}: {first}\n")
    return "".join(lines), at + 1


def test_pod_list_yaml_with_an_annotation_given_twice_is_refused(
    cli: Cli, tmp_path: Path, loader: str
) -> None:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    inst = ok(cli.json("show", mig))
    doc = pod_list(kube_pod("ns/other"), kube_pod("ns/a", [entry(inst)]))
    text, line = _with_annotation_twice(yaml.safe_dump(doc, default_flow_style=False), "'[]'")
    pods = tmp_path / "pods.yaml"
    pods.write_text(text)
    before = Unchanged(cli)
    for args in (["recover", "--pods", str(pods)], ["reconcile", "--pods", str(pods)]):
        message = refused(cli.json(*args), 2, "usage")
        assert message == (
            f"file {pods}: duplicate key '{ANNOTATION}' in items[1].metadata.annotations "
            f"(lines {line} and {line + 1})"
        ), (loader, args)
        before.check()
    assert ext(cli, mig)["state"] == "Active"


def test_pod_list_json_with_a_key_given_twice_keeps_the_last(cli: Cli, tmp_path: Path) -> None:
    """kubectl and HAMi read JSON with Go's decoder, where the last of two equal keys wins;
    hamimig reads the same document the same way. The first value here is not even JSON: were it
    the one read, recover would refuse the pod's annotation (exit 5)."""
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    inst = ok(cli.json("show", mig))
    text = json.dumps(pod_list(kube_pod("ns/a", [entry(inst)])), indent=4)
    key = json.dumps(ANNOTATION)
    assert text.count(f"{key}: ") == 1
    text = text.replace(f"{key}: ", f'{key}: "not json",\n{" " * 16}{key}: ')
    assert len(re.findall(re.escape(key), text)) == 2
    pods = tmp_path / "pods.json"
    pods.write_text(text)
    actions = ok(cli.json("recover", "--pods", str(pods)))["actions"]
    assert [(a["action"], a["migUUID"]) for a in actions] == [("restore-active", mig)]


# ---------------------------------------------------------------------------------------------
# Records


@pytest.mark.parametrize("version", ["1.0", "true", '"1"'])
def test_record_version_that_is_not_the_integer_1_is_unverifiable(cli: Cli, version: str) -> None:
    """Go's decoder refuses `1.0` for HAMi's `int` field (and `true`, and a string): HAMi would
    not load the record, so hamimig does not act on it either."""
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    path = record_path(cli, mig)
    doc: dict[str, Any] = json.loads(path.read_text())
    path.write_text(json.dumps(doc, indent=2).replace('"version": 1,', f'"version": {version},'))
    assert json.loads(path.read_text())["version"] == json.loads(version)
    before = Unchanged(cli)
    message = refused(cli.json("recover", "--assume-no-pods"), 5, "unverifiable")
    assert path.name in message and "version" in message, version
    before.check()
