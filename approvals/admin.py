"""Approvals in the admin: readable, never editable (SPEC A6). A decision is taken in the
queue or the API, where the checks are; the audit trail cannot be rewritten from here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from harness_console.web.admin import HidesEvalRows, ReadOnlyAdmin

from .models import ApprovalDecision, ApprovalRequest


class DecisionInline(admin.TabularInline):
    model = ApprovalDecision
    extra = 0
    can_delete = False
    fields = (
        "decided_at",
        "user",
        "decision",
        "comment",
        "shown_digest",
        "edited_diff",
        "rejected_hunks",
        "accepted_digest",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(HidesEvalRows, ReadOnlyAdmin):
    list_display = ("summary", "kind", "status", "risk", "run", "requested_at", "decided_by")
    list_filter = ("status", "kind", "risk")
    search_fields = ("summary", "tool", "comment")
    date_hierarchy = "requested_at"
    list_select_related = ("run", "decided_by")
    inlines = [DecisionInline]


@admin.register(ApprovalDecision)
class ApprovalDecisionAdmin(ReadOnlyAdmin):
    list_display = ("decided_at", "user", "decision", "approval")
    list_filter = ("decision",)
    list_select_related = ("user", "approval")
    search_fields = ("comment", "user__username")
