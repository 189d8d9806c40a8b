"""A local HTTP endpoint that records the webhook POSTs it receives over real HTTP (hooks,
approval notifications), answering ``status``."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookSink:
    """Each POST is kept in ``posts`` as {path, headers, raw, body (JSON, or None)}."""

    def __init__(self, status: int = 204, path: str = "/hooks/harness") -> None:
        self.posts: list[dict[str, Any]] = []
        self.status = status
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the name http.server calls
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = None
                sink.posts.append(
                    {"path": self.path, "headers": dict(self.headers), "raw": raw, "body": body}
                )
                self.send_response(sink.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}{path}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> bytes:
        """The first raw body that satisfies ``predicate``, waiting for it to arrive."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for post in list(self.posts):
                if predicate(post["raw"]):
                    return post["raw"]
            time.sleep(0.05)
        raise AssertionError(f"No webhook call matched within {timeout} s: {self.posts!r}")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
