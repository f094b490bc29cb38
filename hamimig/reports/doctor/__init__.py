"""`doctor`: what an operator checks before trusting a node, as a list of check results.

Nothing here raises on a broken node: what fails is a failing check, so `doctor -o json` always
prints the one object to attach to a bug report. The checks and exit codes: docs/formats.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from hamimig.config import Config
from hamimig.engine.facts import Durable, load_durable
from hamimig.engine.node import Node
from hamimig.engine.podsource import PodSource
from hamimig.engine.safety import decision_file_problems, default_cdi_dirs
from hamimig.errors import HamimigError, why
from hamimig.reports.doctor.cdi import check_cdi
from hamimig.reports.doctor.hardware import check_hardware, check_mig_minors
from hamimig.reports.doctor.recovery import with_recovery
from hamimig.reports.doctor.state import (
    check_counters,
    check_durable,
    check_events,
    check_file_modes,
    check_idle_seen,
    check_state_dir,
)
from hamimig.reports.doctor.verdicts import HARDWARE, fail, guarded, ok
from hamimig.reports.views import Check, DoctorReport


def check_config(node: Node) -> tuple[Config, Check]:
    path = node.config_path
    try:
        config = node.config()
    except HamimigError as err:
        return Config(), fail(
            "config",
            f"{err.message} (the other checks assume the defaults)",
            f"fix {path} as docs/formats.md's Config section describes; until then commands exit 2",
        )
    origin = f"{path} loads" if os.path.exists(path) else f"no config file at {path}: defaults"
    cdi = f"CDI kind {config.cdi_kind}" if config.cdi_enabled else "CDI disabled"
    adopt = "adoption on" if config.adopt_existing else "adoption off"
    return config, ok("config", f"{origin} ({cdi}, {adopt})")


def run_checks(
    node: Node, cdi_dirs: Sequence[Path] | None = None, pods: PodSource | None = None
) -> DoctorReport:
    """Every check on `node`. `cdi_dirs`: where to look for other specs defining our devices
    (default: /etc/cdi or a simulated node's stand-in, and the node's CDI directory); without
    `pods` the recovery checks of pod-held instances are skipped."""
    dirs = tuple(cdi_dirs) if cdi_dirs is not None else default_cdi_dirs(node)
    config, config_check = check_config(node)
    hw_checks, live = check_hardware(node, config)
    checks = [config_check, *hw_checks]
    checks += guarded("mig-minors", lambda: check_mig_minors(node, live))
    config_file = os.path.realpath(node.config_path)
    for problem in decision_file_problems(node):
        in_state = os.path.dirname(problem.file) == str(node.state_dir)
        if in_state and "has mode" in problem.reason and problem.file != config_file:
            continue  # a state file's loose mode is its `file-mode/NAME` check: one report
        name = f"guarded/{os.path.basename(problem.file)}"
        checks.append(fail(name, problem.reason, problem.fix or "fix its owner and mode"))
    state_checks, state = check_state_dir(node.state_dir)
    checks += state_checks
    durable: Durable | None = None
    if state == "usable":
        stores = (
            node.records,
            node.intents,
            node.queue,
            node.counters,
            node.idle_seen,
            node.events,
        )
        checks += guarded("state-files", lambda: check_file_modes(stores))
        try:
            durable = load_durable(node)
        except (HamimigError, OSError) as exc:
            fix = "run as root; check the state directory's permissions"
            failed = f"cannot load the state directory: {why(exc)}"
            checks.append(fail("records", failed, fix, HARDWARE))
        else:
            checks += check_durable(node, durable)
        checks += guarded("counters", lambda: [check_counters(node.counters)])
        checks += guarded("idle-seen", lambda: [check_idle_seen(node.idle_seen)])
        checks += guarded("events", lambda: [check_events(node.events, node.counters)])
    elif state == "missing":  # nothing recorded yet: every spec of ours is then an orphan
        durable = Durable(records={}, intents=(), removals=(), problems=())
        none = "none (no state directory yet)"
        checks += [ok("records", none), ok("intents", none), ok("cdi-removal-queue", none)]
    checks += check_cdi(node, config, live, durable, dirs)
    checks = with_recovery(checks, node, config, None if live.hw is None else durable, pods)
    return DoctorReport(
        checks=tuple(checks),
        sim=None if node.sim is None else str(node.sim),
        state_dir=str(node.state_dir),
        cdi_dir=str(node.cdi_dir),
    )
