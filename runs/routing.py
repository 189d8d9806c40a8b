from __future__ import annotations

from django.urls import path

from .consumers import RunEventsConsumer

websocket_urlpatterns = [
    path("ws/runs/<str:run_id>/", RunEventsConsumer.as_asgi()),
]
