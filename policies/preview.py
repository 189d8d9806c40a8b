"""The admin's "Preview prompt" page (SPEC C8) and its "Reload from disk" button."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse

from .context import ContextError, context_build, context_report
from .instruction_cache import instructions_invalidate
from .models import Agent, Workspace
from .preview_chart import budget_chart
from .task_scope import scope_paths


class PreviewForm(forms.Form):
    workspace = forms.ModelChoiceField(queryset=Workspace.objects.all(), empty_label=None)
    task = forms.CharField(
        required=False, max_length=20_000, widget=forms.Textarea(attrs={"rows": 3, "cols": 80})
    )
    paths = forms.CharField(
        required=False,
        max_length=4_000,
        label="Paths",
        help_text="Files, folders or globs the task touches, one per line. Left empty, the "
        "paths the task names. Only the AGENTS.md files on the way to them are sent.",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
    )

    def clean_paths(self) -> list[str]:
        lines = [line.strip() for line in self.cleaned_data["paths"].splitlines()]
        paths = [line for line in lines if line]
        if len(paths) > 50:
            raise forms.ValidationError("Give at most 50 paths.")
        for path in paths:
            if path.startswith("/") or ".." in path.split("/"):  # NUL: the field refuses it
                raise forms.ValidationError(
                    f"{path!r}: give paths relative to the workspace, inside it."
                )
        return paths


def prompt_preview(request: HttpRequest, agent_id: int, each_context: dict) -> HttpResponse:
    agent = get_object_or_404(Agent, pk=agent_id)
    first = Workspace.objects.order_by("name").first()
    # Opening the page previews the first workspace at once; the form changes it.
    data = request.GET if "workspace" in request.GET else {"workspace": first.pk if first else ""}
    form = PreviewForm(data)
    report = chart = error = workspace = None
    if form.is_valid():
        workspace = form.cleaned_data["workspace"]
        try:
            task = form.cleaned_data["task"]
            paths = scope_paths(task, form.cleaned_data["paths"])
            built = context_build(agent=agent, workspace=workspace, task=task, paths=paths)
        except ContextError as problem:
            error = str(problem)
        else:
            report = context_report(built)
            chart = budget_chart(report)
    context = {
        **each_context,
        "title": f"Preview prompt: {agent.name}",
        "agent": agent,
        "form": form,
        "report": report,
        "chart": chart,
        "error": error,
        "workspace": workspace,
        "opts": Agent._meta,
    }
    return TemplateResponse(request, "admin/policies/prompt_preview.html", context)


def reload_from_disk(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = get_object_or_404(Agent, pk=agent_id)
    workspace = get_object_or_404(Workspace, pk=request.POST.get("workspace") or 0)
    instructions_invalidate(root=workspace.root)
    messages.success(request, f"The AGENTS.md files of {workspace.name} will be read again.")
    url = reverse("admin:policies_agent_preview", args=[agent.pk])
    query = urlencode(
        {
            "workspace": workspace.pk,
            "task": request.POST.get("task", ""),
            "paths": "\n".join(request.POST.getlist("path")),
        }
    )
    return HttpResponseRedirect(f"{url}?{query}")
