"""Admin for permissions and tools: policies with their rules, the explainer and the edit
simulator; the tool registry; the MCP whitelist."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.forms.formsets import all_valid
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from harness_console.web.admin import HidesEvalRows

from ..core.paths import PathRefused
from ..core.permissions import LimitContext, PolicyError
from ..core.permissions import Policy as CorePolicy
from ..core.policy_digest import decision_digest
from ..core.tool_specs import BUILTIN_TOOLS
from ..mcp_servers import mcp_discover
from ..models import (
    McpServer,
    Policy,
    PolicyRule,
    ToolDefinition,
)
from ..permissions import (
    parse_arguments,
    permission_check,
    policy_decision_digest,
    policy_from_row,
    verdict_report,
)
from ..policy_changes import policy_change_propose
from ..policy_revisions import POLICY_FIELDS, RULE_FIELDS, policy_record_edit, revision_record
from ..simulation import pending_bound, policy_edit_effect


class PolicyRuleInline(admin.StackedInline):
    """A rule on one line, its change window and rate limit folded beneath it (B6)."""

    model = PolicyRule
    extra = 0
    ordering = ("order", "id")
    fieldsets = [
        (None, {"fields": [("order", "key", "decision"), ("tool", "path"), "reason"]}),
        (
            "Change window and rate limit",
            {
                "classes": ["collapse"],
                "description": "Outside the window, or over the rate, the rule's decision "
                "turns into the ask or deny chosen here (never into anything less strict).",
                "fields": [
                    ("window_days", "window_start", "window_end", "window_timezone"),
                    "window_excluded",
                    "outside_window",
                    ("rate_limit", "rate_scope", "over_rate"),
                ],
            },
        ),
    ]
    formfield_overrides = {
        models.TextField: {"widget": forms.Textarea(attrs={"rows": 2, "cols": 60})}
    }


class PolicyTestForm(forms.Form):
    tool = forms.ChoiceField(choices=[(name, name) for name in sorted(BUILTIN_TOOLS)])
    path = forms.CharField(required=False, help_text="Relative to the workspace.")
    arguments = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text='The call\'s arguments as JSON, e.g. {"path": "docs/a.md"}.',
    )
    at = forms.DateTimeField(
        required=False,
        label="At",
        help_text="When the call is made, for a rule's change window: e.g. 2026-12-05 18:30 "
        "(UTC). Empty: now.",
    )
    calls_in_last_minute = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=1_000_000,
        label="Calls in the last minute",
        help_text="Calls the deciding rule already let through in the last 60 s (per its "
        "run, agent or workspace), for its rate limit. Empty: the rate is not asked.",
    )

    def limits(self) -> LimitContext:
        at = self.cleaned_data.get("at") or timezone.now()
        calls = self.cleaned_data.get("calls_in_last_minute")
        exceeded = None if calls is None else (lambda key, limit: calls >= limit)
        return LimitContext(at, {}, exceeded)


_DECIDED_BEFORE = "_harness_decided_before"


class PolicyForm(forms.ModelForm):
    change_note = forms.CharField(
        label="Note on this change",
        required=False,
        max_length=200,
        help_text="What changed and why: kept with the revision in the policy's history.",
    )

    class Meta:
        model = Policy
        fields = (
            "name",
            "description",
            "ceiling",
            "approval_expiry_minutes",
            "approval_reminder_minutes",
            "l3_approvals_required",
            "changes_need_second_admin",
        )


@admin.register(Policy)
class PolicyAdmin(HidesEvalRows):
    form = PolicyForm
    change_form_template = "admin/policies/policy_change_form.html"
    list_display = ("name", "ceiling", "version", "updated_at", "test_link")
    readonly_fields = ("version", "test_link", "history_link")
    fieldsets = [
        (
            None,
            {
                "fields": (
                    "name",
                    "description",
                    "ceiling",
                    "version",
                    "history_link",
                    "test_link",
                    "change_note",
                )
            },
        ),
        (
            "Approvals",
            {
                "fields": (
                    "approval_expiry_minutes",
                    "approval_reminder_minutes",
                    "l3_approvals_required",
                    "changes_need_second_admin",
                )
            },
        ),
    ]
    inlines = [PolicyRuleInline]

    class Media:
        css = {"all": ("css/admin.css",)}  # the rules fit a 1400 px screen (issue 19)

    @admin.display(description="Explain")
    def test_link(self, obj: Policy) -> str:
        if obj.pk is None:
            return "Save the policy first."
        return format_html(
            '<a href="{}">Test this policy…</a>',
            reverse("admin:policies_policy_test", args=[obj.pk]),
        )

    @admin.display(description="History")
    def history_link(self, obj: Policy) -> str:
        if obj.pk is None:
            return "—"
        count = obj.revisions.count()
        return format_html(
            '<a href="{}?policy__id__exact={}">{} revision{} (author, note, diff, restore)</a>',
            reverse("admin:policies_policyrevision_changelist"),
            obj.pk,
            count,
            "" if count == 1 else "s",
        )

    def save_model(self, request: HttpRequest, obj: Policy, form: Any, change: bool) -> None:
        # What the policy decided before this save, for ``save_related`` to compare; kept
        # on the instance (the admin object is shared by every request).
        setattr(obj, _DECIDED_BEFORE, policy_decision_digest(obj) if change else "")
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        note = form.cleaned_data.get("change_note", "")
        if not change:
            revision_record(policy=form.instance, author=request.user, note=note or "created")
        elif form.has_changed() or any(f.has_changed() for f in formsets):
            before = getattr(form.instance, _DECIDED_BEFORE, "")
            moved, _ = policy_record_edit(
                policy=form.instance, before=before, author=request.user, note=note
            )
            if not moved:
                messages.info(
                    request,
                    f"This edit changes no decision: {form.instance.name} stays at version "
                    f"{form.instance.version}, and no pending request is invalidated.",
                )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: Any = None,
        form_url: str = "",
        extra_context: Any = None,
    ) -> HttpResponse:
        if request.method == "POST" and "_simulate" in request.POST and object_id:
            return self.simulate_view(request, object_id)
        row = self.get_object(request, object_id) if object_id else None
        if request.method == "POST" and row is not None and row.changes_need_second_admin:
            proposed = self.propose_view(request, row)
            if proposed is not None:
                return proposed  # else the form has errors: the page shows them
        if row is not None:
            count, _ = pending_bound(row)
            extra_context = {**(extra_context or {}), "pending_bound_count": count}
        return super().changeform_view(request, object_id, form_url, extra_context)

    def _posted(self, request: HttpRequest, row: Policy) -> tuple[Any, list[Any], bool]:
        """The policy form and the rules' formsets as posted, and whether all are valid
        (ModelAdmin's own formset builder: the rules as the form posted them)."""
        form = self.get_form(request, row, change=True)(request.POST, instance=row)
        formsets, _ = self._create_formsets(request, row, change=True)  # type: ignore[attr-defined]
        return form, formsets, form.is_valid() and all_valid(formsets)

    def propose_view(self, request: HttpRequest, row: Policy) -> HttpResponse | None:
        """A policy whose changes need a second admin takes no edit at once: the posted
        edit becomes a proposal (B16), and the policy is left as it is. None when the form
        has errors, for the admin's own page to show them."""
        if not self.has_change_permission(request, row):
            raise PermissionDenied("Your role may not edit policies.")
        form, formsets, valid = self._posted(request, row)
        if not valid:
            return None
        rules = [
            {
                name: value.isoformat() if isinstance(value, dt.time) else value
                for name, value in ((n, f.cleaned_data.get(n)) for n in RULE_FIELDS)
            }
            for f in sorted(
                (
                    f
                    for f in formsets[0].forms
                    if f.cleaned_data and not f.cleaned_data.get("DELETE")
                ),
                key=lambda f: f.cleaned_data["order"],
            )
        ]
        for rule in rules:
            rule["path"], rule["reason"] = rule["path"] or "", rule["reason"] or ""
        snapshot = {name: form.cleaned_data[name] for name in POLICY_FIELDS} | {"rules": rules}
        change = policy_change_propose(
            policy=row,
            snapshot=snapshot,
            author=request.user,
            note=form.cleaned_data.get("change_note", ""),
        )
        messages.info(
            request,
            f"{row.name}'s changes need a second admin: your edit is proposed, not applied. "
            "Another admin approves or rejects it from the approval queue.",
        )
        return HttpResponseRedirect(
            reverse("admin:policies_policychangerequest_change", args=[change.pk])
        )

    def simulate_view(self, request: HttpRequest, object_id: Any) -> HttpResponse:
        """The edit in the form, decided against recent calls, and nothing saved."""
        row = self.get_object(request, object_id)
        if row is None or not self.has_change_permission(request, row):
            raise PermissionDenied("Your role may not edit policies.")
        current = policy_from_row(row)
        form, formsets, valid = self._posted(request, row)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"What this edit of {current.name} would change",
            "policy": row,
        }
        if valid:
            # Each form's instance holds its posted fields (the model form put them there).
            forms_in_order = sorted(
                (
                    f
                    for f in formsets[0].forms
                    if f.cleaned_data and not f.cleaned_data.get("DELETE")
                ),
                key=lambda f: f.cleaned_data["order"],
            )
            edited = CorePolicy(
                current.name,
                form.cleaned_data["ceiling"],
                tuple(f.instance.as_rule() for f in forms_in_order),
            )
            context["looked"], context["changed"] = policy_edit_effect(
                current=current, edited=edited
            )
            required = form.cleaned_data["l3_approvals_required"]
            context["decides_alike"] = policy_decision_digest(row) == decision_digest(
                edited, approvals_required=required
            )
            context["pending_count"], context["pending"] = pending_bound(row)
        else:
            context["error"] = "The edit has errors; go back to the form and fix them first."
        return TemplateResponse(request, "admin/policies/policy_simulation.html", context)

    def get_urls(self) -> list:
        wrap = self.admin_site.admin_view
        return [
            path("<int:pk>/test/", wrap(self.test_view), name="policies_policy_test"),
            *super().get_urls(),
        ]

    def test_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """ "Test a rule": a call in, the decision, the rule that decided and every rule
        considered out — the same engine the runs use."""
        if not self.has_view_permission(request):
            raise PermissionDenied("Your role may not read policies.")
        row = get_object_or_404(Policy, pk=pk)
        form = PolicyTestForm(request.GET or None)
        report = error = None
        if form.is_valid():
            try:
                verdict = permission_check(
                    policy=policy_from_row(row),
                    tool=form.cleaned_data["tool"],
                    path=form.cleaned_data["path"] or None,
                    arguments=parse_arguments(form.cleaned_data["arguments"]),
                    limits=form.limits(),
                )
            except (PolicyError, PathRefused) as problem:
                error = str(problem)
            else:
                report = verdict_report(verdict)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Test policy {row}",
            "policy": row,
            "form": form,
            "report": report,
            "error": error,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/policies/policy_test.html", context)


