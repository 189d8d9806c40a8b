"""Admin for the run domain. Runs and their events are records: readable, never rewritten."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from policies.admin import BusinessRuleInline, LayerConfigInline
from policies.core.paths import PathRefused
from policies.preview import prompt_preview, reload_from_disk

from .models import Agent, Run, RunEvent, Step, ToolCall, Workspace, WriteRecord
from .tool_calls import RollbackRefused, tool_call_rollback


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "root", "context_file")
    search_fields = ("name", "slug")


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
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
            reverse("admin:runs_agent_preview", args=[obj.pk]),
            add,
            obj.pk,
            instructions,
            obj.pk,
        )

    def get_urls(self) -> list:
        wrap = self.admin_site.admin_view
        return [
            path("<int:agent_id>/preview/", wrap(self.preview_view), name="runs_agent_preview"),
            path(
                "<int:agent_id>/reload/",
                wrap(require_POST(self.reload_view)),
                name="runs_agent_reload",
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


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class RunEventInline(admin.TabularInline):
    model = RunEvent
    fields = ("seq", "type", "payload", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "workspace", "requester", "status", "created_at")
    list_filter = ("status", "agent", "workspace")
    search_fields = ("id", "request")
    inlines = [RunEventInline]


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ("run", "index", "name", "status", "started_at")


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "type", "created_at")
    list_filter = ("type",)


class WriteRecordInline(admin.TabularInline):
    model = WriteRecord
    fields = ("order", "path", "diff_block", "rolled_back_at")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Diff")
    def diff_block(self, obj: WriteRecord) -> str:
        return format_html("<pre class='diff'>{}</pre>", obj.diff)


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    """Every tool call with its decision (SPEC P6); writes can be rolled back from here."""

    list_display = ("started_at", "tool", "path", "decision", "rule", "status", "workspace", "run")
    list_filter = ("status", "decision", "tool")
    search_fields = ("tool", "path", "reason")
    inlines = [WriteRecordInline]
    actions = ["roll_back"]

    @admin.action(
        description="Roll back the writes of the selected calls", permissions=["rollback"]
    )
    def roll_back(self, request: HttpRequest, queryset: Any) -> None:
        for tool_call in queryset:
            try:
                paths = tool_call_rollback(tool_call=tool_call)
            except (RollbackRefused, PathRefused) as error:
                self.message_user(request, f"{tool_call.tool}: {error}", messages.ERROR)
            else:
                self.message_user(request, f"{tool_call.tool}: restored {', '.join(paths)}.")

    def has_rollback_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("runs.change_toolcall")
