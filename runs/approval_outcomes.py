"""Approvals as the run hears of them: the one place where a request, a decision or a
deadline moves a run (SPEC P5, A3–A5, R6).

The approvals app records requests and decisions and returns what happened (``Vote``,
``Approved``, ``Rejected``, ``Expired``); it never touches a run. Everything here runs under
the run's row lock, taken first (the one lock order of decisions, expiry and cancel), and
tells the run's timeline and the live pages of each change (``approval.*`` events).

- ``approval_decide``: the door every page, the API and the eval runner decide through.
- ``approval_expire`` / ``approvals_expire_due``: beat's deadline (a run waiting on an
  expired request fails with "approval expired", never "rejected").
- ``approval_ask``, ``approval_invalidate``, ``approvals_cancel``: the flow and the run's
  cancel asking, re-asking and withdrawing.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from approvals.asking import (
    approval_invalidation_record,
    approval_request_create,
    approvals_cancel_for_run,
)
from approvals.core.fingerprint import Fingerprint
from approvals.deciding import approval_decision_check, approval_decision_record
from approvals.expiry import approval_expiry_record, approvals_due
from approvals.groups import same_action
from approvals.models import ApprovalRequest
from approvals.outcomes import AlreadyDecided, Approved, Decided, Expired, Rejected, Vote
from approvals.selectors import pending_overlapping
from policies.core.permissions import PolicyError

from .core import status as run_status
from .events import run_event_append
from .grants import grant_create
from .lifecycle import run_dispatch, run_fail_idle, run_transition
from .models import Run, SessionGrant
from .observability.telemetry import approval_event as approval_traced


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
    rejected_hunks: Mapping[str, Any] | None = None,
) -> Decided:
    """Record one approver's decision and apply it to the run; of concurrent decisions
    exactly one takes effect (the others get :class:`AlreadyDecided`). A final decision
    resumes the run: a tool call goes back to the loop (the model hears of a rejection, an
    edit or the hunks left out); a rejected commit fails the run. Past its deadline a
    request is expired instead, even if the sweep has not come by yet: never decided late.
    ``rejected_hunks`` (path → hunk numbers) approves the change without those hunks."""
    checked = approval_decision_check(
        approval=approval,
        user=user,
        decision=decision,
        comment=comment,
        confirm=confirm,
        remember=remember,
        digest=digest,
        edited_diff=edited_diff,
        rejected_hunks=rejected_hunks,
    )
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=approval.run_id)
        outcome = approval_decision_record(
            approval=approval,
            user=user,
            decision=decision,
            comment=checked.comment,
            remember=remember,
            digest=digest,
            edited_diff=checked.edited_diff,
            rejected_hunks=checked.rejected_hunks,
        )
        if isinstance(outcome, Expired):
            _expiry_apply(run, outcome)
        else:
            _decision_apply(run, outcome)
    if isinstance(outcome, Expired):  # the expiry stands; the decision is refused
        raise AlreadyDecided(
            ApprovalRequest.objects.select_related("decided_by").get(pk=approval.pk)
        )
    return outcome


@dataclass(frozen=True)
class GroupDecided:
    """What one step over a group did: each member decided, or not and why."""

    decided: list[Decided]
    refused: list[tuple[ApprovalRequest, str]]


def approvals_decide_group(
    *,
    members: Sequence[tuple[str, str]],
    user: Any,
    decision: str,
    comment: str = "",
    confirm: str = "",
) -> GroupDecided:
    """Decide identical requests (``approvals.groups``) in one step, with one comment:
    ``members`` are (request id, the digest its approver was shown). Each is decided on
    its own by :func:`approval_decide` — its own audit row, its own digest, separation of
    duties and the typed confirmation checked for it — so one that moved, was decided by
    someone else or is on the approver's own run is refused alone, saying why, and the
    others still count. Members that are not all one action are refused whole."""
    wanted = {pk: digest for pk, digest in members}
    found = {str(a.pk): a for a in ApprovalRequest.objects.filter(pk__in=list(wanted))}
    if not wanted or len(found) != len(wanted) or len(set(map(same_action, found.values()))) > 1:
        raise ValidationError({"members": "These requests are not one group: decide each alone."})
    decided: list[Decided] = []
    refused: list[tuple[ApprovalRequest, str]] = []
    for pk, digest in wanted.items():
        approval = found[pk]
        try:
            decided.append(
                approval_decide(
                    approval=approval,
                    user=user,
                    decision=decision,
                    comment=comment,
                    confirm=confirm,
                    digest=digest,
                )
            )
        except ValidationError as error:
            refused.append((approval, " ".join(error.messages)))
        except (PermissionDenied, AlreadyDecided) as error:
            refused.append((approval, str(error)))
    return GroupDecided(decided, refused)


def _decision_apply(run: Run, outcome: Decided) -> None:
    current = outcome.approval
    who = outcome.by.get_username()
    if isinstance(outcome, Vote):
        approval_event_append(
            current, "approval.vote", by=who, approvals=outcome.approvals, required=outcome.required
        )
        return
    approval_event_append(
        current,
        "approval.decided",
        decision=current.status,
        by=who,
        comment=current.comment,
        edited=bool(current.edited_diff) and not current.rejected_hunks,
        rejected_hunks=current.rejected_hunks,
    )
    remembered = isinstance(outcome, Approved) and outcome.remember
    if remembered and current.kind == ApprovalRequest.Kind.TOOL_CALL:
        _grant_from(run, current, outcome.by)
    _resume(run, outcome)


def _grant_from(run: Run, approval: ApprovalRequest, user: Any) -> None:
    """ "Remember for this run" (SPEC P4): a grant for the same tool on the same path."""
    try:
        grant = grant_create(run=run, tool=approval.tool, path=approval.paths[0], user=user)
    except PolicyError as error:  # the whole decision rolls back with it
        raise ValidationError({"remember": str(error)}) from None
    ApprovalRequest.objects.filter(pk=approval.pk).update(grant=grant)


def _resume(run: Run, outcome: Approved | Rejected) -> None:
    approval = outcome.approval
    if run.status != run_status.WAITING_FOR_APPROVAL:
        return  # cancelled or failed meanwhile: the decision is recorded, nothing resumes
    if approval.kind == ApprovalRequest.Kind.COMMIT:
        if isinstance(outcome, Rejected):
            reason = f"rejected by {outcome.by.get_username()}: {approval.comment}"
            run_fail_idle(run_id=run.pk, reason=reason, steps="rejected")
            return
        run_transition(run_id=run.pk, to=run_status.VERIFYING, detail={"approval": "approved"})
    else:
        run_transition(run_id=run.pk, to=run_status.RUNNING, detail={"approval": approval.status})
    transaction.on_commit(partial(run_dispatch, run_id=run.pk))


# --- expiring -------------------------------------------------------------------------------
def approvals_expire_due(*, now: datetime.datetime | None = None, limit: int = 500) -> int:
    """Expire every pending request past its deadline; each run waiting on one fails with
    "approval expired"."""
    now = now or timezone.now()
    return sum(
        approval_expire(approval_id=pk, now=now) for pk in approvals_due(now=now, limit=limit)
    )


def approval_expire(*, approval_id: Any, now: datetime.datetime | None = None) -> bool:
    now = now or timezone.now()
    approval = ApprovalRequest.objects.filter(pk=approval_id).first()
    if approval is None:
        return False
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=approval.run_id)
        expired = approval_expiry_record(approval=approval, now=now)
        if expired is None:
            return False  # decided or cancelled meanwhile
        _expiry_apply(run, expired)
    return True


def _expiry_apply(run: Run, expired: Expired) -> None:
    approval_event_append(expired.approval, "approval.expired", reason=expired.reason)
    if run.status == run_status.WAITING_FOR_APPROVAL:
        run_fail_idle(run_id=run.pk, reason=expired.reason, steps="expired")


# --- asking, re-asking, withdrawing ----------------------------------------------------------
def approval_ask(
    *,
    run: Run,
    fingerprint: Fingerprint,
    paths: Sequence[str],
    tool_use_id: str,
    summary: str,
    rule: str,
    reason: str,
    strong_confirmation: bool,
    confirm_text: str = "",
) -> ApprovalRequest:
    """Ask the approvers and say so on the run's timeline; the run then waits. Inside the
    caller's checkpoint; the approvers are notified once it commits.

    The one place a request is made, so the one place that keeps a run to one pending
    request per file: one it would stand beside is invalidated first, saying it was
    replaced (an approver with its page open is told so, not left deciding a dead one)."""
    for older in pending_overlapping(run_id=run.pk, kind=fingerprint.kind, paths=paths):
        shared = sorted(set(older.paths) & set(paths)) or list(older.paths)
        named = ", ".join(shared) if shared else "this run's commit"
        approval_invalidate(approval=older, changes=[f"replaced by a newer request about {named}"])
    approval = approval_request_create(
        run=run,
        fingerprint=fingerprint,
        paths=paths,
        tool_use_id=tool_use_id,
        summary=summary,
        rule=rule,
        reason=reason,
        strong_confirmation=strong_confirmation,
        confirm_text=confirm_text,
    )
    approval_event_append(
        approval,
        "approval.requested",
        paths=approval.paths,
        rule=approval.rule,
        reason=approval.reason,
        strong_confirmation=approval.strong_confirmation,
        required_approvals=approval.required_approvals,
        expires_at=approval.expires_at.isoformat() if approval.expires_at else None,
        status=approval.status,
    )
    return approval


def approval_invalidate(*, approval: ApprovalRequest, changes: list[str]) -> None:
    """What was approved (or is pending) no longer matches the workspace or the policy: the
    request stops counting, its "remember for this run" goes with it (a grant would
    otherwise allow, unasked, the very call being asked again), and the run says why."""
    if not approval_invalidation_record(approval=approval, changes=changes):
        return
    if approval.grant_id and SessionGrant.objects.filter(
        pk=approval.grant_id, revoked_at__isnull=True
    ).update(revoked_at=timezone.now()):
        run_event_append(
            run_id=approval.run_id,
            type="grant.revoked",
            payload={
                "grant": approval.grant_id,
                "by": "the harness",
                "reason": "the approval that made it was invalidated",
            },
        )
    reason = "; ".join(changes)[:2000]
    approval_event_append(approval, "approval.invalidated", reason=reason, changes=changes[:20])


def approvals_cancel(*, run_id: Any, reason: str) -> None:
    """A run that ends leaves no request pending; the queue pages hear of each that leaves.
    Inside the caller's transaction."""
    for approval in approvals_cancel_for_run(run_id=run_id, reason=reason):
        approval_event_append(approval, "approval.cancelled", reason=reason)


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