@admin.register(ToolDefinition)
class ToolDefinitionAdmin(HidesEvalRows):
    """The tool registry (SPEC T1, T2): admins tune descriptions, timeouts and retries, and
    an MCP tool's reach (each argument's kind, whole-root) and side effect, which discovery
    prefilled from the server's schema and hints (shown as the server sent them)."""

    list_display = (
        "name",
        "permission_level",
        "side_effect",
        "timeout_sec",
        "retry",
        "approval_required",
        "enabled",
        "source",
    )
    list_filter = ("source", "enabled", "permission_level", "side_effect", "whole_root")
    search_fields = ("name", "description")
    readonly_fields = ("annotations",)


@admin.register(McpServer)
class McpServerAdmin(HidesEvalRows):
    """The MCP whitelist (SPEC T12). "Refresh tools" asks the server for its tools and puts
    them in the registry; only the allowed ones can ever be called."""

    list_display = (
        "name",
        "command",
        "root",
        "permission_level",
        "rate_limit_per_minute",
        "enabled",
    )
    actions = ["refresh_tools"]

    @admin.action(description="Refresh the tools of the selected servers")
    def refresh_tools(self, request: HttpRequest, queryset: Any) -> None:
        for server in queryset:
            try:
                names = mcp_discover(server)
            except Exception as error:  # the server would not start or answer: say so
                self.message_user(
                    request,
                    f"{server.name}: could not list its tools ({type(error).__name__}: {error}).",
                    messages.ERROR,
                )
            else:
                self.message_user(request, f"{server.name}: {len(names)} tools in the registry.")
