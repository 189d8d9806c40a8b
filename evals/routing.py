from __future__ import annotations

from harness_console.web.consumers import socket

from .consumers import EvalSuitesConsumer

websocket_urlpatterns = [socket("ws/evals/", EvalSuitesConsumer)]
