"""The ops stack under ``deploy/`` (issue 19, SPEC O2 and O5): the Grafana dashboard and the
Prometheus rules and sample configuration are valid for their tools (``promtool``, from
Debian's ``prometheus`` package: ``make system-packages``), the alerts fire on the conditions
they name, and every metric, label and label value their queries use is one the console's
``/metrics`` prints after a scripted run. A query over a misspelt name would draw an empty
panel or an alert that never fires: both are failures here."""

from __future__ import annotations

import datetime
import json
import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from approvals.models import ApprovalRequest
from runs.models import Run, ToolCall
from runs.observability.metrics import metrics_snapshot
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.fake_anthropic import message
from tests.helpers import FIX, drive

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "harness-console.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
TOKEN_FILE = "/etc/prometheus/harness-console.token"  # the sample config's credentials_file
TOKEN = "scrape-token-0123456789abcdef"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Series Prometheus makes itself, not the console.
PROMETHEUS_OWN = {"up"}
# What the issue asks the dashboard and the rules to cover.
DASHBOARD_METRICS = {
    "harness_runs",  # runs by state
    "harness_runs_completed_total",  # throughput, error rate
    "harness_runs_failed_total",
    "harness_approvals_pending",  # approval backlog
    "harness_approval_oldest_wait_seconds",  # and oldest wait
    "harness_runs_stuck",  # stuck runs
    "harness_model_cost_usd_total",  # cost per hour
    "harness_tool_call_errors_total",  # tool error rates
    "harness_tool_calls_total",
}
ALERT_NAMES = {
    "HarnessConsoleMetricsDown",
    "HarnessRunsStuck",
    "HarnessApprovalBacklog",
    "HarnessApprovalWaitingLong",
    "HarnessApprovalNearExpiry",
    "HarnessRunErrorRateSpike",
}
QUESTION = "What do docs/guide.md and docs/missing.md say?"  # no replay script matches it

