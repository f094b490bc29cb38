"""Eight processes allocating and releasing on one simulated node at once, serialised by the node
lock (docs/design.md "One mutating command").

Each worker process runs `hamimig.cli.app.run` in-process in a loop: worker i allocates a
1g.10gb on GPU i % 2 for pod ns/p<i>-<n> without `--placement`, releases it, five times, then
allocates once more and keeps that one. The node lock serialises them; the test checks that no
command failed, that no MIG UUID was held by two pods at overlapping times, and that the node
ends consistent: no overlap, every record names its live instance, no intent left, a CDI spec for
exactly the recorded instances, and the eight final allocations Active under distinct owners.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hamimig.store.cdi import spec_file_name
from hamimig.store.records import Owner
from hamimig.vocabulary import State
from tests.support.cli import Cli
from tests.support.crash import check_invariants, snapshot

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKERS = 8
ROUNDS = 5
SLOTS_PER_GPU = 7  # 1g.10gb instances an H100 holds

WORKER = r"""
import contextlib
import io
import itertools
import json
import sys
import time
from pathlib import Path

from hamimig.cli.app import run

base = json.loads(sys.argv[1])
worker, rounds = int(sys.argv[2]), int(sys.argv[3])
ready, go = Path(sys.argv[4]), Path(sys.argv[5])


def call(*args):
    out = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out):
        status = run([*base, "-o", "json", *args, "--lock-timeout", "120"])
    end = time.monotonic()
    return {"args": list(args), "status": status, "start": start, "end": end,
            "result": json.loads(out.getvalue())}


ready.touch()
while not go.exists():
    time.sleep(0.002)
log = []
for n in range(rounds + 1):
    pod = f"ns/p{worker}-{n}"
    args = ("--pod", pod, "--gpu", str(worker % 2), "--profile", "1g.10gb", "--assume-no-pods")
    allocated = call("allocate", *args)
    log.append(allocated)
    if allocated["status"] == 0 and n < rounds:
        log.append(call("release", "--pod", pod))
