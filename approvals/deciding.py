"""Deciding (SPEC A3, A4, A6): one approver's decision is checked, then recorded as an
audit row that is never changed; of concurrent decisions exactly one takes effect. What
happened is returned as :class:`~approvals.outcomes.Vote`, ``Approved`` or ``Rejected``;
the run side applies it (``runs.approval_outcomes.approval_decide`` is the door every
page, the API and the eval runner decide through)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from harness_console.roles import may_decide

from .core.fingerprint import accepted_digest
from .core.hunks import hunks_select, rejection_problem
from .core.patch import PatchError, apply_patch, parse_patch
from .expiry import approval_expiry_record
from .fingerprint import originals_for
from .models import ApprovalDecision, ApprovalRequest
from .outcomes import AlreadyDecided, Approved, Decided, Expired, Rejected, Vote

DECISIONS = ("approve", "reject")
MAX_COMMENT_CHARS = 4000
MAX_EDIT_CHARS = 1_000_000


@dataclass(frozen=True)
class CheckedDecision:
    """A decision as it will be recorded: ``edited_diff`` is the patch applied instead of
    the proposed one (the approver's edit, or the hunks they accepted), "" for none;
    ``rejected_hunks`` the hunks they left out, path → numbers."""

    comment: str
    edited_diff: str
    rejected_hunks: dict[str, list[int]]


def approval_decision_check(
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
) -> CheckedDecision:
    """Who may decide, and whether what they sent can be recorded; raises PermissionDenied
    or ValidationError (a message per field), or returns the decision as it will be
    recorded (an edit that changes nothing is no edit). ``digest`` is what the approver's
    page showed: a page older than the request refuses. ``edited_diff`` replaces the
    proposed patch; ``rejected_hunks`` (path → hunk numbers, from 1) leaves those hunks
    out (B7) — one or the other, never both. Either must apply to the files as they are."""
    if not may_decide(user):
        raise PermissionDenied("Only approvers decide approval requests.")
    if approval.run.requester_id == user.pk:
        raise PermissionDenied("A requester cannot decide on their own run.")
    comment, edited_diff = (comment or "").strip(), (edited_diff or "").replace("\r\n", "\n")
    errors = _decision_errors(approval, decision, comment, confirm, digest, edited_diff, remember)
    edited = edited_diff and edited_diff != approval.diff
    rejected, problem = _rejected_hunks(approval, decision, rejected_hunks, bool(edited))
    if problem:
        errors.setdefault("rejected_hunks", problem)
    elif rejected and not errors:
        edited_diff = hunks_select(approval.diff, rejected)
        if problem := edit_problem(approval, edited_diff, whole=False):
            errors["rejected_hunks"] = problem
    elif not errors and edited and (problem := edit_problem(approval, edited_diff)):
        errors["edited_diff"] = problem
    if errors:
        raise ValidationError(errors)
    return CheckedDecision(comment, "" if edited_diff == approval.diff else edited_diff, rejected)


def _rejected_hunks(
    approval: ApprovalRequest, decision: str, given: Mapping[str, Any] | None, edited: bool
) -> tuple[dict[str, list[int]], str]:
    """The rejected hunks as recorded (path → sorted numbers, none empty), or why they
    cannot be: a rejection leaves the whole change out, an edit says itself what stays,
    and every file and number must be one of the request's."""
    if not given:
        return {}, ""
    if not isinstance(given, Mapping) or not all(
        isinstance(k, str) and isinstance(v, list | tuple) for k, v in given.items()
    ):
        return {}, "Give the rejected hunks as a file path → a list of hunk numbers."
    if not any(given.values()):
        return {}, ""
    if decision != "approve":
        return {}, "Only an approval leaves hunks out; a rejection rejects the whole change."
    if edited:
        return {}, (
            "Reject hunks or edit the patch, not both: an edit says itself what is applied "
            "(leave a hunk out of the edited patch to reject it)."
        )
    if refusal := approval.hunks_refusal:
        return {}, refusal
    if problem := rejection_problem(approval.diff, given):
        return {}, problem
    rejected = {path: sorted(set(numbers)) for path, numbers in given.items() if numbers}
    return rejected, ""


def approval_decision_record(
    *,
    approval: ApprovalRequest,
    user: Any,
    decision: str,
    comment: str,
    remember: bool,
    digest: str,
    edited_diff: str,
    rejected_hunks: Mapping[str, list[int]] | None = None,
) -> Decided | Expired:
    """Record one checked decision. A request needing M approvers stays pending until M
    distinct approvers said yes (a :class:`Vote`); one rejection rejects it. Past its
    deadline, judged under the request's lock at the moment of recording, it is expired
    instead (:class:`Expired`): no decision is ever recorded late, however long the
    decision waited for the lock. Call inside the caller's transaction, with the run's
    row locked first (the one lock order of cancel, expiry and decisions: no deadlock)."""
    assert transaction.get_connection().in_atomic_block, "decide inside a transaction"
    current = (
        ApprovalRequest.objects.select_for_update(of=("self",))
        .select_related("run", "decided_by")
        .get(pk=approval.pk)
    )
    if not current.is_pending:
        raise AlreadyDecided(current)
    now = timezone.now()
    if current.expires_at is not None and current.expires_at <= now:
        expired = approval_expiry_record(approval=current, now=now)
        assert expired is not None, "a pending request past its deadline expires under its lock"
        return expired
    if current.decisions.filter(user=user).exists():
        raise AlreadyDecided(
            current,
            f"You approved this already; it needs {_missing(current)} more approver(s).",
        )
    rejected = dict(rejected_hunks or {})
    bound = accepted_digest(current.digest, edited_diff, rejected) if decision == "approve" else ""
    ApprovalDecision.objects.create(
        approval=current,
        user=user,
        decision=decision,
        comment=comment,
        shown_digest=digest,  # "" when the client sent none: nothing is claimed
        edited_diff=edited_diff,
        rejected_hunks=rejected,
        accepted_digest=bound,
        remember=remember,
    )
    votes = current.decisions.filter(decision="approve").count()
    if decision == "approve" and votes < current.required_approvals:
        return Vote(current, user, votes, current.required_approvals)
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
        decided_at=now,
        comment=comment,
        remember=remember and decision == "approve",
        edited_diff=edited_diff,
        rejected_hunks=rejected,
        accepted_digest=bound,
    )
    current = ApprovalRequest.objects.select_related("run", "decided_by").get(pk=current.pk)
    if not won:  # cannot happen under the locks; kept as the last line of defence
        raise AlreadyDecided(current)
    if decision == "approve":
        return Approved(current, user, remember=remember)
    return Rejected(current, user)


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
    if decision == "approve" and (refusal := approval.approve_refusal):
        errors["decision"] = refusal
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


