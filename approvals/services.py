"""Approval requests (SPEC P5, A3–A6): asking, deciding, expiring, invalidating.

Every change of a request happens here, under the run's row lock taken first (the lock
order run_cancel uses too), so a decision, an expiry and a cancel at the same moment queue
behind each other; of concurrent decisions exactly one takes effect.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from harness_console.roles import may_decide
from policies.models import ToolDefinition
from policies.permissions import policy_row_for_agent
from runs.core import status as run_status
from runs.models import Run
from runs.observability.telemetry import approval_event as approval_traced
from runs.services import run_dispatch, run_event_append, run_fail_idle, run_transition

from .binding import originals_for
from .core.binding import Binding
from .core.patch import PatchError, apply_patch, parse_patch
from .models import ApprovalDecision, ApprovalRequest

DECISIONS = ("approve", "reject")
MAX_COMMENT_CHARS = 4000
MAX_EDIT_CHARS = 1_000_000
EXPIRED_REASON = "approval expired"


class AlreadyDecided(Exception):
    """Someone else decided first (or the request expired or was cancelled): HTTP 409."""

    def __init__(self, approval: ApprovalRequest, message: str = "") -> None:
        self.approval = approval
        who = approval.decided_by.get_username() if approval.decided_by else "the harness"
        super().__init__(message or f"This request is already {approval.status} (by {who}).")


# --- asking ---------------------------------------------------------------------------------
def approval_request_create(
    *,
    run: Run,
    binding: Binding,
    paths: Sequence[str],
    tool_use_id: str,
    summary: str,
    rule: str,
    reason: str,
    strong_confirmation: bool,
    confirm_text: str = "",
) -> ApprovalRequest:
    """Record a question to the approvers, bound to what they will be shown (``binding``:
    the diff, the files' hashes, the policy version — read by the caller before it takes
    its locks), with its expiry from the agent's policy and the number of approvers an L3
    action needs. A strong confirmation asks to type ``confirm_text``: by default the first
    path, or for a call without one (a shell command) the command itself. Call inside the
    caller's transaction; the approvers are notified once it commits."""
    policy = policy_row_for_agent(run.agent)
    kind, tool, arguments = binding.kind, binding.tool, dict(binding.arguments)
    if strong_confirmation and not confirm_text:
        command = arguments.get("command")
        confirm_text = paths[0] if paths else str(command or tool)
    level = ToolDefinition.objects.filter(name=tool).values_list("permission_level", flat=True)
    required = policy.l3_approvals_required if policy and level.first() == "L3" else 1
    now = timezone.now()
    expires_at = remind_at = None
    if policy is not None:
        expires_at = now + datetime.timedelta(minutes=policy.approval_expiry_minutes)
        if policy.approval_reminder_minutes:
            remind_at = expires_at - datetime.timedelta(minutes=policy.approval_reminder_minutes)
            remind_at = max(remind_at, now)
    approval = ApprovalRequest.objects.create(
        run=run,
        kind=kind,
        tool_use_id=tool_use_id,
        tool=tool[:120],
        arguments=arguments,
        paths=list(paths),
        diff=binding.diff,
        summary=summary,
        rule=rule[:63],
        reason=reason,
        risk=run.risk,
        strong_confirmation=strong_confirmation,
        confirm_text=confirm_text[:1024] if strong_confirmation else "",
        digest=binding.digest,
        file_hashes=dict(binding.file_hashes),
        policy_version=binding.policy_version,
        required_approvals=required,
        expires_at=expires_at,
        remind_at=remind_at,
    )
    from .notifications import notify_dispatch

    transaction.on_commit(partial(notify_dispatch, approval_id=approval.pk, event="requested"))
    return approval


def approval_invalidate(*, approval: ApprovalRequest, changes: list[str]) -> None:
    """What was approved (or is pending) no longer matches the workspace or the policy: the
    request stops counting, and the harness asks again. Call inside the caller's transaction."""
    reason = "; ".join(changes)[:2000]
    updated = ApprovalRequest.objects.filter(
        pk=approval.pk,
        status__in=(ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED),
    ).update(status=ApprovalRequest.Status.INVALIDATED, status_reason=reason)
    if updated and approval.grant_id:
        _grant_withdraw(approval)
    if updated:
        approval_event_append(approval, "approval.invalidated", reason=reason, changes=changes[:20])


