"""Admin for agents and workspaces: who works and where, with the prompt preview (SPEC C8)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from harness_console.web.admin import HidesEvalRows
from runs.observability.core.cost import price_in_force
from runs.observability.pricing import prices

from ..models import Agent, Workspace
from ..preview import prompt_preview, reload_from_disk
from .context import BusinessRuleInline, LayerConfigInline


@admin.register(Workspace)
class WorkspaceAdmin(HidesEvalRows):
    list_display = ("name", "slug", "root", "context_file")
    search_fields = ("name", "slug")


class AgentForm(forms.ModelForm):
    """An agent's model must be one the price table prices (an exact name or a family
    prefix): a typo saved here would run and record no cost for any of its runs."""

    class Meta:
        model = Agent
        exclude: tuple[str, ...] = ()

    def clean_model(self) -> str:
        name = self.cleaned_data["model"].strip()
        table = prices()
        if price_in_force(table, name, timezone.now()) is None:
            known = sorted({price.model for price in table})
            raise forms.ValidationError(
                f"No price in the price table matches {name!r}, so its runs would record no "
                f"cost. Priced models: {', '.join(known) or 'none'} (Runs → Model prices to "
                "add one first)."
            )
        return name


@admin.register(Agent)
class AgentAdmin(HidesEvalRows):
    form = AgentForm
    list_display = ("name", "slug", "model", "max_turns", "context_links")
    search_fields = ("name", "slug")
    readonly_fields = ("context_links",)
    inlines = [LayerConfigInline, BusinessRuleInline]

    @admin.display(description="Context")
    def context_links(self, obj: Agent) -> str:
        if obj.pk is None:
            return "Save the agent first."
        instructions = reverse("admin:policies_instructionversion_changelist")
        add = reverse("admin:policies_instructionversion_add")
        return format_html(
            '<a href="{}">Preview prompt</a> · <a href="{}?agent={}">Edit instructions</a>'
            ' · <a href="{}?agent__id__exact={}">Instruction history</a>',
            reverse("admin:policies_agent_preview", args=[obj.pk]),
            add,
            obj.pk,
            instructions,
            obj.pk,
        )

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("<int:agent_id>/preview/", wrap(self.preview_view), name="policies_agent_preview"),
            path(
                "<int:agent_id>/reload/",
                wrap(require_POST(self.reload_view)),
                name="policies_agent_reload",
            ),
            *super().get_urls(),
        ]

    def preview_view(self, request: HttpRequest, agent_id: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied("Your role may not preview prompts.")
        return prompt_preview(request, agent_id, self.admin_site.each_context(request))

    def reload_view(self, request: HttpRequest, agent_id: int) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied("Your role may not reload instructions.")
        return reload_from_disk(request, agent_id)
