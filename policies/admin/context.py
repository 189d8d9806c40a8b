"""Admin for context configuration: layer overrides and business rules inline on the agent,
instruction versions with history, diff and restore."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from harness_console.web.admin import HidesEvalRows

from ..core.diffs import text_diff
from ..core.layers import DEFAULT_LAYERS
from ..models import (
    Agent,
    BusinessRule,
    InstructionVersion,
    LayerConfig,
)
from ..services import (
    InstructionError,
    instruction_restore,
    instruction_update,
    instructions_current,
)


class LayerConfigFormSet(BaseInlineFormSet):
    """Refuse two rows for one layer, or two layers at one position, with a clear message."""

    def clean(self) -> None:
        self._refuse_duplicates()  # before Django's generic "Please correct the duplicate data"
        super().clean()

    def _refuse_duplicates(self) -> None:
        seen_names: set[str] = set()
        seen_positions: dict[int, str] = {}
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or data.get("DELETE"):
                continue
            name, position = data.get("name"), data.get("position")
            if name in seen_names:
                raise ValidationError(f"The layer {name} is configured twice; keep one row.")
            seen_names.add(name)
            if position is None:
                continue
            if position in seen_positions:
                raise ValidationError(
                    f"{seen_positions[position]} and {name} both sit at position {position}; "
                    "give each layer its own position."
                )
            seen_positions[position] = name


class LayerConfigForm(forms.ModelForm):
    class Meta:
        model = LayerConfig
        fields = ("name", "position", "strategy", "budget")
        error_messages = {"budget": {"min_value": "A budget cannot be negative."}}
        help_texts = {
            "position": "Empty keeps the default.",
            "strategy": "Empty keeps the default.",
            "budget": "Tokens; empty keeps the default, 0 leaves the layer out.",
        }


class LayerConfigInline(admin.TabularInline):
    model = LayerConfig
    form = LayerConfigForm
    formset = LayerConfigFormSet
    extra = 0
    fields = ("name", "position", "strategy", "budget")
    verbose_name = "layer override"
    verbose_name_plural = (
        "Layer overrides (layers not listed keep their defaults; the defaults are: "
        + "; ".join(
            f"{spec.position}. {spec.name} {spec.strategy} {spec.budget:,}"
            for spec in DEFAULT_LAYERS
        )
        + ")"
    )


class BusinessRuleInline(admin.TabularInline):
    model = BusinessRule
    extra = 0
    fields = ("text", "active", "created_at")
    readonly_fields = ("created_at",)


class InstructionForm(forms.ModelForm):
    class Meta:
        model = InstructionVersion
        fields = ("agent", "text", "note")
        widgets = {"text": forms.Textarea(attrs={"rows": 24, "cols": 100})}


@admin.register(InstructionVersion)
class InstructionVersionAdmin(HidesEvalRows):
    """Saving adds a version; nothing is ever changed or deleted. Restore copies forward."""

    form = InstructionForm
    list_display = ("__str__", "author", "created_at", "note")
    list_filter = ("agent",)
    readonly_fields = (
        "agent",
        "version",
        "author",
        "created_at",
        "note",
        "restored_from",
        "text_block",
        "diff_from_previous",
        "actions_block",
    )
    fields = readonly_fields

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("agent", "text", "note") if obj is None else self.readonly_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.readonly_fields

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        # From the history filtered by agent, "Add" carries the filter along: use it.
        filters = QueryDict(request.GET.get("_changelist_filters", ""))
        raw = str(initial.get("agent") or filters.get("agent__id__exact") or "")
        if raw.isdigit():
            initial["agent"] = raw
        agent = Agent.objects.filter(pk=int(raw)).first() if raw.isdigit() else None
        current = instructions_current(agent) if agent else None
        if current:
            initial["text"] = current.text
        return initial

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        saved = instruction_update(
            agent=obj.agent, text=obj.text, author=request.user, note=obj.note
        )
        obj.pk, obj.version = saved.pk, saved.version

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: Any = None):
        try:
            return super().add_view(request, form_url, extra_context)
        except InstructionError as error:
            self.message_user(request, str(error), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    @admin.display(description="Text")
    def text_block(self, obj: InstructionVersion) -> str:
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", obj.text)

    @admin.display(description="Diff from the previous version")
    def diff_from_previous(self, obj: InstructionVersion) -> str:
        previous = (
            InstructionVersion.objects.filter(agent=obj.agent, version__lt=obj.version)
            .order_by("-version")
            .first()
        )
        old, label = (previous.text, f"v{previous.version}") if previous else ("", "(none)")
        diff = text_diff(old, obj.text, label, f"v{obj.version}") or "(no change)"
        return format_html("<pre class='diff'>{}</pre>", diff)

    @admin.display(description="Actions")
    def actions_block(self, obj: InstructionVersion) -> str:
        return format_html(
            '<a href="{}">Compare with another version</a> · '
            '<a href="{}">Restore this version…</a>',
            reverse("admin:policies_instructionversion_compare", args=[obj.pk]),
            reverse("admin:policies_instructionversion_restore", args=[obj.pk]),
        )

    def get_urls(self) -> list:
        wrap = self.admin_site.admin_view
        return [
            path(
                "<int:pk>/restore/",
                wrap(self.restore_view),
                name="policies_instructionversion_restore",
            ),
            path(
                "<int:pk>/compare/",
                wrap(self.compare_view),
                name="policies_instructionversion_compare",
            ),
            *super().get_urls(),
        ]

    def restore_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied("Your role may not edit instructions.")
        version = get_object_or_404(InstructionVersion, pk=pk)
        if request.method == "POST":
            restored = instruction_restore(version=version, author=request.user)
            self.message_user(
                request, f"Version {version.version} restored as version {restored.version}."
            )
            return HttpResponseRedirect(
                reverse("admin:policies_instructionversion_change", args=[restored.pk])
            )
        current = instructions_current(version.agent)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Restore {version}?",
            "version": version,
            "diff": text_diff(
                current.text if current else "",
                version.text,
                f"current v{current.version if current else 0}",
                f"v{version.version}",
            ),
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/policies/instruction_restore.html", context)

    def compare_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied("Your role may not read instructions.")
        version = get_object_or_404(InstructionVersion, pk=pk)
        others = InstructionVersion.objects.filter(agent=version.agent).exclude(pk=pk)
        raw_against = request.GET.get("against") or ""
        against = others.filter(pk=int(raw_against)).first() if raw_against.isdigit() else None
        if raw_against and against is None:
            self.message_user(
                request, f"No other version {raw_against!r} of this agent.", messages.WARNING
            )
        diff = ""
        if against is not None:
            diff = (
                text_diff(against.text, version.text, f"v{against.version}", f"v{version.version}")
                or "(no change)"
            )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Compare {version}",
            "version": version,
            "others": others,
            "against": against,
            "diff": diff,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/policies/instruction_compare.html", context)