def approval_event_append(approval: ApprovalRequest, type: str, **detail: Any) -> None:
    """Every approval event names the request, its kind and its tool: the run's timeline
    shows them, and the queue pages (which hear every approval.* event) refresh on them."""
    run_event_append(
        run_id=approval.run_id,
        type=type,
        payload={
            "approval": str(approval.pk),
            "kind": approval.kind,
            "tool": approval.tool,
            **detail,
        },
    )
    approval_traced(approval, type)  # a request that ended gets its span on commit (O1)


def _grant_withdraw(approval: ApprovalRequest) -> None:
    """The "remember for this run" of an approval that no longer holds goes with it: a grant
    would otherwise allow, unasked, the very call being asked again."""
    from runs.models import SessionGrant

    if SessionGrant.objects.filter(pk=approval.grant_id, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    ):
        run_event_append(
            run_id=approval.run_id,
            type="grant.revoked",
            payload={
                "grant": approval.grant_id,
                "by": "the harness",
                "reason": "the approval that made it was invalidated",
            },
        )


def approvals_cancel_for_run(*, run_id: Any, reason: str) -> int:
    """A run that ends leaves no request pending: nobody is asked about a dead run, and the
    queue pages hear of each one that leaves. Inside the caller's transaction."""
    pending = list(
        ApprovalRequest.objects.filter(run_id=run_id, status=ApprovalRequest.Status.PENDING).only(
            "pk", "run_id", "kind", "tool"
        )
    )
    for approval in pending:
        if ApprovalRequest.objects.filter(
            pk=approval.pk, status=ApprovalRequest.Status.PENDING
        ).update(
            status=ApprovalRequest.Status.CANCELLED,
            decided_at=timezone.now(),
            status_reason=reason[:2000],
        ):
            approval_event_append(approval, "approval.cancelled", reason=reason)
    return len(pending)


# --- deciding -------------------------------------------------------------------------------
def approval_decide(
    *,
    approval: ApprovalRequest,
    user: Any,
    decision: str,
    comment: str = "",
    confirm: str = "",
    remember: bool = False,
    digest: str = "",
    edited_diff: str = "",
) -> ApprovalRequest:
    """Record one approver's decision; of concurrent decisions exactly one takes effect (the
    others get :class:`AlreadyDecided`). ``digest`` is what the approver's page showed: a
    page older than the request refuses. ``edited_diff`` replaces the proposed patch; it
    must apply to the files as they are. A request needing M approvers stays pending until
    M distinct approvers said yes; one rejection rejects it. A final decision resumes the
    run: a tool call goes back to the loop (the model hears of a rejection or an edit); a
    rejected commit fails the run."""
    if not may_decide(user):
        raise PermissionDenied("Only approvers decide approval requests.")
    if approval.run.requester_id == user.pk:
        raise PermissionDenied("A requester cannot decide on their own run.")
    comment, edited_diff = (comment or "").strip(), (edited_diff or "").replace("\r\n", "\n")
    errors = _decision_errors(approval, decision, comment, confirm, digest, edited_diff, remember)
    edited = edited_diff and edited_diff != approval.diff
    if not errors and edited and (problem := edit_problem(approval, edited_diff)):
        errors["edited_diff"] = problem
    if errors:
        raise ValidationError(errors)
    if edited_diff == approval.diff:
        edited_diff = ""  # unchanged: an ordinary approval
    if approval.expires_at is not None and approval.expires_at <= timezone.now():
        # Past its deadline, even if the sweep has not come by yet: never decided late.
        approval_expire(approval_id=approval.pk)
        raise AlreadyDecided(ApprovalRequest.objects.get(pk=approval.pk))
    with transaction.atomic():
        # The run's row first, as run_cancel does: one lock order, no deadlock.
        run = Run.objects.select_for_update().get(pk=approval.run_id)
        current = (
            ApprovalRequest.objects.select_for_update(of=("self",))
            .select_related("run", "decided_by")
            .get(pk=approval.pk)
        )
        if not current.is_pending:
            raise AlreadyDecided(current)
        if current.decisions.filter(user=user).exists():
            raise AlreadyDecided(
                current,
                f"You approved this already; it needs {_missing(current)} more approver(s).",
            )
        ApprovalDecision.objects.create(
            approval=current,
            user=user,
            decision=decision,
            comment=comment,
            shown_digest=digest,  # "" when the client sent none: nothing is claimed
            edited_diff=edited_diff,
            remember=remember,
        )
        votes = current.decisions.filter(decision="approve").count()
        if decision == "approve" and votes < current.required_approvals:
            approval_event_append(
                current,
                "approval.vote",
                by=user.get_username(),
                approvals=votes,
                required=current.required_approvals,
            )
            return current
        status = (
            ApprovalRequest.Status.APPROVED
            if decision == "approve"
            else ApprovalRequest.Status.REJECTED
        )
        won = ApprovalRequest.objects.filter(
            pk=current.pk, status=ApprovalRequest.Status.PENDING
        ).update(
            status=status,
            decided_by=user,
            decided_at=timezone.now(),
            comment=comment,
            remember=remember and decision == "approve",
            edited_diff=edited_diff,
        )
        current = ApprovalRequest.objects.select_related("run", "decided_by").get(pk=current.pk)
        if not won:  # cannot happen under the locks; kept as the last line of defence
            raise AlreadyDecided(current)
        approval_event_append(
            current,
            "approval.decided",
            decision=status,
            by=user.get_username(),
            comment=comment,
            edited=bool(edited_diff),
        )
        if remember and decision == "approve" and current.kind == ApprovalRequest.Kind.TOOL_CALL:
            from policies.core.permissions import PolicyError
            from runs.grants import grant_create

            try:
                grant = grant_create(run=run, tool=current.tool, path=current.paths[0], user=user)
            except PolicyError as error:  # the whole decision rolls back with it
                raise ValidationError({"remember": str(error)}) from None
            ApprovalRequest.objects.filter(pk=current.pk).update(grant=grant)
        _resume(run, current, user)
    return current


