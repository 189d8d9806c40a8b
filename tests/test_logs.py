"""Structured logs (SPEC O3): JSON lines in production, plain lines in debug mode, and every
line a worker logs for a run carrying the run's id and trace id; the API key in no line and
no span."""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.utils.module_loading import import_string
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from approvals.models import ApprovalRequest
from harness_console.logging import RunContext, run_log_context
from runs import tasks
from runs.models import Run
from runs.observability import telemetry
from runs.services import run_create
from tests.conftest import SEEDED
from tests.fake_anthropic import FakeAnthropic, message
from tests.test_settings_env import load_settings

pytestmark = SEEDED

LOG_PROBE = (
    "import django, logging; django.setup(); from django.conf import settings; "
    "from harness_console.logging import run_log_context; "
    "print(settings.HARNESS_LOG_FORMAT, flush=True); log = logging.getLogger('runs.probe'); "
    "log.warning('outside'); "
    "ctx = run_log_context('0f8fad5b-d9cb-469f-a165-70867728950e'); ctx.__enter__(); "
    "log.warning('inside', extra={'tool': 'readSource'})"
)
PROBE_RUN = "0f8fad5b-d9cb-469f-a165-70867728950e"
PRODUCTION = {"DEBUG": "false", "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "localhost"}


class Capture(logging.Handler):
    """The console handler's filter and a formatter from settings.LOGGING, in memory."""

    def __init__(self, format: str) -> None:
        super().__init__(logging.DEBUG)
        config = dict(settings.LOGGING["formatters"][format])
        self.setFormatter(import_string(config.pop("()"))(**config))
        self.addFilter(RunContext())
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.lines.append(self.format(record))


def capture(format: str, level: int = logging.INFO) -> Iterator[Capture]:
    handler, root = Capture(format), logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


@pytest.fixture
def json_lines() -> Iterator[Capture]:
    yield from capture("json")


@pytest.fixture
def text_lines() -> Iterator[Capture]:
    yield from capture("text")


def lines_of(handler: Capture) -> list[dict]:
    return [json.loads(line) for line in handler.lines]


# --- the run's context -----------------------------------------------------------------------
def test_every_line_of_a_run_task_carries_the_run_and_its_trace_id(run, docs, json_lines):
    """The task drives the run to its approval, then a second delivery finds it waiting (a
    line from runs.flow); every line of this thread in between names the run."""
    tasks.run_execute(str(run.pk))
    run.refresh_from_db()
    assert run.status == "waiting_for_approval"
    tasks.run_execute(str(run.pk))
    logging.getLogger("runs.flow").info("after the task")
    here = threading.get_ident()
    lines = [
        line
        for record, line in zip(json_lines.records, lines_of(json_lines), strict=True)
        if record.thread == here
    ]
    *inside, after = lines
    assert any(
        line["message"] == f"Run {run.pk} is not claimable (held, waiting or ended)."
        for line in inside
    )
    for line in inside:
        assert line["run_id"] == str(run.pk), line
        assert line["trace_id"] == f"{run.pk.int:032x}" == run.pk.hex
    assert after["message"] == "after the task"
    assert after["run_id"] == after["trace_id"] == ""
    assert {"timestamp", "level", "logger", "message"} <= set(after)
    assert after["level"] == "INFO" and after["logger"] == "runs.flow"


def test_the_trace_id_of_a_line_is_the_trace_id_of_the_run_spans(personas, run, docs, json_lines):
    exporter = InMemorySpanExporter()
    telemetry.tracing_configure(telemetry.tracer_provider(SimpleSpanProcessor(exporter)))
    try:
        tasks.run_execute(str(run.pk))
        tasks.run_execute(str(run.pk))  # logs "not claimable" inside the run's context
    finally:
        telemetry.tracing_configure()
    (line,) = [line for line in lines_of(json_lines) if "not claimable" in line["message"]]
    traced = {f"{s.context.trace_id:032x}" for s in exporter.get_finished_spans()}
    assert traced == {line["trace_id"]}


def test_extras_are_kept_and_a_line_may_name_its_run_itself(json_lines):
    log = logging.getLogger("runs.probe")
    log.info("named", extra={"run_id": PROBE_RUN, "tool": "readSource"})
    with run_log_context(PROBE_RUN):
        log.info("nested", extra={"turn": 3})
    log.info("malformed", extra={"run_id": "not-a-uuid"})
    named, nested, malformed = lines_of(json_lines)
    assert named["run_id"] == PROBE_RUN and named["tool"] == "readSource"
    assert named["trace_id"] == PROBE_RUN.replace("-", "")
    assert nested["turn"] == 3 and nested["run_id"] == PROBE_RUN
    assert malformed["run_id"] == "not-a-uuid" and malformed["trace_id"] == ""


def test_text_lines_show_the_run_only_inside_one(text_lines):
    log = logging.getLogger("runs.probe")
    log.info("outside")
    with run_log_context(PROBE_RUN):
        log.info("inside")
    outside, inside = text_lines.lines
    assert outside.endswith("INFO runs.probe outside")
    assert inside.endswith(f"INFO runs.probe inside [run {PROBE_RUN}]")


def test_a_context_left_restores_the_one_around_it(json_lines):
    other = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
    log = logging.getLogger("runs.probe")
    with run_log_context(PROBE_RUN):
        with run_log_context(other):
            log.info("inner")
        log.info("outer")
    inner, outer = lines_of(json_lines)
    assert inner["run_id"] == other and outer["run_id"] == PROBE_RUN


# --- the format from the settings --------------------------------------------------------------
def probe_lines(tmp_path, **env: str) -> tuple[str, list[str]]:
    result = load_settings(tmp_path, probe=LOG_PROBE, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip(), result.stderr.strip().splitlines()


def test_production_logs_json_lines(tmp_path):
    fmt, (outside, inside) = probe_lines(tmp_path, **PRODUCTION)
    assert fmt == "json"
    outside, inside = json.loads(outside), json.loads(inside)
    assert outside["message"] == "outside" and outside["run_id"] == ""
    assert inside["run_id"] == PROBE_RUN and inside["trace_id"] == PROBE_RUN.replace("-", "")
    assert inside["tool"] == "readSource" and inside["level"] == "WARNING"
    assert inside["logger"] == "runs.probe" and inside["timestamp"].endswith("+00:00")


def test_debug_mode_logs_plain_lines_and_the_environment_overrides(tmp_path):
    fmt, (outside, inside) = probe_lines(tmp_path, DEBUG="true")
    assert fmt == "text"
    assert outside.endswith("WARNING runs.probe outside")
    assert inside.endswith(f"[run {PROBE_RUN}]")
    fmt, lines = probe_lines(tmp_path, DEBUG="true", HARNESS_LOG_FORMAT="JSON")
    assert fmt == "json" and json.loads(lines[1])["run_id"] == PROBE_RUN
    fmt, lines = probe_lines(tmp_path, HARNESS_LOG_FORMAT="text", **PRODUCTION)
    assert fmt == "text" and lines[1].endswith(f"[run {PROBE_RUN}]")


def test_an_unknown_log_format_refuses_to_start(tmp_path):
    result = load_settings(tmp_path, probe=LOG_PROBE, HARNESS_LOG_FORMAT="yaml")
    assert result.returncode != 0
    assert "HARNESS_LOG_FORMAT='yaml' is not a log format" in result.stderr


# --- the key -------------------------------------------------------------------------------------
def test_the_api_key_is_in_no_log_line_and_no_span(personas, agent, workspace, monkeypatch):
    """A run through the real SDK (to a local fake API), logged at DEBUG by every logger
    (the SDK's and httpx's included) and traced: the key shows nowhere."""
    key = "sk-ant-api03-sentinel-" + secrets.token_urlsafe(24)
    fake = FakeAnthropic()
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    monkeypatch.setenv("ANTHROPIC_LOG", "debug")
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "guide.md").write_text("# Guide\n\nInstall it.\n")
    fake.answers += [
        message(
            [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "readSource",
                    "input": {"path": "docs/guide.md"},
                }
            ],
            stop_reason="tool_use",
            usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 7},
        ),
        message(
            [{"type": "text", "text": "It says: install it."}],
            usage={"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 7},
            model="claude-sonnet-4-6",
        ),
    ]
    exporter = InMemorySpanExporter()
    telemetry.tracing_configure(telemetry.tracer_provider(SimpleSpanProcessor(exporter)))
    chatty = [logging.getLogger(name) for name in ("anthropic", "httpx", "httpcore")]
    levels = [logger.level for logger in chatty]
    for logger in chatty:
        logger.setLevel(logging.DEBUG)
    logs = capture("json", logging.DEBUG)
    handler = next(logs)
    try:
        run = run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request="What does docs/guide.md say?",
            dispatch=False,
        )
        tasks.run_execute(str(run.pk))
    finally:
        logs.close()
        for logger, level in zip(chatty, levels, strict=True):
            logger.setLevel(level)
        telemetry.tracing_configure()
        fake.close()
    run = Run.objects.get(pk=run.pk)
    assert run.status == "completed", run.failure_reason
    assert fake.requests and not ApprovalRequest.objects.filter(run=run).exists()
    assert handler.lines, "the SDK logged nothing at DEBUG: the check would prove nothing"
    secret = key[len("sk-ant-api03-") :]
    for line in handler.lines:
        assert secret not in line
    found = exporter.get_finished_spans()
    assert {s.name for s in found} >= {"chat claude-sonnet-4-6", "invoke_agent tester"}
    for span in found:
        text = span.to_json()
        assert secret not in text, span.name
        assert "Install it." not in text, span.name  # nor the file's contents
    # The provider's answers: one from a model the price table does not know (no cost
    # claimed), one priced from its reported usage (Sonnet 4.x: 100 x $3 + 10 x $15 +
    # 7 x $0.30 per million).
    first, second = sorted(
        (s for s in found if s.name.startswith("chat ")), key=lambda s: s.start_time
    )
    assert first.attributes["harness.cost.basis"] == "unpriced"
    assert "harness.cost.usd" not in first.attributes
    assert second.attributes["harness.cost.basis"] == "reported"
    assert second.attributes["harness.cost.usd"] == pytest.approx(0.0004521)
    assert second.attributes["gen_ai.usage.input_tokens"] == 107
