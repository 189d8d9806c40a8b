"""The REST API (SPEC X3) under /api/, with its OpenAPI schema and browsable docs."""

from __future__ import annotations

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from approvals.api import ApprovalViewSet
from runs.api import RunViewSet

router = DefaultRouter()
router.register("runs", RunViewSet, basename="run")
router.register("approvals", ApprovalViewSet, basename="approval")

urlpatterns = [
    path("", include(router.urls)),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