def _decision_errors(
    approval: ApprovalRequest,
    decision: str,
    comment: str,
    confirm: str,
    digest: str,
    edited_diff: str,
    remember: bool,
) -> dict[str, str]:
    errors = {}
    if decision not in DECISIONS:
        errors["decision"] = "Choose approve or reject."
    typed = {"comment": comment, "confirm": confirm or "", "digest": digest or ""}
    for field, value in {**typed, "edited_diff": edited_diff}.items():
        if "\x00" in value:
            errors[field] = "This cannot contain a NUL character."
    if len(comment) > MAX_COMMENT_CHARS:
        errors.setdefault("comment", f"Keep the comment under {MAX_COMMENT_CHARS} characters.")
    elif decision == "reject" and not comment:
        errors["comment"] = "Say why you reject it: the requester and the model read this."
    if digest and digest != approval.digest:
        errors["digest"] = "This request is not the one your page showed; reload it."
    if decision == "approve" and approval.strong_confirmation and "confirm" not in errors:
        expected = approval.confirm_expected
        if not expected or (confirm or "").strip() != expected:
            what = "the path" if expected in approval.paths else "it"
            errors["confirm"] = f"Type {what} exactly ({expected}) to confirm."
    if remember and decision == "approve" and (problem := approval.remember_refusal):
        errors["remember"] = problem
    if edited_diff and edited_diff != approval.diff and "edited_diff" not in errors:
        if decision != "approve":
            errors["edited_diff"] = "Only an approval carries an edited patch."
        elif refusal := approval.edit_refusal:
            errors["edited_diff"] = refusal
        elif len(edited_diff) > MAX_EDIT_CHARS:
            errors["edited_diff"] = f"Keep the patch under {MAX_EDIT_CHARS} characters."
        else:
            try:
                parse_patch(edited_diff)
            except PatchError as error:
                errors["edited_diff"] = f"The edited patch cannot be read: {error}"
    return errors


