from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from evals.views import eval_case_add
from runs.observability.dashboards.views import ops_dashboard
from runs.observability.metrics_view import metrics_view

from .views import home

urlpatterns = [
    path("", home, name="home"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("runs/", include("runs.urls")),
    # "Add to eval set" lives with its run; the eval set owns it.
    path("runs/<str:run_id>/add-to-evals/", eval_case_add, name="eval_case_add"),
    path("approvals/", include("approvals.urls")),
    # The dashboards' home is the operations dashboard (the navigation links here).
    path("dashboards/", ops_dashboard, name="dashboards"),
    path("dashboards/", include("runs.observability.dashboards.urls")),
    path("evals/", include("evals.urls")),
    path("api/", include("harness_console.api_urls")),
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    # Pages that do not name an icon (the admin's) make browsers ask for this one.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
]
