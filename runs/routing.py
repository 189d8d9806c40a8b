from __future__ import annotations

from harness_console.web.consumers import socket

from .consumers import RunEventsConsumer
from .observability.dashboards.consumers import OpsDashboardConsumer

websocket_urlpatterns = [
    socket("ws/runs/<str:run_id>/", RunEventsConsumer),
    socket("ws/dashboards/ops/", OpsDashboardConsumer),
]
