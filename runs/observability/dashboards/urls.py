"""The dashboards' pages, under /dashboards/ (namespace ``dashboards``)."""

from __future__ import annotations

from django.urls import path

from runs.observability.dashboards import views as dashboard_views

app_name = "dashboards"
urlpatterns = [
    path("ops/", dashboard_views.ops_dashboard, name="ops"),
    path("retro/", dashboard_views.retro_dashboard, name="retro"),
]
