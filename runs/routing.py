from __future__ import annotations

from django.urls import path

from .consumers import RunEventsConsumer
from .observability.dashboards.consumers import OpsDashboardConsumer

websocket_urlpatterns = [
    path("ws/runs/<str:run_id>/", RunEventsConsumer.as_asgi()),
    path("ws/dashboards/ops/", OpsDashboardConsumer.as_asgi()),
]