def edit_problem(approval: ApprovalRequest, edited_diff: str, *, whole: bool = True) -> str:
    """Why an edited patch cannot replace the proposed change, or "" when it can: it must
    apply to the files as they are now, change every file of the request (leaving one out
    would commit the model's version of it unseen; not so for the accepted hunks, ``whole``
    False, where a file with none accepted keeps its text), delete none, and change
    something (an edit that leaves every file as it is would approve an empty commit)."""
    try:
        originals = originals_for(approval.run, approval.paths)
        edited = apply_patch(originals, edited_diff, approval.paths)
    except PatchError as error:
        what = "edited patch does" if whole else "accepted hunks do"
        return f"The {what} not apply to the files as they are now: {error}"
    if whole and (missing := [p for p in approval.paths if p not in edited]):
        return (
            f"The edited patch leaves out {', '.join(missing)}: an edit replaces the whole "
            "change, so keep each file's hunks (unchanged if you agree with them)."
        )
    if deleted := [p for p, text in edited.items() if text is None]:
        return f"An edit cannot delete a file ({', '.join(deleted)}): reject the request instead."
    if whole and edited == originals:
        return (
            "The edited patch changes nothing: approving it would commit nothing. Keep a "
            "change, or reject the request with a reason."
        )
    return ""


def _missing(approval: ApprovalRequest) -> int:
    approvals = approval.decisions.filter(decision="approve").count()
    return max(0, approval.required_approvals - approvals)
