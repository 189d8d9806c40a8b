"""Admin pages for records: readable by whoever may view them, never added, changed or
deleted from the admin (runs and their events, tool calls, rollups, eval results)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class EvalSetFilter(admin.SimpleListFilter):
    """The eval set's rows (agents, workspaces, policies, MCP servers, their runs...) are
    left out of the admin's lists unless asked for: a suite makes dozens of them."""

    title = "eval set"
    parameter_name = "eval_set"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("shown", "Shown too"), ("only", "Only the eval set's")]

    def choices(self, changelist: Any) -> Any:
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "Hidden",
        }
        for value, label in self.lookup_choices:
            yield {
                "selected": self.value() == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() == "shown":
            return queryset
        if self.value() == "only":
            return queryset.of_evals()
        return queryset.without_evals()


class RelatedWithoutEvals(admin.RelatedFieldListFilter):
    """A list filter by a related row (an agent, a workspace) that offers no eval row."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        related = field.remote_field.model
        if not hasattr(related, "EVAL_FLAG"):
            return super().field_choices(field, request, model_admin)
        return [(row.pk, str(row)) for row in related.objects.without_evals()]


class HidesEvalRows(admin.ModelAdmin):
    """An admin whose list hides the eval set's rows by default (EvalSetFilter) and whose
    dropdowns offer none of them — except on the page of an eval row itself, which keeps
    its own."""

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = []
        for entry in super().get_list_filter(request):
            field = _relation(self.model, entry)
            filters.append((entry, RelatedWithoutEvals) if field is not None else entry)
        return (*filters, EvalSetFilter)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        flag = getattr(type(obj), "EVAL_FLAG", None) if obj is not None else None
        editing_eval = bool(flag) and type(obj).objects.filter(pk=obj.pk).of_evals().exists()
        request.editing_eval_row = editing_eval  # type: ignore[attr-defined]
        request.editing_row = obj  # type: ignore[attr-defined]
        return super().get_form(request, obj, change=change, **kwargs)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        related = db_field.remote_field.model
        editing_eval = getattr(request, "editing_eval_row", False)
        if "queryset" not in kwargs and hasattr(related, "EVAL_FLAG") and not editing_eval:
            # The row's own current choice stays offered, whatever it is: saving it must
            # not fail with "Select a valid choice".
            current = getattr(getattr(request, "editing_row", None), db_field.attname, None)
            kwargs["queryset"] = related.objects.without_evals() | related.objects.filter(
                pk=current
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def _relation(model: Any, entry: Any) -> Any:
    """The foreign key a list filter entry names, if it leads to an eval-aware model."""
    if not isinstance(entry, str) or "__" in entry:
        return None
    try:
        field = model._meta.get_field(entry)
    except Exception:  # a filter on something else than a field
        return None
    related = getattr(field, "related_model", None)
    return field if field.is_relation and hasattr(related, "EVAL_FLAG") else None
