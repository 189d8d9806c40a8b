from __future__ import annotations

from django.urls import path

from . import views

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("new/", views.run_new, name="new"),
    path("<str:run_id>/", views.run_detail, name="detail"),
    path("<str:run_id>/panel/", views.run_panel, name="panel"),
    path("<str:run_id>/cancel/", views.run_cancel_view, name="cancel"),
    path("<str:run_id>/rollback/", views.run_rollback_view, name="rollback"),
    path("<str:run_id>/answer/", views.run_answer_view, name="answer"),
    path(
        "<str:run_id>/grants/<int:grant_id>/revoke/", views.grant_revoke_view, name="grant_revoke"
    ),
]