def edit_problem(approval: ApprovalRequest, edited_diff: str) -> str:
    """Why an edited patch cannot replace the proposed change, or "" when it can: it must
    apply to the files as they are now, change every file of the request (leaving one out
    would commit the model's version of it unseen) and delete none."""
    try:
        edited = apply_patch(
            originals_for(approval.run, approval.paths), edited_diff, approval.paths
        )
    except PatchError as error:
        return f"The edited patch does not apply: {error}"
    if missing := [p for p in approval.paths if p not in edited]:
        return (
            f"The edited patch leaves out {', '.join(missing)}: an edit replaces the whole "
            "change, so keep each file's hunks (unchanged if you agree with them)."
        )
    if deleted := [p for p, text in edited.items() if text is None]:
        return f"An edit cannot delete a file ({', '.join(deleted)}): reject the request instead."
    return ""


def _missing(approval: ApprovalRequest) -> int:
    approvals = approval.decisions.filter(decision="approve").count()
    return max(0, approval.required_approvals - approvals)


def _resume(run: Run, approval: ApprovalRequest, user: Any) -> None:
    if run.status != run_status.WAITING_FOR_APPROVAL:
        return  # cancelled or failed meanwhile: the decision is recorded, nothing resumes
    if approval.kind == ApprovalRequest.Kind.COMMIT:
        if approval.status == ApprovalRequest.Status.REJECTED:
            reason = f"rejected by {user.get_username()}: {approval.comment}"
            run_fail_idle(run_id=run.pk, reason=reason, steps="rejected")
            return
        Run.objects.filter(pk=run.pk).update(waiting_for="")
        run_transition(run_id=run.pk, to=run_status.VERIFYING, detail={"approval": "approved"})
    else:
        Run.objects.filter(pk=run.pk).update(waiting_for="")
        run_transition(run_id=run.pk, to=run_status.RUNNING, detail={"approval": approval.status})
    transaction.on_commit(partial(run_dispatch, run_id=run.pk))


# --- expiring -------------------------------------------------------------------------------
def approvals_expire_due(*, now: datetime.datetime | None = None, limit: int = 500) -> int:
    """Expire every pending request past its deadline; each run waiting on one fails with
    "approval expired" (never "rejected": nobody decided)."""
    now = now or timezone.now()
    due = list(
        ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING, expires_at__lte=now
        ).values_list("pk", flat=True)[:limit]
    )
    return sum(approval_expire(approval_id=pk, now=now) for pk in due)


def approval_expire(*, approval_id: Any, now: datetime.datetime | None = None) -> bool:
    now = now or timezone.now()
    approval = ApprovalRequest.objects.filter(pk=approval_id).first()
    if approval is None:
        return False
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=approval.run_id)
        waited = _duration(now - approval.requested_at)
        reason = f"{EXPIRED_REASON}: no decision on “{approval.summary[:200]}” within {waited}"
        expired = ApprovalRequest.objects.filter(
            pk=approval.pk, status=ApprovalRequest.Status.PENDING, expires_at__lte=now
        ).update(status=ApprovalRequest.Status.EXPIRED, decided_at=now, status_reason=reason)
        if not expired:
            return False  # decided or cancelled meanwhile
        approval_event_append(approval, "approval.expired", reason=reason)
        if run.status == run_status.WAITING_FOR_APPROVAL:
            run_fail_idle(run_id=run.pk, reason=reason, steps="expired")
    return True


def approvals_remind_due(*, now: datetime.datetime | None = None, limit: int = 500) -> int:
    """Remind the approvers once of each pending request that expires soon."""
    from .notifications import notify_dispatch

    now = now or timezone.now()
    due = list(
        ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING, remind_at__lte=now, reminded_at__isnull=True
        ).values_list("pk", flat=True)[:limit]
    )
    reminded = 0
    for pk in due:
        # A conditional update: two beat processes (or a retry) remind once.
        if ApprovalRequest.objects.filter(pk=pk, reminded_at__isnull=True).update(reminded_at=now):
            notify_dispatch(approval_id=pk, event="reminder")
            reminded += 1
    return reminded


def _duration(delta: datetime.timedelta) -> str:
    minutes = max(1, round(delta.total_seconds() / 60))
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes / 60
    return f"{hours:.0f} h" if hours < 48 else f"{hours / 24:.0f} days"
