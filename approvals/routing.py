from __future__ import annotations

from harness_console.web.consumers import socket

from .consumers import ApprovalQueueConsumer

websocket_urlpatterns = [socket("ws/approvals/", ApprovalQueueConsumer)]
