"""deploy/monitoring/: the alerting rules (a plain rule file and the same groups as a Prometheus
Operator PrometheusRule), their promtool unit tests and the Grafana dashboard. The rules and
every dashboard query are valid PromQL (`promtool check rules`), the unit tests pass and make
every alert both fire and stay silent, every metric they use is one hamimig or node-exporter
exports, and each hamimig command a description tells an operator to run is one hamimig accepts.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from hamimig.cli.app import app
from tests.support.cli import Cli, allocated, idle

ROOT = Path(__file__).resolve().parent.parent
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "hamimig-rules.yaml"
PROMETHEUS_RULE = MONITORING / "hamimig-prometheusrule.yaml"
RULE_TESTS = MONITORING / "tests" / "hamimig-rules.test.yaml"
DASHBOARD = MONITORING / "hamimig-dashboard.json"

METRICS = {
    # hamimig metrics --textfile
    "hamimig_mig_instance_info",
    "hamimig_mig_instances",
    "hamimig_mig_creations_total",
    "hamimig_mig_reuses_total",
    "hamimig_mig_reclaims_total",
    "hamimig_mig_failures_total",
    "hamimig_events_write_failures_total",
    "hamimig_pending_intents",
    "hamimig_pending_intent_max_age_seconds",
    "hamimig_cdi_removal_queue_length",
    "hamimig_unreadable_records",
    "hamimig_last_reconcile_timestamp_seconds",
    "hamimig_doctor_failed_checks",
    "hamimig_doctor_warned_checks",
    "hamimig_idle_instance_age_seconds",
    # node-exporter's textfile collector
    "node_textfile_mtime_seconds",
    "node_textfile_scrape_error",
}
"""Every metric family the rules and the dashboard may query."""

ALERTS = {
    "HamimigErrorInstances",
    "HamimigPendingIntentStuck",
    "HamimigCdiRemovalQueueStuck",
    "HamimigUnreadableRecords",
    "HamimigDoctorFailedChecks",
    "HamimigDoctorWarnings",
    "HamimigReconcileNotRunning",
    "HamimigTextfileStale",
    "HamimigTextfileScrapeError",
    "HamimigEventJournalWriteFailures",
}
SEVERITIES = {"critical", "warning", "info"}

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian/Ubuntu: apt-get install -y prometheus; .ci/run does)",
)

# Grafana's variables, replaced by concrete values before promtool sees a dashboard query.
VARIABLES = {
    "instance": "gpu-node-1:9100",
    "window": "1h",
    "__rate_interval": "2m",
    "__interval": "1m",
    "__range": "6h",
    "datasource": "prometheus",
}


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text(encoding="utf-8")))


def panels() -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included, rows themselves left out."""
    out = []
    for panel in dashboard()["panels"]:
        out += panel.get("panels", [])
        if panel["type"] != "row":
            out.append(panel)
    return out


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, expr) of every query target."""
    return [(p["title"], t["expr"]) for p in panels() for t in p.get("targets", [])]


def substitute(expr: str) -> str:
    """A dashboard query with Grafana's variables replaced ($name, ${name}, ${name:format})."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in VARIABLES, f"unknown dashboard variable ${name} in {expr}"
        return VARIABLES[name]

    out = re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", value, expr)
    assert "$" not in out, out
    return out


