"""A record is verified where its hardware really is (issue 24 item 5): a record whose
placement or parent GPU disagrees with its live instance is unverifiable, never dropped."""

from __future__ import annotations

import json

from tests.support.cli import Cli, allocated, ok, refused
from tests.support.node import gpus
from tests.support.pods import PodsFile
from tests.support.records import record_path
from tests.support.unchanged import Unchanged


def _rewrite(cli: Cli, mig: str, **changes: object) -> None:
    path = record_path(cli, mig)
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _idle_1g(cli: Cli) -> tuple[str, dict[str, object]]:
    mig = allocated(cli, "ns/a", "1g.10gb", "0")
    ok(cli.json("release", "--mig-uuid", mig))
    return mig, json.loads(record_path(cli, mig).read_text())


def test_a_record_with_a_wrong_placement_is_unverifiable_not_dropped(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig, rec = _idle_1g(cli)
    placement = dict(rec["placement"])  # type: ignore[call-overload]
    placement["start"] = 6
    _rewrite(cli, mig, placement=placement)
    frozen = Unchanged(cli)
    message = refused(cli.json("recover", "--pods", pods_file()), 5, "unverifiable")
    assert mig in message
    assert "placement recorded" in message and "but live" in message
    frozen.check()


def test_a_record_with_a_wrong_parent_gpu_is_unverifiable_not_dropped(
    cli: Cli, pods_file: PodsFile
) -> None:
    mig, rec = _idle_1g(cli)
    other = next(g for g in gpus(cli) if g["uuid"] != rec["parentGPUUUID"])["uuid"]
    _rewrite(cli, mig, parentGPUUUID=other)
    frozen = Unchanged(cli)
    message = refused(cli.json("recover", "--pods", pods_file()), 5, "unverifiable")
    assert f"parentGPUUUID recorded {other}" in message
    frozen.check()
