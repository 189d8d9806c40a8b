"""The approval queue. Until approval requests exist (the runs issue adds them), it lists
the runs that wait for a human decision, which is what an approver needs to see first."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.core import status as run_status
from runs.models import Run


@login_required
def approval_queue(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm("runs.decide_approval"):
        raise PermissionDenied("Only approvers open the approval queue.")
    waiting = (
        Run.objects.filter(status=run_status.WAITING_FOR_APPROVAL)
        .select_related("agent", "requester")
        .order_by("updated_at")
    )
    return render(request, "approvals/queue.html", {"waiting": waiting})
