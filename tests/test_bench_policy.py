"""The idle policy benchmark (bench/churn.py --policy-sweep) on a short trace: it still runs
against the engine, and what it measures moves the way the policy says (no policy evicts
nothing; a cap of 0 evicts and serves less by reuse; destroy-on-release reuses nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.churn import SWEEP, make_timed_trace, replay_timed, time_cli


def test_a_short_sweep_measures_the_policy(tmp_path: Path) -> None:
    trace = make_timed_trace(120, seed=7, rate=1.0, lifetime=15.0)
    points = {p.label: p for p in SWEEP}
    out = {}
    for label in ("TTL off, no cap (no policy)", "cap 0 / GPU", "destroy-on-release"):
        workdir = tmp_path / str(len(out))
        workdir.mkdir()
        out[label] = replay_timed(trace, points[label], 5.0, workdir)
    none, zero, destroy = out.values()
    assert none.allocations == zero.allocations == destroy.allocations > 0
    assert none.evicted == 0 and zero.evicted > 0
    assert destroy.reused == 0 and destroy.idle_slice_minutes == 0
    assert none.reused > zero.reused
    assert none.idle_slice_minutes > zero.idle_slice_minutes > 0
    assert none.gi_ci_creations < zero.gi_ci_creations <= destroy.gi_ci_creations


def test_the_cli_timing_runs_its_commands(tmp_path: Path) -> None:
    """The bench's CLI timing runs allocate, release and reclaim as an operator would (it once
    stopped at "a pod source is required" when those commands began to require one)."""
    reuse, create = time_cli(1, tmp_path)
    assert reuse > 0 and create > 0


def test_the_startup_bench_runs() -> None:
    """bench/startup.py's allocate once stopped at "a pod source is required" unnoticed."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "bench.startup", "--runs", "1"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "idempotent hamimig allocate" in done.stdout


@pytest.mark.slow
def test_the_recover_bench_runs() -> None:
    """bench/recover.py builds its node with allocate, which needs a pod source since it
    began to require one; that once stopped the bench unnoticed."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "bench.recover", "--pods", "100", "--runs", "1"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recover - help" in done.stdout
