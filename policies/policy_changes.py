"""Policy changes that wait for a second admin (B16). A policy marked so does not take an
edit at once: the edit is proposed, with its rule diff and the simulator's result on
recent calls, and takes effect when an admin other than its author approves it — written
then as any edit, with a revision naming its author and its approver. A proposal made
against a revision that is no longer the latest is stale: it would undo what came since."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from harness_console.web.live import APPROVALS_GROUP, group_news_publish

from .core.diffs import text_diff
from .core.permissions import Policy as CorePolicy
from .core.permissions import level_of
from .core.policy_text import policy_text
from .models import Policy as PolicyRow
from .models import PolicyChangeRequest, PolicyRevision, PolicyRule
from .permissions import policy_decision_digest, policy_from_row
from .policy_revisions import (
    RULE_FIELDS,
    policy_record_edit,
    revision_record,
    snapshot_write,
)
from .simulation import policy_edit_effect

EFFECT_SHOWN = 20
POLICY_CHANGE_MESSAGE = "policy.change"  # the approval queue's consumer: policy_change()


def may_decide_policy_changes(user: Any) -> bool:
    return bool(getattr(user, "is_active", False) and user.has_perm("policies.change_policy"))


def policy_changes_pending() -> QuerySet[PolicyChangeRequest]:
    """Proposals waiting for a second admin, oldest first (never the eval set's)."""
    return (
        PolicyChangeRequest.objects.without_evals()
        .filter(status=PolicyChangeRequest.Status.PENDING)
        .select_related("policy", "author")
        .order_by("created_at")
    )


def _queue_news(change: PolicyChangeRequest) -> None:
    """Tell the approval queue's pages (and every approver's count) once committed: a
    proposal joined or left the queue."""
    message = {"type": POLICY_CHANGE_MESSAGE, "policy_change": change.pk}
    transaction.on_commit(lambda: group_news_publish(APPROVALS_GROUP, message))


def core_policy_of(name: str, snapshot: dict[str, Any]) -> CorePolicy:
    """The engine's policy for a snapshot (unsaved rule rows, checked as the admin does)."""
    rules = [
        PolicyRule(**{k: v for k, v in rule.items() if k in RULE_FIELDS}).as_rule()
        for rule in snapshot.get("rules", [])
    ]
    return CorePolicy(name, level_of(snapshot["ceiling"]), tuple(rules))


def _latest(policy: PolicyRow) -> PolicyRevision:
    latest = policy.revisions.order_by("-number").first()
    return latest or revision_record(policy=policy, note="as it was before a proposed change")


def policy_change_propose(
    *, policy: PolicyRow, snapshot: dict[str, Any], author: Any, note: str = ""
) -> PolicyChangeRequest:
    """Record ``snapshot`` as a proposed change of ``policy``: nothing of the policy moves."""
    base = _latest(policy)
    looked, changed = policy_edit_effect(
        current=policy_from_row(policy), edited=core_policy_of(policy.name, snapshot)
    )
    effect = {
        "looked": looked,
        "changed": len(changed),
        "examples": [
            {"tool": c.tool, "path": c.path, "before": c.before, "after": c.after, "rule": c.rule}
            for c in changed[:EFFECT_SHOWN]
        ],
    }
    diff = text_diff(
        policy_text(base.snapshot),
        policy_text(snapshot),
        f"revision {base.number} (in force)",
        "proposed",
    )
    change = PolicyChangeRequest.objects.create(
        policy=policy,
        base=base,
        snapshot=snapshot,
        diff=diff or "(no change)",
        effect=effect,
        note=note[:200],
        author=author,
    )
    _queue_news(change)
    return change


def policy_change_decide(
    *, change: PolicyChangeRequest, user: Any, decision: str, comment: str = ""
) -> PolicyChangeRequest:
    """A second admin's decision. Approved, the proposal is written as the policy's next
    edit; the author never decides their own; a proposal the policy moved past is stale."""
    if isinstance(user, AnonymousUser) or not may_decide_policy_changes(user):
        raise PermissionDenied("Only admins decide policy changes.")
    if change.author_id == user.pk:
        raise PermissionDenied("The author of a policy change cannot approve or reject it.")
    if decision not in ("approve", "reject"):
        raise ValidationError({"decision": "Approve or reject."})
    if decision == "reject" and not comment.strip():
        raise ValidationError({"comment": "Say why the change is rejected."})
    with transaction.atomic():
        locked = PolicyChangeRequest.objects.select_for_update().get(pk=change.pk)
        if locked.status != PolicyChangeRequest.Status.PENDING:
            raise ValidationError(f"This change is already {locked.status}.")
        policy = PolicyRow.objects.select_for_update().get(pk=locked.policy_id)
        now = timezone.now()
        fields = {"decided_by": user, "decided_at": now, "comment": comment.strip()}
        stale = decision == "approve" and _latest(policy).pk != locked.base_id
        if stale:
            status = PolicyChangeRequest.Status.STALE
        elif decision == "approve":
            status = PolicyChangeRequest.Status.APPROVED
        else:
            status = PolicyChangeRequest.Status.REJECTED
        PolicyChangeRequest.objects.filter(pk=locked.pk).update(status=status, **fields)
        _queue_news(locked)
        if status == PolicyChangeRequest.Status.APPROVED:
            before = policy_decision_digest(policy)
            snapshot_write(policy, locked.snapshot)
            note = f"{locked.note or 'proposed change'} (approved by {user.get_username()})"
            policy_record_edit(policy=policy, before=before, author=locked.author, note=note)
    change.refresh_from_db()
    if change.status == PolicyChangeRequest.Status.STALE:  # recorded so, and refused
        raise ValidationError(
            "The policy changed after this was proposed; it is stale. Propose it again "
            "against the policy as it is now."
        )
    return change