print(json.dumps(log))
"""


def _start_workers(cli: Cli, tmp_path: Path) -> list[subprocess.Popen[str]]:
    go = tmp_path / "go"
    procs = []
    for i in range(WORKERS):
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WORKER,
                    json.dumps(cli.globals()),
                    str(i),
                    str(ROUNDS),
                    str(tmp_path / f"ready-{i}"),
                    str(go),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO_ROOT,
            )
        )
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{i}").exists() for i in range(WORKERS)):
        assert time.monotonic() < deadline, "workers did not start"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    go.touch()  # all eight start their first allocate at the same moment
    return procs


def _collect(procs: list[subprocess.Popen[str]]) -> list[list[dict[str, Any]]]:
    logs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert (proc.returncode, stderr) == (0, ""), stderr
        logs.append(json.loads(stdout))
    return logs


def test_eight_processes_allocate_and_release_on_one_node(cli: Cli, tmp_path: Path) -> None:
    gpu_uuids = [g["uuid"] for g in json.loads(cli.sim.read_text())["gpus"]]
    logs = _collect(_start_workers(cli, tmp_path))

    # The workers really ran at once: commands of different workers overlapped in time.
    spans = sorted((e["start"], e["end"], w) for w, log in enumerate(logs) for e in log)
    overlapping = {
        (a[2], b[2]) for a, b in itertools.combinations(spans, 2) if b[0] < a[1] and a[2] != b[2]
    }
    assert len({w for pair in overlapping for w in pair}) == WORKERS

    # Every command exited 0 or 3 (a full GPU), never 1, 4, 5 or 7. Each GPU has 7 slots and at
    # most 4 pods hold one at a time, so in fact every allocation succeeds.
    statuses = Counter(entry["status"] for log in logs for entry in log)
    assert set(statuses) <= {0, 3}, statuses
    assert statuses == {0: WORKERS * (2 * ROUNDS + 1)}

    holdings: list[tuple[str, str, float, float]] = []  # pod, MIG UUID, held from, held until
    created = Counter[int]()
    for worker, log in enumerate(logs):
        gpu = worker % 2
        allocations = [e for e in log if e["args"][0] == "allocate"]
        releases = [e for e in log if e["args"][0] == "release"]
        assert len(allocations) == ROUNDS + 1 and len(releases) == ROUNDS
        for n, allocated in enumerate(allocations):
            result = allocated["result"]
            assert result["kind"] == "Allocation"
            instance = result["instance"]
            assert (instance["gpuIndex"], instance["gpuUUID"]) == (gpu, gpu_uuids[gpu])
            assert (instance["profile"], instance["placement"]["size"]) == ("1g.10gb", 1)
            assert instance["state"] == "Active"
            assert (instance["owner"]["namespace"], instance["owner"]["name"]) == (
                "ns",
                f"p{worker}-{n}",
            )
            assert result["reused"] != result["created"]
            assert result["reclaimed"] == []  # 7 slots, at most 4 live: nothing to reclaim
            created[gpu] += result["created"]
            until = releases[n]["start"] if n < ROUNDS else float("inf")
            holdings.append((f"ns/p{worker}-{n}", instance["migUUID"], allocated["end"], until))
            if n < ROUNDS:
                released = releases[n]["result"]
                assert released["kind"] == "Release"
                assert [(i["migUUID"], i["state"]) for i in released["released"]] == [
                    (instance["migUUID"], "Idle")
                ]

    # No MIG UUID held by two pods at overlapping times (each pod held its instance at least
    # from the end of its allocate to the start of its release).
    by_uuid: dict[str, list[tuple[str, float, float]]] = {}
    for pod, mig, start, end in holdings:
        by_uuid.setdefault(mig, []).append((pod, start, end))
    for mig, held in by_uuid.items():
        held.sort(key=lambda h: h[1])
        for (pod_a, _, end_a), (pod_b, start_b, _) in itertools.pairwise(held):
            assert end_a <= start_b, f"{mig} held by {pod_a} and {pod_b} at once"

    # Reuse first: a GPU never holds more instances than pods held at once (4), so at most 4
    # creations per GPU, no destruction, and every other allocation was a reuse.
    assert all(created[g] <= WORKERS // 2 for g in (0, 1)), created
    assert len(by_uuid) == created[0] + created[1]

    snap = snapshot(cli)
    check_invariants(snap)
    assert snap.intents == ()
    assert snap.queued == ()
    assert snap.faults == ()
    assert snap.calls.get("nvmlGpuInstanceDestroy", 0) == 0
    assert snap.calls.get("nvmlComputeInstanceDestroy", 0) == 0
    assert snap.calls["nvmlDeviceCreateGpuInstanceWithPlacement"] == sum(created.values())
    for g in (0, 1):
        assert len([gi for gi in snap.gis if gi.gpu_index == g]) == created[g] <= SLOTS_PER_GPU
    assert set(by_uuid) == snap.live_uuids() == set(snap.records)
    assert snap.specs == {spec_file_name(u) for u in snap.records}

    active = {u: r for u, r in snap.records.items() if r.state is State.ACTIVE}
    finals = {pod: mig for pod, mig, _, until in holdings if until == float("inf")}
    assert {r.owner for r in active.values()} == {
        Owner("ns", f"p{i}-{ROUNDS}") for i in range(WORKERS)
    }
    assert {f"{r.owner.namespace}/{r.owner.name}": u for u, r in active.items() if r.owner} == (
        finals
    )
    assert len(set(finals.values())) == WORKERS
    for u, r in active.items():
        assert r.owner is not None
        worker = int(r.owner.name.removeprefix("p").split("-")[0])
        assert r.gpu_uuid == gpu_uuids[worker % 2], u
    idle = [r for r in snap.records.values() if r.state is State.IDLE]
    assert len(idle) == len(snap.records) - WORKERS

    listed = cli.json("list")
    assert listed.exit_code == 0
    states = Counter(i["state"] for i in listed.json()["instances"])
    assert states == Counter({"Active": WORKERS, "Idle": len(idle)})