_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not in a string, a
    label matcher, a range, a grouping list, a number or duration, a function's or aggregation's
    name (followed by `(`) or a keyword."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'", '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    grouping = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"
    text = re.sub(grouping, " ", text)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?(?:ms|[smhdwy])?\b", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if re.match(r"\s*\(", text[match.end() :]) or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def hamimig_commands(text: str) -> list[list[str]]:
    """The hamimig command lines written in backticks in `text`."""
    return [shlex.split(cmd)[1:] for cmd in re.findall(r"`(hamimig [^`]+)`", text)]


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


# --- the rule files ---------------------------------------------------------------------------


def test_the_prometheusrule_carries_exactly_the_rule_files_groups() -> None:
    plain = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    operator = yaml.safe_load(PROMETHEUS_RULE.read_text(encoding="utf-8"))
    assert list(plain) == ["groups"]
    assert operator["spec"] == {"groups": plain["groups"]}
    assert sorted(operator) == ["apiVersion", "kind", "metadata", "spec"]
    assert (operator["apiVersion"], operator["kind"]) == (
        "monitoring.coreos.com/v1",
        "PrometheusRule",
    )
    metadata = operator["metadata"]
    assert metadata["name"] == "hamimig"
    assert metadata["namespace"]
    assert metadata["labels"]["app.kubernetes.io/name"] == "hamimig"
    assert all(isinstance(v, str) for v in metadata["labels"].values())


def test_the_alerts_are_the_ones_operators_are_told_about() -> None:
    assert set(alerts()) == ALERTS
    assert len(alerts()) == len([r for r in rules() if "alert" in r])  # no name twice
    # The alert table of docs/monitoring.md ("Alerts") lists exactly these.
    monitoring = (ROOT / "docs" / "monitoring.md").read_text(encoding="utf-8")
    section = monitoring.split("\n## Alerts\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(Hamimig\w+)` \|", section, flags=re.MULTILINE)
    assert sorted(listed) == sorted(ALERTS)


def seconds(duration: str) -> int:
    """A Prometheus duration as these files write it (`90s`, `10m`, `1h`, `1d`)."""
    match = re.fullmatch(r"(\d+)([smhd])", duration)
    assert match, duration
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def daemonset_env() -> dict[str, str]:
    daemonset = yaml.safe_load((ROOT / "deploy" / "reconcile-daemonset.yaml").read_text())
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


MAX_SCRAPE_INTERVAL = 60
"""The longest node-exporter scrape interval the `for:` durations are sized for (seconds; the
rules' header says so). Prometheus's default is 1m, kube-prometheus-stack's 30s."""

NO_FOR = {"HamimigEventJournalWriteFailures"}
"""Alerts on hamimig's values without a `for:`: any increase in the window is meant to alert."""

OWN_CLOCK = {"HamimigTextfileStale", "HamimigTextfileScrapeError"}
"""Alerts on node-exporter's own values, which a single hamimig write does not set."""


def test_a_single_write_can_never_fire_an_alert_on_hamimigs_values() -> None:
    """A hamimig value stays visible from one write to the next: the loop's sleep, then the next
    pass and metrics write (each bounded by its timeout), plus up to one scrape interval. Every
    `for:` over hamimig's values must be longer, or one odd write would alert."""
    env = daemonset_env()
    interval = int(env["RECONCILE_INTERVAL_SECONDS"])
    visible = (
        interval
        + int(env["RECONCILE_TIMEOUT_SECONDS"])
        + int(env["METRICS_TIMEOUT_SECONDS"])
        + MAX_SCRAPE_INTERVAL
    )
    for name, rule in alerts().items():
        if name in OWN_CLOCK:
            continue
        assert any(m.startswith("hamimig_") for m in metric_names(rule["expr"])), name
        if name in NO_FOR:
            assert "for" not in rule, name
            continue
        assert seconds(rule["for"]) > visible, f"{name}: for {rule['for']} <= {visible} s"
    # A textfile is stale only past what the loop itself may take between two writes.
    stale = re.search(r"\) > (\d+)$", alerts()["HamimigTextfileStale"]["expr"].strip())
    assert stale and int(stale.group(1)) > visible, alerts()["HamimigTextfileStale"]["expr"]
    # The rules say what they assume, and the DaemonSet says where that is written.
    header = RULES.read_text(encoding="utf-8").split("\ngroups:", 1)[0]
    assert f"RECONCILE_INTERVAL_SECONDS={interval}" in header
    for name in ("RECONCILE_TIMEOUT_SECONDS", "METRICS_TIMEOUT_SECONDS"):
        assert f"{name} {env[name]} s" in header, name
    manifest = (ROOT / "deploy" / "reconcile-daemonset.yaml").read_text(encoding="utf-8")
    assert "deploy/monitoring/hamimig-rules.yaml" in manifest


@pytest.mark.parametrize("name", sorted(ALERTS))
def test_every_alert_has_a_severity_and_says_where_and_what_to_run(name: str) -> None:
    rule = alerts()[name]
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert sorted(annotations) == ["description", "summary"]
    for text in annotations.values():
        assert "{{ $labels.instance }}" in text  # which node
    assert hamimig_commands(annotations["description"]), "names no hamimig command to run"
    # One alert per node: aggregated by the scrape target's labels.
    assert "by (instance, job)" in rule["expr"]


def test_every_command_the_alerts_and_panels_name_is_a_valid_hamimig_invocation() -> None:
    texts = [r["annotations"]["description"] for r in alerts().values()]
    texts += [p.get("description", "") for p in panels()]
    commands = sorted({tuple(c) for text in texts for c in hamimig_commands(text)})
    assert len(commands) >= 6
    runner = CliRunner()
    for argv in commands:
        # Click parses every option before it honours --help: an unknown one would exit 2.
        ran = runner.invoke(app, [*argv, "--help"], catch_exceptions=False)
        assert ran.exit_code == 0, f"hamimig {' '.join(argv)}: {ran.stdout}"


@needs_promtool
def test_promtool_check_rules_accepts_the_rule_file() -> None:
    done = promtool("check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


@needs_promtool
def test_the_promtool_unit_tests_pass() -> None:
    done = promtool("test", "rules", RULE_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_unit_tests_make_every_alert_fire_and_stay_silent() -> None:
    doc = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    assert [(RULE_TESTS.parent / f).resolve() for f in doc["rule_files"]] == [RULES]
    firing: set[str] = set()
    silent: set[str] = set()
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            name = case["alertname"]
            assert name in ALERTS, f"the unit tests name an unknown alert {name}"
            expected = case.get("exp_alerts") or []
            (firing if expected else silent).add(name)
            for alert in expected:  # labels and annotations, as promtool compares them
                assert alert["exp_labels"]["severity"] == alerts()[name]["labels"]["severity"]
                assert sorted(alert["exp_annotations"]) == ["description", "summary"]
    assert sorted(ALERTS - firing) == [], "alerts never firing in the unit tests"
    assert sorted(ALERTS - silent) == [], "alerts never checked silent in the unit tests"


def test_the_rules_use_only_the_exported_metrics() -> None:
    used: set[str] = set()
    for rule in rules():
        names = metric_names(rule["expr"])
        assert names, rule["expr"]
        assert names <= METRICS, f"{rule.get('alert')}: unknown metrics {names - METRICS}"
        used |= names
    assert "node_textfile_mtime_seconds" in used


def test_the_metric_name_check_sees_what_a_query_selects() -> None:
    expr = (
        'sum by (instance, job) (increase(foo_total{state="Error", x=~"a|b"}[30m] offset 5m)) '
        "/ on (instance) group_left (node) max(bar) > 1.5e3 unless baz_seconds and bool "
        "time() - qux:rate5m"
    )
    assert metric_names(expr) == {"foo_total", "bar", "baz_seconds", "qux:rate5m"}
    assert substitute('{a=~"$instance"}[${window}] [$__rate_interval]') == (
        '{a=~"gpu-node-1:9100"}[1h] [2m]'
    )


# --- the dashboard ----------------------------------------------------------------------------


def test_the_dashboard_loads_with_its_datasource_and_node_variables() -> None:
    board = dashboard()
    assert 36 <= board["schemaVersion"] <= 41
    assert board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    node = variables["instance"]
    assert node["type"] == "query"
    assert node["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    query = node["query"]["query"] if isinstance(node["query"], dict) else node["query"]
    match = re.fullmatch(r"label_values\((\w+), instance\)", query)
    assert match and match.group(1) in METRICS, query
    # Every panel and every target reads from the chosen data source.
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
    top = dashboard()["panels"]
    ids = [p["id"] for p in top] + [n["id"] for p in top for n in p.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids repeat"


def test_the_dashboard_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


@needs_promtool
def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    assert exprs
    group = {
        "name": "dashboard",
        "rules": [
            {"record": f"dashboard:query_{i}", "expr": substitute(expr)}
            for i, (_, expr) in enumerate(exprs)
        ],
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [group]}), encoding="utf-8")
    done = promtool("check", "rules", path)
    listing = "\n".join(f"{i}: [{title}] {expr}" for i, (title, expr) in enumerate(exprs))
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{listing}"


def test_the_dashboard_uses_only_the_exported_metrics() -> None:
    for title, expr in dashboard_exprs():
        names = metric_names(substitute(expr))
        assert names, f"{title}: {expr}"
        assert names <= METRICS, f"{title}: unknown metrics {names - METRICS}"


# title -> what its queries must select (a metric name, or a regex over the expr).
PANELS = {
    "Instances per state": r"sum by \(state\) \(hamimig_mig_instances\{",
    "Instances per GPU and state": r"by \([^)]*device_index[^)]*state[^)]*\) "
    r"\(hamimig_mig_instances",
    "Reuse ratio": r"hamimig_mig_reuses_total.* / .*hamimig_mig_reuses_total.*\+.*"
    r"hamimig_mig_creations_total",
    "Creations, reuses and reclaims": "hamimig_mig_reclaims_total",
    "Idle instance age": "hamimig_idle_instance_age_seconds",
    "Oldest Idle instance": "hamimig_idle_instance_age_seconds",
    "Error instances": r'hamimig_mig_instances\{[^}]*state="Error"',
    "Failures": "hamimig_mig_failures_total",
    "Pending intents": "hamimig_pending_intents",
    "Oldest pending intent": "hamimig_pending_intent_max_age_seconds",
    "CDI removal queue": "hamimig_cdi_removal_queue_length",
    "Unreadable records": "hamimig_unreadable_records",
    "Doctor failed checks": "hamimig_doctor_failed_checks",
    "Doctor warnings": "hamimig_doctor_warned_checks",
    "Time since last reconcile": r"time\(\) - hamimig_last_reconcile_timestamp_seconds",
    "Metrics age": r"time\(\) - node_textfile_mtime_seconds",
}


def test_the_dashboard_has_the_panels_operators_asked_for() -> None:
    by_title: dict[str, list[str]] = {}
    for title, expr in dashboard_exprs():
        by_title.setdefault(title, []).append(expr)
    for title, pattern in PANELS.items():
        assert title in by_title, f"no panel {title!r}"
        assert any(re.search(pattern, e) for e in by_title[title]), (title, by_title[title])
    # The over-time ones are graphs, the health ones single values.
    kinds = {p["title"]: p["type"] for p in panels()}
    for title in ("Instances per state", "Instances per GPU and state", "Idle instance age"):
        assert kinds[title] == "timeseries", title
    for title in ("Pending intents", "CDI removal queue", "Time since last reconcile"):
        assert kinds[title] == "stat", title


def test_the_reuse_ratio_drops_a_zero_denominator() -> None:
    for title, expr in dashboard_exprs():
        if title == "Reuse ratio":
            assert re.search(
                r"\+ sum\(increase\(hamimig_mig_creations_total[^)]*\)\)\) > 0\)$", expr
            )


def test_the_scrape_error_panel_does_not_need_the_series_a_rejected_file_loses() -> None:
    [panel] = [p for p in panels() if p["title"] == "Textfile scrape errors"]
    [target] = panel["targets"]
    # The current hamimig series are gone for exactly the node whose hamimig.prom is rejected.
    assert "[1d]" in target["expr"]
    for words in ("rejected or missing hamimig.prom", "kube_daemonset_status_number_unavailable"):
        assert words in panel["description"]
    monitoring = (ROOT / "docs" / "monitoring.md").read_text(encoding="utf-8")
    assert "kube_daemonset_status_number_unavailable" in monitoring


def _panel_expr(title: str) -> str:
    [expr] = {substitute(e) for t, e in dashboard_exprs() if t == title}
    return expr


@needs_promtool
def test_the_reuse_ratio_and_scrape_error_queries_on_sample_series(tmp_path: Path) -> None:
    """promtool evaluates the dashboard's queries (Node = gpu-node-1:9100, window 1h): no
    allocation gives no reuse ratio (not NaN), and a node whose hamimig.prom node-exporter
    rejects (its hamimig series gone) still counts as a scrape error."""
    node = 'instance="gpu-node-1:9100",job="node-exporter"'
    ratio, errors = _panel_expr("Reuse ratio"), _panel_expr("Textfile scrape errors")

    def case(series: dict[str, str], expr: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "promql_expr_test": [{"expr": expr, "eval_time": "2h", "exp_samples": samples}],
        }

    tests = [
        # No allocation in the window: no sample.
        case(
            {
                f"hamimig_mig_reuses_total{{{node}}}": "4x120",
                f"hamimig_mig_creations_total{{{node}}}": "2x120",
            },
            ratio,
            [],
        ),
        # Three reuses for every creation.
        case(
            {
                f"hamimig_mig_reuses_total{{{node}}}": "0+3x120",
                f"hamimig_mig_creations_total{{{node}}}": "0+1x120",
            },
            ratio,
            [{"labels": "{}", "value": 0.75}],
        ),
        # hamimig.prom rejected from minute 90 on: its series stop, the node still counts.
        case(
            {
                f"node_textfile_scrape_error{{{node}}}": "0x89 1x30",
                f"hamimig_pending_intents{{{node}}}": "0x89",
                f'hamimig_mig_instances{{{node},state="Error"}}': "0x89",
            },
            errors,
            [{"labels": "{}", "value": 1}],
        ),
        # A healthy node: 0.
        case(
            {
                f"node_textfile_scrape_error{{{node}}}": "0x120",
                f"hamimig_pending_intents{{{node}}}": "0x120",
            },
            errors,
            [{"labels": "{}", "value": 0}],
        ),
        # A node that never exported hamimig metrics is not counted.
        case({f"node_textfile_scrape_error{{{node}}}": "1x120"}, errors, []),
    ]
    path = tmp_path / "dashboard-queries.test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [], "tests": tests}), encoding="utf-8")
    done = promtool("test", "rules", path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_deploy_readme_names_every_monitoring_file() -> None:
    readme = (ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
    for path in sorted(p for p in MONITORING.rglob("*") if p.is_file()):
        name = path.relative_to(ROOT / "deploy").as_posix()
        assert name in readme, f"deploy/README.md does not name {name}"


SCRAPE_LABELS = {"instance", "job", "pod"}
"""What the scrape adds to hamimig's series (node-exporter's target; `pod` as
kube-prometheus-stack adds it)."""


def exported_labels(cli: Cli) -> dict[str, set[str]]:
    """Series name -> the label names `hamimig metrics` writes on it, on a node with an Active
    and an Idle instance (so every family has a sample)."""
    idle(cli, "ns/a", "1g.10gb", "0")
    allocated(cli, "ns/b", "1g.10gb", "1")
    ran = cli("--node", "gpu-node-1", "metrics")
    assert ran.exit_code == 0, ran.stderr
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(ran.stdout):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def test_the_rule_tests_series_carry_exactly_the_labels_hamimig_writes(cli: Cli) -> None:
    """The promtool unit tests feed the rules series labelled as `hamimig metrics` labels them
    (node on every one, a GPU as HAMi names it), plus the scrape's labels."""
    exported = exported_labels(cli)
    assert all("node" in labels for labels in exported.values())
    doc = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    seen = set()
    for test in doc["tests"]:
        for series in test["input_series"]:
            match = re.fullmatch(r"(\w+)\{(.*)\}", series["series"])
            assert match, series["series"]
            name, names = match.group(1), set(re.findall(r'(\w+)="', match.group(2)))
            assert {"instance", "job"} <= names, series["series"]
            if name.startswith("hamimig_"):
                assert names - SCRAPE_LABELS == exported[name], series["series"]
                seen.add(name)
    assert "hamimig_mig_instances" in seen


def test_the_dashboard_groups_and_labels_only_by_labels_its_series_carry(cli: Cli) -> None:
    """Every label a dashboard query groups by or its legend shows is a scrape label or one
    that hamimig writes on a hamimig metric the query selects (a renamed label would leave a
    panel blank without an error)."""
    exported = exported_labels(cli)
    for panel in panels():
        for target in panel.get("targets", []):
            expr = target["expr"]
            carried = set(SCRAPE_LABELS)
            for name in metric_names(substitute(expr)):
                carried |= exported.get(name, set())
            used = set()
            for group in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
                used |= {label.strip() for label in group.split(",") if label.strip()}
            used |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            assert used <= carried, f"{panel['title']}: {sorted(used - carried)} in {expr}"


def test_the_hamimig_metrics_the_rules_use_are_the_ones_hamimig_exports(cli: Cli) -> None:
    """The list above is what `hamimig metrics` really prints on a node with an Active and an
    Idle instance (every family, the per-instance ones too), not a list kept by hand."""
    idle(cli, "ns/a", "1g.10gb", "0")
    allocated(cli, "ns/b", "1g.10gb", "1")
    ran = cli("metrics")
    assert ran.exit_code == 0, ran.stderr
    exported = {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in ran.stdout.splitlines()
        if line and not line.startswith("#")
    }
    assert exported == {m for m in METRICS if m.startswith("hamimig_")}
