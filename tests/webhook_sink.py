"""A local HTTP server that records the webhook POSTs it receives (approval notifications)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookSink:
    """Started by a test (or the live stack); ``received`` holds (headers, body) pairs."""

    def __init__(self, status: int = 204) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.status = status
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.received.append((dict(self.headers), body))
                self.send_response(sink.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/hook"

    def bodies(self) -> list[bytes]:
        return [body for _, body in self.received]

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> bytes:
        """The first body that satisfies ``predicate``, waiting for it to arrive."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for body in self.bodies():
                if predicate(body):
                    return body
            time.sleep(0.05)
        raise AssertionError(f"No webhook call matched within {timeout} s: {self.bodies()!r}")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
