"""Deciding an approval request (SPEC P5, A3, A4): one service, atomic, and it resumes the run."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from runs.core import status as run_status
from runs.models import Run
from runs.services import (
    run_dispatch,
    run_event_append,
    run_transition,
    session_end_dispatch,
    steps_close,
)

from .models import ApprovalRequest

DECISIONS = ("approve", "reject")
MAX_COMMENT_CHARS = 4000


class AlreadyDecided(Exception):
    """Someone else decided first (or the request expired or was cancelled): HTTP 409."""

    def __init__(self, approval: ApprovalRequest) -> None:
        self.approval = approval
        who = approval.decided_by.get_username() if approval.decided_by else "the harness"
        super().__init__(f"This request is already {approval.status} (by {who}).")


def approval_decide(
    *,
    approval: ApprovalRequest,
    user: Any,
    decision: str,
    comment: str = "",
    confirm: str = "",
    remember: bool = False,
) -> ApprovalRequest:
    """Approve or reject; of two concurrent decisions exactly one wins (the other gets
    :class:`AlreadyDecided`). The run resumes: an approved or rejected tool call goes back
    to the loop (the model hears of a rejection); a rejected commit fails the run."""
    if not (user.is_authenticated and user.has_perm("runs.decide_approval")):
        raise PermissionDenied("Only approvers decide approval requests.")
    if approval.run.requester_id == user.pk:
        raise PermissionDenied("A requester cannot decide on their own run.")
    errors = {}
    if decision not in DECISIONS:
        errors["decision"] = "Choose approve or reject."
    comment = (comment or "").strip()
    if "\x00" in comment or "\x00" in (confirm or ""):
        errors["comment"] = "The comment cannot contain a NUL character."
    elif len(comment) > MAX_COMMENT_CHARS:
        errors["comment"] = f"Keep the comment under {MAX_COMMENT_CHARS} characters."
    elif decision == "reject" and not comment:
        errors["comment"] = "Say why you reject it: the requester and the model read this."
    if decision == "approve" and approval.strong_confirmation:
        expected = approval.paths[0] if approval.paths else ""
        if (confirm or "").strip() != expected:
            errors["confirm"] = f"Type the path exactly ({expected}) to confirm."
    if errors:
        raise ValidationError(errors)
    status = (
        ApprovalRequest.Status.APPROVED
        if decision == "approve"
        else ApprovalRequest.Status.REJECTED
    )
    with transaction.atomic():
        # The run's row first, as run_cancel does: the same lock order, so a decision and a
        # cancel at the same moment queue behind each other instead of deadlocking.
        Run.objects.select_for_update().filter(pk=approval.run_id).first()
        won = ApprovalRequest.objects.filter(
            pk=approval.pk, status=ApprovalRequest.Status.PENDING
        ).update(
            status=status,
            decided_by=user,
            decided_at=timezone.now(),
            comment=comment,
            remember=remember and decision == "approve",
        )
        approval = ApprovalRequest.objects.select_related("run", "decided_by").get(pk=approval.pk)
        if not won:
            raise AlreadyDecided(approval)
        run = Run.objects.select_for_update().get(pk=approval.run_id)
        run_event_append(
            run_id=run.pk,
            type="approval.decided",
            payload={
                "approval": str(approval.pk),
                "kind": approval.kind,
                "tool": approval.tool,
                "decision": status,
                "by": user.get_username(),
                "comment": comment,
            },
        )
        if remember and decision == "approve" and approval.kind == ApprovalRequest.Kind.TOOL_CALL:
            from runs.grants import grant_create

            grant_create(
                run=run,
                tool=approval.tool,
                path=approval.paths[0] if approval.paths else "",
                user=user,
            )
        _resume(run, approval, user)
    return approval


def _resume(run: Run, approval: ApprovalRequest, user: Any) -> None:
    if run.status != run_status.WAITING_FOR_APPROVAL:
        return  # cancelled or failed meanwhile: the decision is recorded, nothing resumes
    Run.objects.filter(pk=run.pk).update(waiting_for="")
    if approval.kind == ApprovalRequest.Kind.COMMIT:
        if approval.status == ApprovalRequest.Status.REJECTED:
            reason = f"rejected by {user.get_username()}: {approval.comment}"
            run_transition(run_id=run.pk, to=run_status.FAILED, failure_reason=reason)
            steps_close(run_id=run.pk, status="rejected")
            transaction.on_commit(
                partial(session_end_dispatch, run_id=run.pk, outcome="failed", reason=reason)
            )
            return
        run_transition(run_id=run.pk, to=run_status.VERIFYING, detail={"approval": "approved"})
    else:
        run_transition(run_id=run.pk, to=run_status.RUNNING, detail={"approval": approval.status})
    transaction.on_commit(partial(run_dispatch, run_id=run.pk))
