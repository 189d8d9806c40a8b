"""Admin for hook bindings (SPEC C7): which shipped handler runs at which phase, in what order,
for which agents, with what settings, time limit and failure mode."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.utils.html import format_html, format_html_join

from harness_console.web.admin import HidesEvalRows

from ..core.hook_handlers import HANDLERS
from ..models import HookBinding


class HookBindingForm(forms.ModelForm):
    class Meta:
        model = HookBinding
        fields = (
            "phase",
            "handler",
            "settings",
            "order",
            "agent",
            "enabled",
            "fail_open",
            "time_limit_seconds",
        )
        widgets = {"settings": forms.Textarea(attrs={"rows": 8, "cols": 80})}

    def clean_settings(self) -> Any:
        settings = self.cleaned_data.get("settings")
        return {} if settings in (None, "") else settings


@admin.register(HookBinding)
class HookBindingAdmin(HidesEvalRows):
    form = HookBindingForm
    list_display = (
        "phase",
        "order",
        "handler",
        "agent",
        "enabled",
        "fail_open",
        "time_limit_seconds",
        "updated_at",
    )
    list_filter = ("phase", "handler", "enabled", "fail_open")
    ordering = ("phase", "order", "id")
    readonly_fields = ("handler_reference",)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "phase",
                    "handler",
                    "settings",
                    "order",
                    "agent",
                    "enabled",
                    "fail_open",
                    "time_limit_seconds",
                )
            },
        ),
        ("Handlers", {"fields": ("handler_reference",)}),
    )

    @admin.display(description="What each handler does")
    def handler_reference(self, obj: HookBinding | None = None) -> str:
        rows = format_html_join(
            "",
            "<tr><td><strong>{}</strong></td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            (
                (spec.name, ", ".join(spec.phases), spec.description, json.dumps(spec.example))
                for spec in HANDLERS.values()
            ),
        )
        return format_html(
            "<table><tr><th>Handler</th><th>Phases</th><th>Does</th><th>Example settings</th>"
            "</tr>{}</table>",
            rows,
        )
