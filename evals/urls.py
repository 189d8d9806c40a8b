"""The evals pages, under /evals/ (namespace ``evals``); "add to eval set" lives with its
run, under /runs/<id>/add-to-evals/."""

from __future__ import annotations

from django.urls import path

from evals import views as eval_views

app_name = "evals"
urlpatterns = [
    path("", eval_views.evals_index, name="index"),
    path("start/", eval_views.evals_start, name="start"),
    path("<str:suite_id>/", eval_views.evals_suite, name="suite"),
    path("<str:suite_id>/report.json", eval_views.evals_report, name="report"),
]
