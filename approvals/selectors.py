"""Reading approval requests for the queue, the review page and the history (SPEC A1, A2, A6)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Case, Count, IntegerField, Q, QuerySet, Value, When
from django.http import Http404

from harness_console.roles import may_decide, may_read_approvals
from policies.models import PolicyChangeRequest
from policies.policy_changes import may_decide_policy_changes, policy_changes_pending

from .models import ApprovalRequest

RISK_RANK = Case(
    When(risk="high", then=Value(3)),
    When(risk="medium", then=Value(2)),
    When(risk="low", then=Value(1)),
    default=Value(4),  # not assessed: treated as the highest
    output_field=IntegerField(),
)
SORTS = {
    "oldest": ("requested_at",),
    "newest": ("-requested_at",),
    "risk": ("-risk_rank", "requested_at"),
    "expiry": ("expires_at", "requested_at"),
}


def pending_count_for(user: Any) -> int:
    """What the navigation shows an approver: pending requests they may decide, and for an
    admin the policy changes waiting for a second admin that they may decide."""
    return pending_counts(user)["theirs"] + policy_changes_count_for(user)


def policy_changes_for(user: Any) -> QuerySet[PolicyChangeRequest]:
    """The policy changes the queue shows this user: every pending one to an admin (their
    own marked, left to another admin), none to anyone else."""
    if not may_decide_policy_changes(user):
        return PolicyChangeRequest.objects.none()
    return policy_changes_pending()


def policy_changes_count_for(user: Any) -> int:
    """Pending policy changes this admin may decide: not their own."""
    if not may_decide_policy_changes(user):
        return 0
    return policy_changes_pending().exclude(author=user).count()


def queue_for(
    user: Any, *, risk: str = "", kind: str = "", agent: str = "", sort: str = "oldest"
) -> QuerySet[ApprovalRequest]:
    """Pending requests this approver may decide (never their own runs', SPEC A4; never the
    eval set's, which its runner answers itself)."""
    pending = (
        ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING)
        .without_evals()
        .exclude(run__requester=user)
        .select_related("run__agent", "run__requester")
        .annotate(risk_rank=RISK_RANK)
    )
    if risk:
        pending = pending.filter(risk=risk)
    if kind:
        pending = pending.filter(kind=kind)
    if agent:
        pending = pending.filter(run__agent__slug=agent)
    return pending.order_by(*SORTS.get(sort, SORTS["oldest"]))


def may_read(user: Any) -> bool:
    """Approvers read every request; so does anyone granted the model's view permission."""
    return may_read_approvals(user)


def approval_for_user(user: Any, approval_id: Any) -> ApprovalRequest:
    """The request, if this user may read it: 403 first (learning nothing), then 404."""
    if not may_read(user):
        raise PermissionDenied("Only approvers open approval requests.")
    try:
        return (
            ApprovalRequest.objects.select_related(
                "run__agent", "run__requester", "run__workspace", "decided_by"
            )
            .defer("run__loop")  # the loop's state: possibly large, never shown here
            .get(pk=approval_id)
        )
    except ApprovalRequest.DoesNotExist:
        raise Http404("No such approval request.") from None


def pending_counts(user: Any) -> dict[str, int]:
    """In one query: pending requests this approver may decide, and those on their own runs
    (left to other approvers, A4)."""
    mine = Q(run__requester=user)
    pending = ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING)
    return pending.without_evals().aggregate(
        theirs=Count("pk", filter=~mine), own=Count("pk", filter=mine)
    )


def queue_neighbours(user: Any, approval: ApprovalRequest) -> dict[str, ApprovalRequest | None]:
    """The requests before and after this one in the user's queue (oldest first)."""
    if not may_decide(user):
        return {"previous": None, "next": None}
    queue = queue_for(user)
    return {
        "previous": queue.filter(requested_at__lt=approval.requested_at)
        .order_by("-requested_at")
        .first(),
        "next": queue.filter(requested_at__gt=approval.requested_at).first(),
    }


def approval_in_force(
    *, run_id: Any, kind: str, tool_use_id: str | None = None
) -> ApprovalRequest | None:
    """The request that answers this question of the run now: for a tool call, the one
    asked about that tool_use (a unique constraint allows one not invalidated); for a
    commit, the newest of the run's commit requests (each asking is its own, named by its
    digest). An invalidated request is no answer: the question was asked again. Its status
    says the answer: pending, approved, rejected, expired or cancelled."""
    asked = ApprovalRequest.objects.filter(run_id=run_id, kind=kind).exclude(
        status=ApprovalRequest.Status.INVALIDATED
    )
    if tool_use_id is not None:
        asked = asked.filter(tool_use_id=tool_use_id)
    return asked.select_related("decided_by").order_by("-requested_at").first()


def pending_overlapping(*, run_id: Any, kind: str, paths: Any) -> list[ApprovalRequest]:
    """The run's pending requests that a new request of ``kind`` about ``paths`` would
    stand beside: any pending commit (a run commits once), and any request naming one of
    the same files. A run has at most one pending request per file: the new one replaces
    them (issue 18)."""
    named = set(paths)
    pending = ApprovalRequest.objects.filter(run_id=run_id, status=ApprovalRequest.Status.PENDING)
    return [
        approval
        for approval in pending.only("pk", "run_id", "kind", "tool", "paths", "grant_id")
        if (kind == approval.kind == ApprovalRequest.Kind.COMMIT) or named & set(approval.paths)
    ]
