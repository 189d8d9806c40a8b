"""OpenTelemetry traces of runs (SPEC O1): run → stage → model call → tool call, and human
approvals, named and attributed per the GenAI semantic conventions.

Why the ids are derived rather than passed around: a run is driven by several worker
processes over its life (each resume after an approval or a dead worker is another claim)
and may end in the web process (a cancel, a rejection). Its trace id is the run's UUID, and
the span ids of its root span and of each stage span are derived from the run and the
stage's row, so every process adds its spans to the one trace with no context to store,
and a log line's trace_id (harness_console.logging) joins it.

Why the root and stage spans are sent when the run ends: only then are their ends known
(from the rows). Their children, sent earlier, already name them as parent.

Off unless an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; the exporter reads those and ``_HEADERS`` itself)
and ``OTEL_TRACES_EXPORTER`` is not ``none``; when off, each function here returns after one
check. OpenTelemetry's global provider is never set: the anthropic SDK traces its own calls
through that one, and would otherwise add spans of its own (with content, if told to).

Never in a span: the API key, prompts, model output, file contents, tool arguments' values
(only their keys and the path).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import transaction
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME
from opentelemetry.trace import SpanKind, Status, StatusCode

from approvals.models import ApprovalRequest

from ..core import status as run_status
from ..core.model_turns import ANTHROPIC
from ..models import Run, Step, ToolCall

logger = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
DEFAULT_SERVICE_NAME = "harness-console"
FLUSH_MILLIS = 5000  # a task waits this long at most for its spans to leave
ENDED = frozenset({run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK})
APPROVAL_ENDS = frozenset(
    {"approval.decided", "approval.expired", "approval.invalidated", "approval.cancelled"}
)
MAX_TEXT = 300  # a reason or a rule's text in an attribute; never a document
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


# --- the tracer of this process ------------------------------------------------------------
@dataclass
class _Tracing:
    provider: TracerProvider | None = None
    tracer: trace.Tracer | None = None
    pid: int = 0  # the process that configured it: a forked child configures its own


_state = _Tracing()
_lock = threading.Lock()
# The ids the next span must take (trace id, span id), set only around its creation.
_forced: ContextVar[tuple[int, int] | None] = ContextVar("harness_forced_ids", default=None)


class RunIdGenerator(IdGenerator):
    """Random ids, except for the span being created under ``_forced``: a run's root and
    stage spans, whose ids every process must derive alike."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        forced = _forced.get()
        return forced[0] if forced else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        forced = _forced.get()
        return forced[1] if forced else self._random.generate_span_id()


def tracer_provider(*processors: SpanProcessor) -> TracerProvider:
    """A provider that can give a run's spans the run's ids; tests pass theirs (an
    in-memory exporter) to :func:`tracing_configure`."""
    name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE_NAME
    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: name}), id_generator=RunIdGenerator()
    )
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def tracing_configure(provider: TracerProvider | None = None) -> bool:
    """Install this process's tracer and say whether tracing is on.

    ``provider`` is the tests' own; without one, OTLP/HTTP in batches when an endpoint is
    set, else nothing. Our own provider, not OpenTelemetry's global one: that can be set
    once per process, and a Celery pool process (after fork) or a test needs to replace it.
    """
    if provider is None and _otlp_wanted():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = tracer_provider(BatchSpanProcessor(OTLPSpanExporter()))
    if provider is not None and not isinstance(provider.id_generator, RunIdGenerator):
        raise ValueError("Make the provider with tracer_provider(): runs need their own ids.")
    previous = _state.provider if _state.pid == os.getpid() else None
    _state.provider = provider
    _state.tracer = provider.get_tracer("harness_console.runs") if provider else None
    _state.pid = os.getpid()
    if previous is not None and previous is not provider:
        previous.shutdown()
    return provider is not None


