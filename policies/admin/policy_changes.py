"""Admin for policy changes waiting for a second admin (B16): the proposal's rule diff and
the simulator's result on recent calls, and the decision of an admin who is not its
author."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from harness_console.web.admin import HidesEvalRows

from ..models import PolicyChangeRequest
from ..policy_changes import may_decide_policy_changes, policy_change_decide


@admin.register(PolicyChangeRequest)
class PolicyChangeRequestAdmin(HidesEvalRows):
    list_display = ("policy", "status", "author", "note", "created_at", "decided_by")
    list_filter = ("status", "policy")
    list_select_related = ("policy", "author", "decided_by")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # proposed by saving a policy whose changes need a second admin

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        """The proposal, and (for an admin who did not write it) its decision form."""
        if not self.has_view_permission(request):
            raise PermissionDenied("Your role may not read policy changes.")
        change = get_object_or_404(PolicyChangeRequest, pk=object_id)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Policy change: {change.policy.name}",
            "change": change,
            "opts": self.model._meta,
            "may_decide": (
                change.status == PolicyChangeRequest.Status.PENDING
                and may_decide_policy_changes(request.user)
                and change.author_id != request.user.pk
            ),
            "own": change.author_id == request.user.pk,
        }
        return TemplateResponse(request, "admin/policies/policy_change_request.html", context)

    def get_urls(self) -> list:
        wrap = self.admin_site.admin_view
        return [
            path(
                "<int:pk>/decide/",
                wrap(self.decide_view),
                name="policies_policychangerequest_decide",
            ),
            *super().get_urls(),
        ]

    def decide_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        change = get_object_or_404(PolicyChangeRequest, pk=pk)
        back = reverse("admin:policies_policychangerequest_change", args=[change.pk])
        if request.method != "POST":
            return HttpResponseRedirect(back)
        try:
            decided = policy_change_decide(
                change=change,
                user=request.user,
                decision=request.POST.get("decision", ""),
                comment=request.POST.get("comment", ""),
            )
        except ValidationError as error:
            self.message_user(request, " ".join(error.messages), messages.ERROR)
            return HttpResponseRedirect(back)
        verb = "approved: it is in force" if decided.status == "approved" else decided.status
        self.message_user(request, f"The change to {change.policy.name} is {verb}.")
        return HttpResponseRedirect(back)