# PromQL words that are not metric names: aggregations and functions are followed by "(",
# and are told apart that way; these are the rest.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
KEYWORDS |= {"group_left", "group_right", "inf", "nan"}
TOKEN_RE = re.compile(r"\d[\w.]*|[A-Za-z_:][\w:]*|\S")
STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SELECTOR_RE = re.compile(r"([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
MATCHER_RE = re.compile(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
LEGEND_RE = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# Grafana's variables, as Prometheus would see them once Grafana has filled them in.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$agent": ".*"}


# --- reading PromQL ------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    where: str  # the panel, variable or rule, for the failure message
    expr: str
    labels: frozenset[str] = frozenset()  # labels it shows besides the expression's own


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects.

    Strings, label matchers, ranges and grouping lists are taken out first (their words are
    label names, values and durations); of the words left, a name followed by "(" is a
    function or an aggregation, and the keywords are operators and modifiers."""
    text = STRING_RE.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = GROUPING_RE.sub(" ", text)
    tokens = TOKEN_RE.findall(text)
    names = set()
    for n, word in enumerate(tokens):
        if word[0].isdigit() or not (word[0].isalpha() or word[0] in "_:"):
            continue
        if word.lower() in KEYWORDS or (n + 1 < len(tokens) and tokens[n + 1] == "("):
            continue
        names.add(word)
    return names


def grouping_labels(expr: str) -> set[str]:
    return {
        label.strip()
        for group in GROUPING_RE.findall(STRING_RE.sub('""', expr))
        for label in group.split(",")
        if label.strip()
    }


def matchers(expr: str) -> Iterator[tuple[str, str, str, str]]:
    """(metric, label, operator, value) of each label matcher."""
    for metric, body in SELECTOR_RE.findall(expr):
        for label, op, value in MATCHER_RE.findall(body):
            yield metric, label, op, value


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def rules() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def grafana_filled(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"an unknown Grafana variable in {expr!r}"
    return expr


def queries() -> list[Query]:
    """Every query of the dashboard (its variables' included) and of the alerting rules."""
    board = dashboard()
    found = [
        Query(
            f"panel {panel['title']!r}",
            target["expr"],
            frozenset(LEGEND_RE.findall(target.get("legendFormat", ""))),
        )
        for panel in panels(board)
        for target in panel.get("targets", [])
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            definition = variable["definition"]
            shape = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", definition)
            assert shape, definition
            metric, label = shape.groups()
            found.append(Query(f"variable {variable['name']!r}", metric, frozenset({label})))
    found += [Query(f"alert {rule['alert']}", rule["expr"]) for rule in rules()]
    return found


# --- promtool ------------------------------------------------------------------------------
@pytest.fixture
def promtool() -> str:
    """A missing checker fails, never skips: a skipped check would pass having checked
    nothing. `make test` installs it (its `system-packages` step)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is missing: run make system-packages (it installs Debian's prometheus)",
            pytrace=False,
        )
    return path


def promtool_run(promtool: str, *args: str | Path) -> str:
    result = subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def test_the_alerting_rules_pass_promtool_check_rules(promtool):
    assert "SUCCESS: 6 rules found" in promtool_run(promtool, "check", "rules", ALERTS)


def test_the_sample_scrape_config_passes_promtool_check_config(promtool, tmp_path):
    """promtool checks that the credentials file exists and the rule files with it: the
    copy points at a token file it can find, beside a copy of the rules."""
    text = CONFIG.read_text()
    assert TOKEN_FILE in text
    token = tmp_path / "token"
    token.write_text(TOKEN)
    (tmp_path / "prometheus.yml").write_text(text.replace(TOKEN_FILE, str(token)))
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    output = promtool_run(promtool, "check", "config", tmp_path / "prometheus.yml")
    assert "SUCCESS: 1 rule files found" in output and "SUCCESS: 6 rules found" in output
    config = yaml.safe_load(text)
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "harness-console" and job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    assert 'up{job="harness-console"}' in ALERTS.read_text()


def test_every_dashboard_query_is_valid_promql(promtool, tmp_path):
    """Each panel's query, its Grafana variables filled in, as a recording rule: promtool
    parses every expression of a rules file."""
    panel_queries = [q for q in queries() if q.where.startswith("panel")]
    recorded = [
        {"record": f"dashboard:query_{n}", "expr": grafana_filled(q.expr)}
        for n, q in enumerate(panel_queries)
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    output = promtool_run(promtool, "check", "rules", path)
    assert f"SUCCESS: {len(recorded)} rules found" in output


# --- the alerts fire on what they name, and on nothing less ----------------------------------
COMPLETED = "harness_runs_completed_total{agent='tester'}"
FAILED = "harness_runs_failed_total{agent='tester'}"
MODEL_ERRORS = "harness_run_failures_total{kind='model_error'}"
CANCELS = "harness_run_failures_total{kind='cancelled'}"
DOWN = {"job": "harness-console", "instance": "console:8000"}
# (alert, input series at one sample a minute, [(when, $value as shown, or None: silent)]);
# the series' labels, for an alert that keeps them.
ALERT_CASES: list[tuple[str, dict[str, str], list[tuple[str, str | None]], dict[str, str]]] = [
    # Stuck from the first minute: pending for 5 minutes, then firing.
    ("HarnessRunsStuck", {"harness_runs_stuck": "0 1x20"}, [("4m", None), ("7m", "1")], {}),
    ("HarnessRunsStuck", {"harness_runs_stuck": "0x20"}, [("10m", None)], {}),
    (
        "HarnessApprovalBacklog",
        {"harness_approvals_pending": "20x20 21x20"},
        [("19m", None), ("30m", None), ("37m", "21")],
        {},
    ),
    (
        "HarnessApprovalWaitingLong",
        {"harness_approval_oldest_wait_seconds": "14000+60x20"},
        [("5m", None), ("15m", "4h 8m 20s")],
        {},
    ),
    # Two hours to the deadline, a minute less at each scrape: under an hour from 61.
    (
        "HarnessApprovalNearExpiry",
        {"harness_approval_next_expiry_seconds": "7200-60x100"},
        [("60m", None), ("61m", None), ("90m", "30m 0s")],
        {},
    ),
    # A run a minute completes, another fails with a model error: half of them fail.
    (
        "HarnessRunErrorRateSpike",
        {COMPLETED: "0+1x40", FAILED: "0+1x40", MODEL_ERRORS: "0+1x40", CANCELS: "0x40"},
        [("5m", None), ("30m", "50%")],
        {},
    ),
    # As many failures, but people's: cancelled runs are no error.
    (
        "HarnessRunErrorRateSpike",
        {COMPLETED: "0+1x40", FAILED: "0+1x40", MODEL_ERRORS: "0x40", CANCELS: "0+1x40"},
        [("30m", None)],
        {},
    ),
    # Too few runs to judge: one failure in a quiet quarter of an hour.
    (
        "HarnessRunErrorRateSpike",
        {COMPLETED: "0x40", FAILED: "0x20 1x20", MODEL_ERRORS: "0x20 1x20"},
        [("35m", None)],
        {},
    ),
    (
        "HarnessConsoleMetricsDown",
        {"up{job='harness-console', instance='console:8000'}": "1 0x20"},
        [("3m", None), ("7m", "0")],
        DOWN,
    ),
]


def expected(rule: dict[str, Any], shown: str, labels: dict[str, str]) -> dict[str, Any]:
    """The alert the rule makes when its ``$value`` is shown as ``shown`` on a series of
    these ``labels``."""
    notes = {}
    for key, text in rule["annotations"].items():
        text = re.sub(r"\{\{\s*\$value[^}]*\}\}", shown, text)
        for label, value in labels.items():
            text = text.replace(f"{{{{ $labels.{label} }}}}", value)
        notes[key] = text
    return {"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": notes}


def test_the_alerts_fire_on_their_conditions_after_their_for(promtool, tmp_path):
    """promtool's unit tests of the rules, on series named as /metrics names them."""
    by_name = {rule["alert"]: rule for rule in rules()}
    assert {alert for alert, *_ in ALERT_CASES} == ALERT_NAMES
    tests = [
        {
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [
                {
                    "eval_time": at,
                    "alertname": alert,
                    "exp_alerts": []
                    if shown is None
                    else [expected(by_name[alert], shown, labels)],
                }
                for at, shown in checks
            ],
        }
        for alert, series, checks, labels in ALERT_CASES
    ]
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    path = tmp_path / "alerts_test.yml"
    spec = {"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": tests}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert "SUCCESS" in promtool_run(promtool, "test", "rules", path)


# --- the files' own shape --------------------------------------------------------------------
def test_the_dashboard_is_an_importable_grafana_dashboard():
    board = dashboard()
    assert board["title"] and board["uid"] == "harness-console"
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["agent"]["datasource"] == DATASOURCE
    every = list(panels(board))
    ids = [panel["id"] for panel in every]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert grid["h"] > 0 and grid["y"] >= 0, panel["title"]
        if panel["type"] == "row":
            assert "targets" not in panel
            continue
        assert panel["type"] in {"timeseries", "stat", "bargauge", "gauge", "table"}
        assert panel["title"] and panel["description"]
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"] == DATASOURCE, panel["title"]
    used = set().union(*(metric_names(q.expr) for q in queries() if q.where.startswith("panel")))
    assert used >= DASHBOARD_METRICS, DASHBOARD_METRICS - used


def test_each_alert_says_how_long_how_bad_and_what_to_do():
    found = rules()
    assert {rule["alert"] for rule in found} == ALERT_NAMES
    for rule in found:
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
        assert all(text.strip() for text in rule["annotations"].values()), rule["alert"]


def test_the_query_reader_finds_names_and_leaves_functions_labels_and_durations():
    expr = (
        'sum by (kind, le) (rate(harness_a_total{kind!~"x|y", agent=~"$agent"}[$__rate_interval]'
        " offset 5m)) / on() group_left sum(harness_b) * 3600 > bool 0.5 and harness_c"
    )
    assert metric_names(expr) == {"harness_a_total", "harness_b", "harness_c"}
    assert grouping_labels(expr) == {"kind", "le"}
    assert list(matchers(expr)) == [
        ("harness_a_total", "kind", "!~", "x|y"),
        ("harness_a_total", "agent", "=~", "$agent"),
    ]


# --- against what /metrics prints ------------------------------------------------------------
@dataclass(frozen=True)
class Scrape:
    labels: dict[str, set[str]]  # sample name → its label names
    values: dict[tuple[str, str], set[str]]  # (sample name, label) → values shown
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client) -> Scrape:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    labels: dict[str, set[str]] = defaultdict(set)
    values: dict[tuple[str, str], set[str]] = defaultdict(set)
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels[sample.name] |= set(sample.labels)
            for label, shown in sample.labels.items():
                values[(sample.name, label)].add(shown)
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return Scrape(dict(labels), dict(values), samples)


def problems_of(query: Query, shown: Scrape) -> list[str]:
    """What in one query /metrics does not print: a metric, a label, a label value."""
    names = metric_names(query.expr)
    if not names:
        return [f"{query.where}: no metric in {query.expr!r}"]
    mine = names - PROMETHEUS_OWN  # Prometheus's own series: their labels are its own too
    problems = [f"{query.where}: no metric {name}" for name in sorted(mine - set(shown.labels))]
    if problems or not mine:
        return problems
    labels = set().union(*(shown.labels[name] for name in mine))
    wanted = grouping_labels(query.expr) | query.labels
    problems += [f"{query.where}: no label {label}" for label in sorted(wanted - labels)]
    for metric, label, op, value in matchers(query.expr):
        known = shown.values.get((metric, label))
        if known is None:
            problems.append(f"{query.where}: {metric} has no label {label}")
        elif "$" not in value and re.fullmatch(r"[\w|]+", value):
            problems += [
                f"{query.where}: {metric}{{{label}{op}...}}: no value {part!r}"
                for part in value.split("|")
                if part not in known
            ]
    return problems


def scripted_runs(personas, agent, workspace, docs, api) -> None:
    """A question through the real SDK against the fake Messages API (a priced model; one
    tool call fails, one works), and a fix that waits for an approver."""
    (docs / "guide.md").write_text("# Guide\n\nInstall the console.\n")
    read = [
        {"type": "tool_use", "id": f"toolu_{n}", "name": "readSource", "input": {"path": path}}
        for n, path in enumerate(("docs/missing.md", "docs/guide.md"))
    ]
    api.answers += [
        message(read, stop_reason="tool_use", model="claude-sonnet-4-6"),
        message([{"type": "text", "text": "It says to install it."}], model="claude-sonnet-4-6"),
    ]
    new = {"agent": agent, "workspace": workspace, "requester": personas.operator}
    question = drive(run_create(**new, request=QUESTION, dispatch=False))
    assert question.status == "completed", question.failure_reason
    statuses = sorted(ToolCall.objects.filter(run=question).values_list("status", flat=True))
    assert statuses == ["error", "ok"], statuses
    waiting = drive(run_create(**new, request=FIX, dispatch=False))
    assert waiting.status == "waiting_for_approval"


@override_settings(METRICS_TOKEN=TOKEN)
@pytest.mark.usefixtures("seeded")
@EVERYWHERE
def test_every_metric_label_and_value_used_is_in_metrics_after_a_scripted_run(
    client, personas, agent, workspace, docs, api
):
    scripted_runs(personas, agent, workspace, docs, api)
    shown = scrape(client)
    # The figures the panels draw have samples, and not only zeros.
    assert shown.samples[("harness_runs", (("status", "waiting_for_approval"),))] == 1
    assert shown.samples[("harness_tool_call_errors_total", (("tool", "readSource"),))] == 1
    cost = shown.samples[("harness_model_cost_usd_total", (("model", "claude-sonnet-4-6"),))]
    assert cost > 0
    assert shown.samples[("harness_approvals_pending", ())] == 1
    assert 23 * 3600 < shown.samples[("harness_approval_next_expiry_seconds", ())] <= 24 * 3600
    problems = [problem for query in queries() for problem in problems_of(query, shown)]
    assert not problems, "\n".join(problems)


@override_settings(METRICS_TOKEN=TOKEN, HARNESS_STUCK_AFTER_SECONDS=600)
@pytest.mark.django_db
def test_stuck_runs_and_the_next_deadline_are_gauges_of_the_live_rows(client, run):
    """A working run whose last event is older than HARNESS_STUCK_AFTER_SECONDS is stuck;
    one with a newer event, or not working (created, waiting for a person), is not. The
    next deadline is the soonest pending request's, and absent when none has one."""
    shown = scrape(client)
    assert shown.samples[("harness_runs_stuck", ())] == 0
    assert "harness_approval_next_expiry_seconds" not in shown.labels
    later = timezone.now() + datetime.timedelta(minutes=11)
    assert metrics_snapshot(now=later).stuck_runs == 0  # created: not working yet
    Run.objects.filter(pk=run.pk).update(status="running")
    assert scrape(client).samples[("harness_runs_stuck", ())] == 0  # its last event is new
    assert metrics_snapshot(now=later).stuck_runs == 1  # ... and 11 minutes old then
    Run.objects.filter(pk=run.pk).update(status="waiting_for_approval")
    assert metrics_snapshot(now=later).stuck_runs == 0

    soon, then = (timezone.now() + datetime.timedelta(minutes=m) for m in (30, 90))
    for n, expires_at in enumerate((then, soon, None)):
        ApprovalRequest.objects.create(
            run=run, kind="tool_call", tool_use_id=f"toolu_{n}", expires_at=expires_at
        )
    assert 29 * 60 < scrape(client).samples[("harness_approval_next_expiry_seconds", ())] <= 1800
    ApprovalRequest.objects.filter(expires_at=soon).update(
        expires_at=timezone.now() - datetime.timedelta(minutes=1)
    )
    assert scrape(client).samples[("harness_approval_next_expiry_seconds", ())] == 0