def _otlp_wanted() -> bool:
    """An endpoint is set, and the standard switch does not turn the exporter off."""
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(os.environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def tracing_flush(timeout_millis: int = FLUSH_MILLIS) -> None:
    """Send what is buffered: a pool process may be recycled (or killed) after its task."""
    if _state.provider is not None and _state.pid == os.getpid():
        _state.provider.force_flush(timeout_millis)


def tracing_shutdown() -> None:
    """Flush and stop the exporter's thread, as a pool process exits."""
    if _state.provider is not None and _state.pid == os.getpid():
        _state.provider.shutdown()
    _state.provider, _state.tracer = None, None


def _tracer() -> trace.Tracer | None:
    """The tracer, configured on first use in each process (the web process, a worker
    started without the pool signal); None when tracing is off."""
    if _state.pid != os.getpid():
        with _lock:
            if _state.pid != os.getpid():
                tracing_configure()
    return _state.tracer


def _never_raises[**P, R](fn: Callable[P, R]) -> Callable[P, R | None]:
    """A trace is worth less than the run: a bug here is logged, never raised into the flow."""

    @functools.wraps(fn)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return fn(*args, **kwargs)
        except Exception:
            logger.warning("Could not record a span (%s)", fn.__name__, exc_info=True)
            return None

    return guarded


# --- ids and parents -----------------------------------------------------------------------
def trace_id_of(run_id: Any) -> int:
    """A run's trace id: its UUID as a 128-bit integer (log lines print it in hex)."""
    return run_id.int if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id)).int


def _derived_span_id(*parts: Any) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[-8:], "big") or 1  # 0 is the invalid span id


def root_span_id(run_id: Any) -> int:
    """The span id of a run's ``invoke_agent`` span: the low 64 bits of sha256(run id)."""
    return _derived_span_id(uuid.UUID(str(run_id)))


def stage_span_id(run_id: Any, step_id: Any) -> int:
    return _derived_span_id(uuid.UUID(str(run_id)), "step", step_id)


def _parent(run_id: Any, span_id: int) -> Context:
    context = trace.SpanContext(
        trace_id_of(run_id),
        span_id,
        is_remote=True,  # sent by whichever process ends the run
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(context))


def _stage_parent(run_id: Any, step_id: Any = None) -> Context:
    """The run's running stage (its Step row), or the run itself between stages."""
    if step_id is None:
        step_id = (
            Step.objects.filter(run_id=run_id, status="running")
            .order_by("-index")
            .values_list("pk", flat=True)
            .first()
        )
    span_id = stage_span_id(run_id, step_id) if step_id else root_span_id(run_id)
    return _parent(run_id, span_id)


def _start_with_ids(
    tracer: trace.Tracer, name: str, ids: tuple[int, int], **kwargs: Any
) -> trace.Span:
    token = _forced.set(ids)
    try:
        return tracer.start_span(name, **kwargs)
    finally:
        _forced.reset(token)


def _ns(moment: datetime.datetime) -> int:
    """Exact nanoseconds since the epoch (a float timestamp loses microseconds)."""
    return (moment - EPOCH) // datetime.timedelta(microseconds=1) * 1000


def _usage(input_tokens: int, output: int, cache_creation: int, cache_read: int) -> dict:
    """OpenTelemetry's input tokens include the cached ones, which Anthropic reports apart:
    counted here once, and the cache parts given as well (NOTES.md)."""
    return {
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: input_tokens + cache_creation + cache_read,
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: output,
        gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: cache_creation,
        gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: cache_read,
    }


def _cost(cost_usd: Any, basis: str) -> dict:
    found: dict[str, Any] = {"harness.cost.basis": basis or ""}
    if cost_usd is not None:
        found["harness.cost.usd"] = float(cost_usd)
    return found


# --- model calls ---------------------------------------------------------------------------
@_never_raises
def chat_started(run: Run, *, model: Any, step_id: Any, turn: int) -> trace.Span | None:
    """A ``chat`` span under the run's stage, open while the model answers and the answer
    is recorded."""
    tracer = _tracer()
    if tracer is None:
        return None
    name = str(getattr(model, "model", "") or run.model_name or "model")
    return tracer.start_span(
        f"chat {name}",
        context=_stage_parent(run.pk, step_id),
        kind=SpanKind.CLIENT,
        attributes={
            gen_ai.GEN_AI_OPERATION_NAME: "chat",
            gen_ai.GEN_AI_PROVIDER_NAME: ANTHROPIC,
            gen_ai.GEN_AI_SYSTEM: ANTHROPIC,  # its older name, still read by some backends
            gen_ai.GEN_AI_REQUEST_MODEL: name,
            gen_ai.GEN_AI_CONVERSATION_ID: str(run.pk),
            "harness.run.id": str(run.pk),
            "harness.model.label": run.model_label,
            "harness.turn": turn,
        },
    )


