"""Admin for agents and workspaces: who works and where, with the prompt preview (SPEC C8)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
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


MODEL_NAMES_LIST = "agent-model-names"


def model_names() -> list[str]:
    """The names the model field offers: the price table's, in force now (each also prices
    the names that begin with it and a hyphen), and the priced models agents already use.
    The console knows no other list of models: it cannot tell which the provider serves."""
    now, table = timezone.now(), prices()
    names = {price.model for price in table if price.effective_from <= now}
    used = Agent.objects.values_list("model", flat=True).distinct()
    names |= {name for name in used if price_in_force(table, name, now) is not None}
    return sorted(names)


class ModelNameInput(forms.TextInput):
    """A text box whose datalist holds the priced names: the browser offers them as the
    admin types."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__({"class": "vTextField", **(attrs or {}), "list": MODEL_NAMES_LIST})
        self.names: Iterable[str] = ()

    def render(self, name: str, value: Any, attrs: Any = None, renderer: Any = None) -> SafeString:
        box = super().render(name, value, attrs, renderer)
        options = format_html_join("", '<option value="{}"></option>', ((n,) for n in self.names))
        return format_html('{}<datalist id="{}">{}</datalist>', box, MODEL_NAMES_LIST, options)


class AgentForm(forms.ModelForm):
    """An agent's model must be one the price table prices (an exact name or a family
    prefix): a typo saved here would run and record no cost for any of its runs. That is
    the whole check: the console has no list of models beyond the price table."""

    class Meta:
        model = Agent
        exclude: tuple[str, ...] = ()
        widgets = {"model": ModelNameInput}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.names = model_names()
        if isinstance(widget := self.fields["model"].widget, ModelNameInput):
            widget.names = self.names

    def clean_model(self) -> str:
        name = self.cleaned_data["model"].strip()
        if price_in_force(prices(), name, timezone.now()) is None:
            raise forms.ValidationError(model_unpriced(name, self.names))
        return name


def model_unpriced(name: str, names: list[str]) -> str:
    """What the admin reads under the model field: what is checked, the nearest priced
    names, and every one."""
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    either = ", ".join(close[:-1]) + " or " + close[-1] if len(close) > 1 else "".join(close)
    nearest = f"Did you mean {either}? " if close else ""
    return (
        f"No price in the price table matches {name!r}, so its runs would record no cost. "
        f"{nearest}The name is checked against the price table only (Runs → Model prices): "
        "a priced name, or one that begins with a priced name and a hyphen "
        "(claude-sonnet-4 prices claude-sonnet-4-6). "
        f"Priced: {', '.join(names) or 'none'}. For another model, add its price first."
    )


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
