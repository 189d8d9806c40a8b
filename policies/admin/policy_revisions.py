"""Admin for policy revisions (B16): each saved edit with its author and note, its text and
its diff from the one before; any two compared; any one restored as a new edit."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from harness_console.web.admin import HidesEvalRows

from ..models import Policy, PolicyRevision
from ..policy_changes import policy_change_propose
from ..policy_revisions import revision_restore, revision_text, revisions_diff


@admin.register(PolicyRevision)
class PolicyRevisionAdmin(HidesEvalRows):
    list_display = ("policy", "number", "decision_version", "author", "note", "created_at")
    list_filter = ("policy",)
    list_select_related = ("policy", "author")
    readonly_fields = (
        "policy",
        "number",
        "decision_version",
        "author",
        "note",
        "created_at",
        "restored_from",
        "text_block",
        "diff_from_previous",
        "actions_block",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a revision is made by saving the policy

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="The policy at this revision")
    def text_block(self, obj: PolicyRevision) -> str:
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", revision_text(obj))

    @admin.display(description="Diff from the previous revision")
    def diff_from_previous(self, obj: PolicyRevision) -> str:
        previous = (
            PolicyRevision.objects.filter(policy=obj.policy, number__lt=obj.number)
            .order_by("-number")
            .first()
        )
        return format_html("<pre class='diff'>{}</pre>", revisions_diff(previous, obj))

    @admin.display(description="Actions")
    def actions_block(self, obj: PolicyRevision) -> str:
        return format_html(
            '<a href="{}">Compare with another revision</a> · <a href="{}">Restore this '
            "revision…</a>",
            reverse("admin:policies_policyrevision_compare", args=[obj.pk]),
            reverse("admin:policies_policyrevision_restore", args=[obj.pk]),
        )

    def get_urls(self) -> list:
        wrap = self.admin_site.admin_view
        return [
            path(
                "<int:pk>/restore/",
                wrap(self.restore_view),
                name="policies_policyrevision_restore",
            ),
            path(
                "<int:pk>/compare/",
                wrap(self.compare_view),
                name="policies_policyrevision_compare",
            ),
            *super().get_urls(),
        ]

    def restore_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """What restoring would change against the policy in force, then (POST) the restore:
        a new revision, never a rewritten one."""
        revision = get_object_or_404(PolicyRevision, pk=pk)
        if not self.admin_site._registry[Policy].has_change_permission(request, revision.policy):
            raise PermissionDenied("Your role may not edit policies.")
        if request.method == "POST" and revision.policy.changes_need_second_admin:
            change = policy_change_propose(
                policy=revision.policy,
                snapshot=revision.snapshot,
                author=request.user,
                note=f"restore revision {revision.number}",
            )
            self.message_user(
                request,
                f"{revision.policy}'s changes need a second admin: the restore is proposed, "
                "not applied.",
            )
            return HttpResponseRedirect(
                reverse("admin:policies_policychangerequest_change", args=[change.pk])
            )
        if request.method == "POST":
            restored = revision_restore(revision=revision, author=request.user)
            self.message_user(
                request,
                f"Revision {revision.number} of {revision.policy} restored as revision "
                f"{restored.number} (decision version {restored.decision_version}).",
            )
            return HttpResponseRedirect(
                reverse("admin:policies_policyrevision_change", args=[restored.pk])
            )
        current = revision.policy.revisions.order_by("-number").first()
        context = {
            **self.admin_site.each_context(request),
            "title": f"Restore {revision}?",
            "revision": revision,
            "diff": revisions_diff(current, revision),
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/policies/policy_revision_restore.html", context)

    def compare_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied("Your role may not read policies.")
        revision = get_object_or_404(PolicyRevision, pk=pk)
        others = PolicyRevision.objects.filter(policy=revision.policy).exclude(pk=pk)
        raw = request.GET.get("against") or ""
        against = others.filter(pk=int(raw)).first() if raw.isdigit() else None
        if raw and against is None:
            self.message_user(request, f"No other revision {raw!r} of this policy.", "warning")
        context = {
            **self.admin_site.each_context(request),
            "title": f"Compare {revision}",
            "revision": revision,
            "others": others,
            "against": against,
            "diff": revisions_diff(against, revision) if against is not None else "",
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/policies/policy_revision_compare.html", context)
