from __future__ import annotations

from django.urls import path

from . import link_views, views

app_name = "approvals"
urlpatterns = [
    path("", views.approval_queue, name="queue"),
    path("history/", views.approval_history, name="history"),
    path("count/", views.approval_count, name="count"),
    path("group/decide/", views.approval_group_decide_view, name="decide_group"),
    path("link/<str:token>/", link_views.approval_link, name="link"),
    path("<uuid:approval_id>/", views.approval_review, name="review"),
    path("<uuid:approval_id>/decide/", views.approval_decide_view, name="decide"),
]
