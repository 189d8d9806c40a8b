"""The approval queue: pending approval requests, oldest first. The full review queue
(filters, live updates, the diff review page) is issue 6; deciding happens on the run page
and through the API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from .models import ApprovalRequest


@login_required
def approval_queue(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm("runs.decide_approval"):
        raise PermissionDenied("Only approvers open the approval queue.")
    pending = (
        ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING)
        .select_related("run__agent", "run__requester")
        .order_by("requested_at")
    )
    own = pending.filter(run__requester=request.user).count()
    # A requester never decides on their own run (A4): those are not theirs to work on.
    pending = pending.exclude(run__requester=request.user)[:500]
    return render(request, "approvals/queue.html", {"pending": pending, "own": own})
