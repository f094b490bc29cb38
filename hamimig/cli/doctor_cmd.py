"""`doctor`: what an operator checks before trusting a node, read-only."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from hamimig.cli.context import execute
from hamimig.cli.options import Kube, PodsFile, pod_source
from hamimig.errors import UsageError

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


def doctor(ctx: typer.Context, pods: PodsFile = None, kube: Kube = False) -> None:
    """Health checks: NVML, MIG modes, directories, records, specs.

    It checks NVML, MIG modes, the state and CDI directories, records, specs and queues.
    Each check is ok, warn or fail with a one-line fix. Exits 0 when nothing fails; otherwise 4
    when a failing check is a hardware or I/O failure, else 5 (state that cannot be trusted).
    Changes nothing and takes no lock. The recovery checks run recover's own planner; with
    --pods or --kube they also judge what pods hold, without one those checks are skipped.
    """
    from hamimig.reports import doctor as checks

    def action(node: Node) -> Result:
        try:
            source = pod_source(node, ctx)
        except UsageError:
            if pods is not None or kube:
                raise
            source = None  # the default could not be had: the config check says why
        return checks.run_checks(node, pods=source)

    execute(ctx, action)
