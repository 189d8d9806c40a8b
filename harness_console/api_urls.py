"""The REST API (SPEC X3) under /api/, with its OpenAPI schema and browsable docs.

No format suffixes (``/api/runs/<id>/events.json`` is a 404): JSON is the default, and
``?format=json`` or an ``Accept`` header chooses a representation, so no route takes a
``format`` argument its handler does not expect. Every view, the schema and the docs
included, answers only users who hold one of the four roles.
"""

from __future__ import annotations

from typing import Any

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.routers import APIRootView, DefaultRouter

from approvals.api import ApprovalViewSet
from harness_console.roles import may_see_runs
from runs.api import RunViewSet


class HoldsARole(BasePermission):
    """Every role sees runs; a logged-in user in no role is refused like an outsider."""

    message = "Your account has no role in the console."

    def has_permission(self, request: Request, view: Any) -> bool:
        return may_see_runs(request.user)


class RootView(APIRootView):
    permission_classes = [HoldsARole]


class ConsoleRouter(DefaultRouter):
    include_format_suffixes = False
    APIRootView = RootView


router = ConsoleRouter()
router.register("runs", RunViewSet, basename="run")
router.register("approvals", ApprovalViewSet, basename="approval")

urlpatterns = [
    path("", include(router.urls)),
    path("schema/", SpectacularAPIView.as_view(permission_classes=[HoldsARole]), name="api-schema"),
    # The split view serves its start-up script as a file of its own: no inline script,
    # so the docs page keeps the console's Content-Security-Policy.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", permission_classes=[HoldsARole]),
        name="api-docs",
    ),
]
