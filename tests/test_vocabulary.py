"""The lifecycle's vocabulary stays one cheap module, and records hold only record states."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import hamimig.vocabulary as vocabulary
from hamimig.store.records import RecordError, decode_record, record_name
from hamimig.vocabulary import RECORD_STATES, ActionKind, State


def test_the_vocabulary_imports_nothing_of_hamimig() -> None:
    tree = ast.parse(Path(vocabulary.__file__).read_text())
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported and all(not name.startswith("hamimig") for name in imported), imported


def test_every_reported_action_kind_is_documented() -> None:
    formats = (Path(__file__).parent.parent / "docs" / "formats.md").read_text()
    reported = [k for k in ActionKind if "-" in k.value and not k.value.startswith("forget")]
    missing = [k.value for k in reported if f"`{k.value}`" not in formats]
    assert not missing


@pytest.mark.parametrize("state", [s for s in State if s not in RECORD_STATES])
def test_a_record_never_holds_a_view_only_state(state: State) -> None:
    uuid = "MIG-00000000-0000-0000-0000-000000000001"
    raw = {
        "version": 1,
        "migUUID": uuid,
        "parentGPUUUID": "GPU-00000000-0000-0000-0000-000000000002",
        "profile": "1g.10gb",
        "placement": {"start": 0, "size": 1},
        "gpuInstanceID": 9,
        "computeInstanceID": 0,
        "hamimig": {"schemaVersion": 1, "state": state.value},
    }
    with pytest.raises(RecordError, match="is not one of Active, Idle, Reclaiming, Error"):
        decode_record(record_name(uuid), json.dumps(raw).encode())
