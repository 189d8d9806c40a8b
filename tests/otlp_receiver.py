"""A local OTLP/HTTP receiver: what a collector, Langfuse or Jaeger would get, decoded with
the OpenTelemetry protobuf definitions so a test can read the spans the console sent."""

from __future__ import annotations

import gzip
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

MAX_SPANS = 100_000  # a whole live-test session exports here; old spans make room


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str  # hex, as a backend shows it
    span_id: str
    parent_span_id: str  # "" for a root
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict[str, Any] = field(repr=False)
    resource: dict[str, Any] = field(repr=False)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


class OtlpReceiver:
    """POST /v1/traces (protobuf, plain or gzip) on a free local port, in a thread."""

    def __init__(self) -> None:
        self.spans: deque[ReceivedSpan] = deque(maxlen=MAX_SPANS)
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # the name http.server calls
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._receive(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def env(self) -> dict[str, str]:
        """What a process needs to export here, in batches sent every 200 ms."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url, "OTEL_BSP_SCHEDULE_DELAY": "200"}

    def _receive(self, request: ExportTraceServiceRequest) -> None:
        self.requests += 1
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            status_code=span.status.code,
                            attributes=_attributes(span.attributes),
                            resource=resource,
                        )
                    )

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in list(self.spans) if s.trace_id == trace_id]

    def wait_for(self, trace_id: str, name: str, timeout: float = 30) -> list[ReceivedSpan]:
        """The trace's spans, once one named ``name`` has arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.of_trace(trace_id)
            if any(s.name == name for s in spans):
                return spans
            time.sleep(0.1)
        got = sorted({s.name for s in self.of_trace(trace_id)})
        raise TimeoutError(f"No span {name!r} in trace {trace_id} after {timeout} s; got {got}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
