"""The page a decide-from-anywhere link opens (issue 18, B14): a confirmation, never a
decision on GET. Thin: check who is asking, read the link (``approvals.links``), render, or
on POST decide through ``links.link_decide`` with the run side's door."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from harness_console.roles import may_decide
from runs.approval_outcomes import approval_decide

from .links import LinkReading, LinkRefused, link_decide, link_read
from .models import ApprovalRequest
from .outcomes import AlreadyDecided

# A link that is not ours (or was altered) is a bad request; one that was ours but can no
# longer decide (used, expired, decided, changed) is gone: the page says which.
REFUSAL_STATUS = {"bad_signature": 400, "used": 410, "expired": 410, "decided": 410, "changed": 410}


@never_cache  # the token is in the URL: no shared cache keeps the page
@login_required
@require_http_methods(["GET", "POST"])
def approval_link(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows what the link would do and asks to confirm; POST decides, once."""
    user: Any = request.user  # logged in (login_required)
    if not may_decide(user):
        raise PermissionDenied("Only approvers decide approval requests.")
    reading = link_read(token=token)
    approval = reading.approval
    if approval is not None and approval.run.requester_id == user.pk:
        own = "You cannot decide on your own run: another approver decides it."
        return _refused(request, reading, status=403, message=own)
    if not reading.valid or approval is None or reading.claim is None:
        return _refused(request, reading, status=REFUSAL_STATUS[reading.state])
    if approval.decisions.filter(user_id=user.pk).exists():
        voted = "You approved this already; the other approvers it needs decide the rest."
        return _refused(request, reading, status=410, message=voted)
    if reading.claim.decision == "approve" and (nothing := approval.approve_refusal):
        return _refused(request, reading, status=409, message=nothing)
    if request.method == "GET":
        return _confirm(request, reading)
    typed = {"comment": request.POST.get("comment", ""), "confirm": request.POST.get("confirm", "")}
    try:
        outcome = link_decide(token=token, user=user, decide=approval_decide, **typed)
    except LinkRefused as refused:
        return _refused(request, refused.reading, status=REFUSAL_STATUS[refused.reading.state])
    except AlreadyDecided as error:
        return _refused(request, link_read(token=token), status=410, message=str(error))
    except ValidationError as error:
        problems = error.message_dict if hasattr(error, "error_dict") else {"": error.messages}
        return _confirm(request, reading, typed=typed, errors=problems, status=400)
    messages.success(request, _decided_message(outcome.approval, reading.claim.decision))
    return redirect("approvals:review", approval_id=approval.pk)


def _confirm(
    request: HttpRequest,
    reading: LinkReading,
    *,
    typed: dict[str, str] | None = None,
    errors: dict[str, list[str]] | None = None,
    status: int = 200,
) -> HttpResponse:
    assert reading.approval is not None and reading.claim is not None
    approval = reading.approval
    errors = errors or {}
    context: dict[str, Any] = {
        "approval": approval,
        "run": approval.run,
        "decision": reading.claim.decision,
        "needs_confirm": reading.claim.decision == "approve" and approval.strong_confirmation,
        "typed": typed or {},
        "errors": {field: " ".join(texts) for field, texts in errors.items()},
        "other_errors": [t for f, texts in errors.items() if f not in FIELDS for t in texts],
    }
    return render(request, "approvals/link_confirm.html", context, status=status)


FIELDS = ("comment", "confirm")


def _refused(
    request: HttpRequest, reading: LinkReading, *, status: int, message: str = ""
) -> HttpResponse:
    context = {
        "approval": reading.approval,
        "state": reading.state,
        "message": message or reading.message,
    }
    return render(request, "approvals/link_refused.html", context, status=status)


def _decided_message(approval: ApprovalRequest, decision: str) -> str:
    what = f"“{approval.summary or approval.get_kind_display()}”"
    if approval.is_pending:  # one vote of several (A4)
        return f"Your approval of {what} is recorded; it needs more approvers."
    verb = "Approved" if decision == "approve" else "Rejected"
    return f"{verb} {what} from the link."
