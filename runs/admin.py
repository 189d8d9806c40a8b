"""Admin for the run domain. Runs and their events are records: readable, never rewritten."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html

from harness_console.roles import may_roll_back_tool_calls
from harness_console.web.admin import HidesEvalRows, ReadOnlyAdmin, ReadOnlyInline
from policies.core.paths import PathRefused

from .models import DailyRollup, DailyTotal, ModelPrice, Run, RunEvent, Step, ToolCall, WriteRecord
from .observability.core.cost import price_in_force
from .observability.pricing import price_version_create, prices
from .observability.rollups import rollups_fold
from .tools.rollback import RollbackRefused, tool_call_rollback


class RunEventInline(ReadOnlyInline):
    model = RunEvent
    fields = ("seq", "type", "payload", "created_at")
    readonly_fields = fields


@admin.register(Run)
class RunAdmin(HidesEvalRows, ReadOnlyAdmin):
    list_display = ("id", "agent", "workspace", "requester", "status", "created_at")
    list_filter = ("status", "agent", "workspace")
    search_fields = ("id", "request")
    inlines = [RunEventInline]


@admin.register(Step)
class StepAdmin(HidesEvalRows, ReadOnlyAdmin):
    list_display = ("run", "index", "name", "status", "started_at")


@admin.register(RunEvent)
class RunEventAdmin(HidesEvalRows, ReadOnlyAdmin):
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
class ToolCallAdmin(HidesEvalRows, ReadOnlyAdmin):
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
        return may_roll_back_tool_calls(request.user)


def price_text(value: Decimal) -> str:
    """A price as exact as it was entered, in at least cents: 0.80, 15.00, 0.000125."""
    whole, _, cents = f"{value.normalize():f}".partition(".")
    return f"{whole}.{cents.ljust(2, '0')}"


def price_column(field: str) -> Any:
    """A list column of a price as ``price_text`` writes it, sorted by the price."""
    label = getattr(ModelPrice._meta.get_field(field), "verbose_name", field)

    @admin.display(description=label, ordering=field)
    def column(obj: ModelPrice) -> str:
        return price_text(getattr(obj, field))

    column.__name__ = field  # the cells' class: field-input_per_mtok, ...
    return column


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """Prices are versioned (SPEC O4): saving a price, new or changed, records a new version
    from its "effective from" on; recorded costs keep the version they were made with.

    The list fits a 1400 px screen beside the filter (issue 19): prices without the
    stored zeros, the moment as ISO date and time, the model name whole (static/css/admin.css)."""

    list_display = (
        "model",
        "version",
        "effective",
        price_column("input_per_mtok"),
        price_column("output_per_mtok"),
        price_column("cache_write_per_mtok"),
        price_column("cache_read_per_mtok"),
        "in_force",
        "created_by",
    )
    list_filter = ("model",)
    search_fields = ("model", "note")
    readonly_fields = ("version", "created_by", "created_at")
    fields = (
        "model",
        "effective_from",
        "input_per_mtok",
        "output_per_mtok",
        "cache_write_per_mtok",
        "cache_read_per_mtok",
        "note",
        "version",
        "created_by",
        "created_at",
    )

    class Media:
        css = {"all": ("css/admin.css",)}

    @admin.display(description="effective from (UTC)", ordering="effective_from")
    def effective(self, obj: ModelPrice) -> str:
        return obj.effective_from.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")

    @admin.display(boolean=True, description="in force")
    def in_force(self, obj: ModelPrice) -> bool:
        current = price_in_force(prices(), obj.model, timezone.now())
        return current is not None and current.id == obj.pk

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"effective_from": timezone.now(), **super().get_changeform_initial_data(request)}

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change and "effective_from" not in form.changed_data:
            obj.effective_from = timezone.now()  # a changed price applies from now on
        price_version_create(source=obj, user=request.user)
        if change:
            messages.info(request, f"Saved as version {obj.version}; the earlier version is kept.")

    def response_change(self, request: HttpRequest, obj: Any) -> HttpResponse:
        # The change was saved as a new row: go back to the list, not to the old row.
        return self.response_post_save_change(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # recorded costs name the version they used


class FoldedFirst(admin.ModelAdmin):
    """The runs that ended since the last fold, in the rows before they are shown."""

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        rollups_fold()
        return super().changelist_view(request, extra_context)

    def change_view(self, request: HttpRequest, object_id: str, *args: Any, **kw: Any) -> Any:
        rollups_fold()
        return super().change_view(request, object_id, *args, **kw)


@admin.register(DailyRollup)
class DailyRollupAdmin(FoldedFirst, HidesEvalRows, ReadOnlyAdmin):
    list_display = ("day", "agent", "workspace", "updated_at")
    list_filter = ("day", "agent", "workspace")


@admin.register(DailyTotal)
class DailyTotalAdmin(FoldedFirst, ReadOnlyAdmin):
    list_display = ("day", "updated_at")