@_never_raises
def chat_ended(span: trace.Span | None, *, reply: Any, usage: Any, priced: Any) -> None:
    if span is None:
        return
    span.set_attributes(
        {
            gen_ai.GEN_AI_RESPONSE_MODEL: reply.model,
            gen_ai.GEN_AI_RESPONSE_ID: reply.request_id,
            gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: [reply.stop_reason],
            **_usage(
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_creation_input_tokens,
                usage.cache_read_input_tokens,
            ),
            **_cost(priced.cost_usd, priced.basis),
            "harness.model.label": reply.label,
            "harness.usage.reported": usage.reported,
        }
    )
    span.end()


@_never_raises
def chat_failed(span: trace.Span | None, error: Exception) -> None:
    if span is None:
        return
    span.set_attribute(ERROR_TYPE, type(error).__name__)
    span.set_status(Status(StatusCode.ERROR, str(error)[:MAX_TEXT]))
    span.end()


# --- tool calls ----------------------------------------------------------------------------
def traced_tool_call[**P](fn: Callable[P, ToolCall]) -> Callable[P, ToolCall]:
    """An ``execute_tool`` span around a run's tool call: the permission decision, the
    execution and its outcome. Calls outside a run (``manage.py call_tool``) have no trace."""

    @functools.wraps(fn)
    def traced(*args: P.args, **kwargs: P.kwargs) -> ToolCall:
        run: Any = kwargs.get("run")
        tracer = _tracer() if run is not None else None
        if tracer is None:
            return fn(*args, **kwargs)
        with tracer.start_as_current_span(
            f"execute_tool {str(kwargs.get('tool'))[:120]}",
            context=_stage_parent(run.pk),
            attributes=_tool_started(run, kwargs),
            # An exception's message and stack may quote what the tool read: its type only.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                record = fn(*args, **kwargs)
            except BaseException as error:
                span.set_attribute(ERROR_TYPE, type(error).__name__)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                raise
            _tool_recorded(span, record)
            return record

    return traced


def _tool_started(run: Any, call: dict[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments")
    keys = sorted(str(k) for k in arguments)[:50] if isinstance(arguments, dict) else []
    return {
        gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
        gen_ai.GEN_AI_TOOL_NAME: str(call.get("tool"))[:120],
        gen_ai.GEN_AI_TOOL_CALL_ID: str(call.get("tool_use_id") or ""),
        "harness.run.id": str(run.pk),
        "harness.tool.argument_keys": keys,
    }


@_never_raises
def _tool_recorded(span: trace.Span, record: ToolCall) -> None:
    span.set_attributes(
        {
            "harness.permission.decision": record.decision,
            "harness.permission.rule": record.rule,
            "harness.permission.reason": record.reason[:MAX_TEXT],
            "harness.permission.policy": record.policy_name,
            "harness.permission.policy_version": record.policy_version or 0,
            "harness.permission.human_only": record.human_only,
            "harness.tool.status": record.status,
            "harness.tool.path": record.path,
            "harness.tool.attempts": record.attempts,
        }
    )
    if record.approved_by is not None:
        span.set_attribute("harness.tool.approved_by", record.approved_by.get_username())
    if record.status in ("error", "timeout"):
        # The tool's own message may quote what it read: only the kind of failure goes here.
        span.set_attribute(ERROR_TYPE, record.status)
        span.set_status(Status(StatusCode.ERROR, f"the tool call ended in {record.status}"))


# --- approvals -----------------------------------------------------------------------------
@_never_raises
def approval_event(approval: Any, type: str) -> None:
    """A request that stopped being pending (decided, expired, invalidated, cancelled) gets
    its ``harness.approval`` span, once the change commits. Its parent is the stage it
    held up, looked up now, before a failing run closes its stages."""
    if type not in APPROVAL_ENDS or _tracer() is None:
        return
    parent = _stage_parent(approval.run_id)
    ended = time.time_ns()
    transaction.on_commit(partial(_approval_span, approval.pk, parent, ended), robust=True)


@_never_raises
def _approval_span(approval_id: Any, parent: Context, ended_ns: int) -> None:
    tracer = _tracer()
    approval = ApprovalRequest.objects.select_related("decided_by").filter(pk=approval_id).first()
    if tracer is None or approval is None:
        return
    start = _ns(approval.requested_at)
    end = max(start, _ns(approval.decided_at) if approval.decided_at else ended_ns)
    attributes: dict[str, Any] = {
        "harness.run.id": str(approval.run_id),
        "harness.approval.id": str(approval.pk),
        "harness.approval.kind": approval.kind,
        "harness.approval.status": approval.status,
        "harness.approval.risk": approval.risk,
        "harness.approval.rule": approval.rule,
        "harness.approval.required_approvals": approval.required_approvals,
        "harness.approval.latency_ms": (end - start) // 1_000_000,
        gen_ai.GEN_AI_TOOL_NAME: approval.tool,
        gen_ai.GEN_AI_TOOL_CALL_ID: approval.tool_use_id,
    }
    if approval.decided_by is not None:
        attributes["harness.approval.decided_by"] = approval.decided_by.get_username()
    span = tracer.start_span(
        f"harness.approval {approval.kind}", context=parent, start_time=start, attributes=attributes
    )
    span.end(end_time=end)


# --- the run and its stages ----------------------------------------------------------------
@_never_raises
def run_transitioned(run: Run, to: str) -> None:
    """Inside the transaction of a run's change to ``to``: a run that ended gets its root
    and stage spans on commit."""
    if to not in ENDED or _tracer() is None:
        return
    transaction.on_commit(partial(_run_ended, run.pk, to, time.time_ns()), robust=True)


@_never_raises
def _run_ended(run_id: Any, status: str, at_ns: int) -> None:
    """1. A rollback (after the run completed, its spans sent): a ``harness.rollback`` span.
    2. Otherwise one ``harness.stage`` span per Step row, then the root span."""
    tracer = _tracer()
    run = Run.objects.select_related("agent", "workspace").filter(pk=run_id).first()
    if tracer is None or run is None:
        return
    root = _parent(run.pk, root_span_id(run.pk))
    if status == run_status.ROLLED_BACK:
        span = tracer.start_span(
            "harness.rollback",
            context=root,
            start_time=at_ns,
            attributes={"harness.run.id": str(run.pk), "harness.run.status": status},
        )
        span.end(end_time=max(at_ns, time.time_ns()))
        return
    finished = run.finished_at or datetime.datetime.now(datetime.UTC)
    for step in run.steps.order_by("index"):
        _stage_span(tracer, run, step, root, finished)
    _root_span(tracer, run, finished)


def _stage_span(
    tracer: trace.Tracer, run: Run, step: Any, root: Context, finished: datetime.datetime
) -> None:
    attributes = {
        "harness.run.id": str(run.pk),
        "harness.stage.name": step.name,
        "harness.stage.index": step.index,
        "harness.stage.status": step.status,
    }
    if step.verification:
        attributes["harness.stage.verification"] = step.verification
    start = _ns(step.started_at)
    span = _start_with_ids(
        tracer,
        f"harness.stage {step.name}",
        (trace_id_of(run.pk), stage_span_id(run.pk, step.pk)),
        context=root,
        start_time=start,
        attributes=attributes,
    )
    if step.status == "failed":
        span.set_status(Status(StatusCode.ERROR, f"the {step.name} stage failed"))
    span.end(end_time=max(start, _ns(step.finished_at or finished)))


def _root_span(tracer: trace.Tracer, run: Run, finished: datetime.datetime) -> None:
    agent = run.agent
    attributes = {
        gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent",
        gen_ai.GEN_AI_PROVIDER_NAME: ANTHROPIC,
        gen_ai.GEN_AI_AGENT_NAME: agent.name,
        gen_ai.GEN_AI_AGENT_ID: agent.slug,
        gen_ai.GEN_AI_CONVERSATION_ID: str(run.pk),
        gen_ai.GEN_AI_REQUEST_MODEL: agent.model,
        "harness.run.id": str(run.pk),
        "harness.run.status": run.status,
        "harness.run.risk": run.risk,
        "harness.workspace": run.workspace.slug,
        "harness.model.label": run.model_label,
        **_cost(run.cost_usd, run.cost_basis),
        **_usage(
            run.input_tokens,
            run.output_tokens,
            run.cache_creation_input_tokens,
            run.cache_read_input_tokens,
        ),
    }
    if run.status == run_status.FAILED:
        attributes["harness.run.failure_reason"] = run.failure_reason[:MAX_TEXT]
        if run.failure_kind:
            attributes["harness.run.failure_kind"] = run.failure_kind
    start = _ns(run.created_at)
    span = _start_with_ids(
        tracer,
        f"invoke_agent {agent.slug}",
        (trace_id_of(run.pk), root_span_id(run.pk)),
        context=Context(),  # a root: no parent, whatever is current
        start_time=start,
        attributes=attributes,
    )
    if run.status == run_status.FAILED:
        span.set_status(Status(StatusCode.ERROR, run.failure_reason[:MAX_TEXT]))
    span.end(end_time=max(start, _ns(finished)))
