"""A local HTTP server that speaks the Anthropic Messages API, for the real SDK to talk to.
Each test queues the answers it wants: a body, a status, headers, a delay. A bench gives a
``responder`` instead, which makes each answer from the request's body (bench/throughput.py:
the same script for every run, after a fixed latency)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    usage: dict[str, int] | None = None,
    model: str = "claude-test",
) -> Answer:
    return Answer(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage or {"input_tokens": 10, "output_tokens": 5},
        }
    )


def error(status: int, kind: str, text: str, **headers: str) -> Answer:
    return Answer({"type": "error", "error": {"type": kind, "message": text}}, status, headers)


class _Server(ThreadingHTTPServer):
    # A thread per connection; the listen backlog (5 by default) must hold a burst of
    # hundreds of runs calling at once, or their connections are refused.
    request_queue_size = 1024
    daemon_threads = True


class FakeAnthropic:
    """``keep_alive``: answer in HTTP/1.1 and keep the connection, as the real API does, so
    the SDK's pool reuses it; off (HTTP/1.0, a connection per call) unless a bench asks:
    there a connection set up and torn down at every call is CPU a worker would not spend
    against the real API."""

    def __init__(
        self,
        responder: Callable[[dict[str, Any]], Answer] | None = None,
        *,
        keep_alive: bool = False,
    ) -> None:
        self.answers: list[Answer] = []
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
            # Headers and body go in separate writes: on a kept connection Nagle's
            # algorithm would hold the body for the client's delayed ACK (40 ms).
            disable_nagle_algorithm = keep_alive

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # the name http.server calls
                length = int(self.headers.get("content-length", 0))
                request = {
                    "peer": self.client_address,  # a kept connection keeps its port
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": json.loads(self.rfile.read(length) or b"{}"),
                }
                fake.requests.append(request)
                if fake.responder is not None:
                    answer = fake.responder(request["body"])
                elif fake.answers:
                    answer = fake.answers.pop(0)
                else:
                    answer = error(500, "api_error", "none")
                time.sleep(answer.delay)
                data = json.dumps(answer.body).encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("request-id", f"req_{len(fake.requests)}")
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
