from __future__ import annotations

from django.urls import path

from . import views

app_name = "approvals"
urlpatterns = [path("", views.approval_queue, name="queue")]
