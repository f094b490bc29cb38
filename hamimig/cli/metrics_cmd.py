"""`metrics`: Prometheus text format for node-exporter's textfile collector, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hamimig.cli.context import execute
from hamimig.errors import PathUnusable

if TYPE_CHECKING:
    from hamimig.engine.node import Node
    from hamimig.engine.results import Result


def metrics(
    ctx: typer.Context,
    textfile: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help=(
                "Replace PATH atomically (mode 0644) instead of printing; for node-exporter's "
                "textfile collector PATH is <--collector.textfile.directory>/hamimig.prom."
            ),
        ),
    ] = None,
) -> None:
    """Prometheus metrics, for node-exporter's textfile collector.

    Instances: hamimig_mig_instance_info (HAMi's labels plus state; it joins HAMi's own
    hami_node_gpu_mig_instance_info on mig_uuid), hamimig_mig_instances per GPU and state,
    hamimig_idle_instance_age_seconds per Idle instance. Counters kept in the state directory:
    hamimig_mig_creations_total, _reuses_total, _reclaims_total, hamimig_mig_failures_total{op},
    hamimig_events_write_failures_total. Health: hamimig_pending_intents,
    hamimig_pending_intent_max_age_seconds, hamimig_cdi_removal_queue_length,
    hamimig_unreadable_records, hamimig_last_reconcile_timestamp_seconds (0 = never),
    hamimig_doctor_failed_checks and hamimig_doctor_warned_checks (doctor's report, without
    pods). Every family has its HELP and TYPE and, but for the per-instance ones, a sample
    (0 when there is nothing). Labels are HAMi's: node on every series (--node or NODE_NAME;
    the hostname when neither is set), device_uuid and device_index for a GPU. Takes no lock;
    like doctor, writes only its temp file probing the CDI directory."""
    from hamimig.reports import metrics as metrics_report

    def action(node: Node) -> Result:
        try:
            return metrics_report.export(node, textfile)
        except PathUnusable as err:
            raise err.for_option("--textfile") from None

    execute(ctx, action)
