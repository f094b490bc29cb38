"""The state directory's durable files as tests read them: ownership records by their documented
name (`hami-owned-mig-<sha256 of the MIG UUID>.json`, computed here independently of hamimig),
hamimig's part of a record, the names of records and intents present, and sample values for the
store's own tests."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from hamimig.hw.types import Placement
from hamimig.store.intents import Intent, new_intent_id
from hamimig.store.records import Owner
from tests.support.cli import Cli
from tests.support.files import entries, lifecycle_files

# Well-formed UUIDs no simulated node hands out, for the store's own tests.
MIG = "MIG-11111111-2222-3333-4444-555555555555"
MIG2 = "MIG-66666666-7777-8888-9999-000000000000"
GPU = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def sha(text: str) -> str:
    """The SHA-256 hex digest that record and CDI spec names are built from."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record_path(cli: Cli, mig: str) -> Path:
    return cli.state_dir / f"hami-owned-mig-{sha(mig)}.json"


def record(cli: Cli, mig: str) -> dict[str, Any]:
    """The ownership record of `mig`, as stored."""
    data: dict[str, Any] = json.loads(record_path(cli, mig).read_text())
    return data


def ext(cli: Cli, mig: str) -> dict[str, Any]:
    """hamimig's own part of a record."""
    found: dict[str, Any] = record(cli, mig)["hamimig"]
    return found


def hami_record(cli: Cli, inst: dict[str, Any]) -> Path:
    """Write the ownership record of `inst` (an Instance object) exactly as HAMi writes it: no
    "hamimig" key, compact JSON, mode 0600 in a 0750 state directory."""
    doc = {
        "version": 1,
        "migUUID": inst["migUUID"],
        "parentGPUUUID": inst["gpuUUID"],
        "profile": inst["profile"],
        "placement": inst["placement"],
        "gpuInstanceID": inst["gpuInstanceID"],
        "computeInstanceID": inst["computeInstanceID"],
    }
    cli.state_dir.mkdir(mode=0o750, exist_ok=True)
    path = record_path(cli, inst["migUUID"])
    path.write_text(json.dumps(doc, separators=(",", ":")))
    path.chmod(0o600)
    return path


def state_files(cli: Cli) -> list[str]:
    """Names of the records and intents in the state directory (bookkeeping such as the metrics
    counters and the removal queue aside)."""
    return sorted(n for n in entries(cli.state_dir) if n.startswith(("hami-owned-", "intent-")))


def intent_files(cli: Cli) -> list[str]:
    """Names of every file in the state directory but the records, the node lock and the metrics
    counters: the intents, and anything else that should not be there (a temporary file, the
    removal queue), so that a test saying which intents are left also says nothing else is."""
    return [n for n in lifecycle_files(cli.state_dir) if not n.startswith("hami-owned-")]


def an_intent(created_at: str = "2024-05-01T10:00:00Z", **changes: Any) -> Intent:
    """A complete allocate intent (a new ID each time), with `changes` applied."""
    intent = Intent(
        id=new_intent_id(),
        op="allocate",
        gpu_uuid=GPU,
        gpu_index=1,
        profile="2g.20gb",
        profile_id=14,
        placement=Placement(4, 2),
        owner=Owner("ns", "pod", "uid", 0, 1),
        created_at=created_at,
    )
    return dataclasses.replace(intent, **changes)
