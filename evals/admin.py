"""Admin for the eval set's records: the console's cases (only "active" is editable) and the
suite runs with their results, read-only."""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from harness_console.web.admin import ReadOnlyAdmin, ReadOnlyInline

from .models import EvalCase, EvalResult, EvalSuiteRun


@admin.register(EvalCase)
class EvalCaseAdmin(admin.ModelAdmin):
    """The console's own eval cases (SPEC E1). Their data is what the suite replays, built
    from a run by evals.from_runs and validated there: read-only here, so an edit cannot
    slip a case past validation. Untick "active" to stop running one."""

    list_display = ("name", "title", "source_run", "created_by", "active", "created_at")
    list_filter = ("active", "category")
    search_fields = ("name", "title")
    fields = (
        "name",
        "category",
        "title",
        "active",
        "source_run",
        "created_by",
        "created_at",
        "data_json",
    )
    readonly_fields = ("name", "category", "source_run", "created_by", "created_at", "data_json")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a case comes from a failed run's page ("Add to eval set")

    @admin.display(description="Data")
    def data_json(self, obj: EvalCase) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.data, indent=2, ensure_ascii=False))


class EvalResultInline(ReadOnlyInline):
    model = EvalResult
    fields = ("case", "category", "passed", "skipped", "failures", "run", "seconds")
    readonly_fields = fields


@admin.register(EvalSuiteRun)
class EvalSuiteRunAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "model", "category", "status", "passed", "failed", "skipped")
    list_filter = ("status", "model")
    inlines = [EvalResultInline]


@admin.register(EvalResult)
class EvalResultAdmin(ReadOnlyAdmin):
    list_display = ("suite", "case", "category", "passed", "skipped", "run")
    list_filter = ("category", "passed", "skipped")
    search_fields = ("case", "title")
