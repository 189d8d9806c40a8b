"""Policy revisions (B16): every saved edit of a policy is a revision with its author and
note, a snapshot of the whole policy; any two compare as text, any one is restored by
writing it back as a new edit (so restoring changes the decision version only if what the
policy decides changes)."""

from __future__ import annotations

from datetime import time
from typing import Any

from django.db import transaction
from django.db.models import Max

from .config_stamp import config_changed
from .core.diffs import text_diff
from .core.policy_text import policy_text
from .models import Policy as PolicyRow
from .models import PolicyRevision, PolicyRule
from .models.permissions import LIMIT_FIELDS
from .permissions import policy_bump_version, policy_decision_digest

POLICY_FIELDS = (
    "description",
    "ceiling",
    "approval_expiry_minutes",
    "approval_reminder_minutes",
    "l3_approvals_required",
    "changes_need_second_admin",
)
RULE_FIELDS = ("order", "key", "tool", "path", "decision", "reason", *LIMIT_FIELDS)


def snapshot_of(policy: PolicyRow) -> dict[str, Any]:
    """The policy and its rules as stored now, as JSON values (times as HH:MM:SS)."""
    stored = PolicyRow.objects.values(*POLICY_FIELDS).get(pk=policy.pk)
    rows = PolicyRule.objects.filter(policy=policy).order_by("order", "id").values(*RULE_FIELDS)
    rules = [
        {name: value.isoformat() if isinstance(value, time) else value for name, value in r.items()}
        for r in rows
    ]
    return {**stored, "rules": rules}


def revision_record(
    *,
    policy: PolicyRow,
    author: Any = None,
    note: str = "",
    restored_from: PolicyRevision | None = None,
) -> PolicyRevision:
    """A new revision of the policy as stored now; numbered under the policy's row lock, so
    two admins saving at once get two numbers."""
    with transaction.atomic():
        locked = PolicyRow.objects.select_for_update().get(pk=policy.pk)
        last = locked.revisions.aggregate(n=Max("number"))["n"] or 0
        return PolicyRevision.objects.create(
            policy=locked,
            number=last + 1,
            decision_version=locked.version,
            snapshot=snapshot_of(locked),
            note=note[:200],
            author=author if getattr(author, "pk", None) else None,
            restored_from=restored_from,
        )


def policy_record_edit(
    *,
    policy: PolicyRow,
    before: str,
    author: Any = None,
    note: str = "",
    restored_from: Any = None,
) -> tuple[bool, Any]:
    """After an edit of a policy or its rules, saved: a new version (which approvals bind
    to, B16) only when what it decides changed from ``before`` (its digest read before the
    save); an edit of wording or of the order of rules that never meet keeps the version,
    so no pending request is invalidated for it. Either way the edit is a revision, with
    its author and note. Returns (whether the version moved, the revision)."""
    moved = not before or policy_decision_digest(policy) != before
    if moved:
        policy_bump_version(policy=policy)
    config_changed()
    revision = revision_record(policy=policy, author=author, note=note, restored_from=restored_from)
    return moved, revision


def revision_text(revision: PolicyRevision) -> str:
    return policy_text(revision.snapshot)


def revisions_diff(old: PolicyRevision | None, new: PolicyRevision) -> str:
    """The unified diff from ``old`` (None: nothing) to ``new``, "(no change)" when equal."""
    before = revision_text(old) if old is not None else ""
    label = f"revision {old.number}" if old is not None else "(none)"
    return text_diff(before, revision_text(new), label, f"revision {new.number}") or "(no change)"


def snapshot_write(policy: PolicyRow, snapshot: dict[str, Any]) -> None:
    """Make the stored policy what ``snapshot`` says: its settings and its rules. Inside
    the caller's transaction; the caller records the edit (``policy_record_edit``)."""
    PolicyRow.objects.filter(pk=policy.pk).update(
        **{name: snapshot[name] for name in POLICY_FIELDS if name in snapshot}
    )
    PolicyRule.objects.filter(policy=policy).delete()
    PolicyRule.objects.bulk_create(
        PolicyRule(policy=policy, **{k: v for k, v in rule.items() if k in RULE_FIELDS})
        for rule in snapshot.get("rules", [])
    )
    config_changed()  # bulk_create sends no signal
    policy.refresh_from_db()


def revision_restore(*, revision: PolicyRevision, author: Any) -> PolicyRevision:
    """Write ``revision`` back as the policy's current state, then record the edit as any
    other (a new decision version only if a decision moved). A policy whose changes need a
    second admin is not restored here: the caller proposes the restore instead."""
    policy, snapshot = revision.policy, revision.snapshot
    if policy.changes_need_second_admin:
        raise ValueError("This policy's changes need a second admin: propose the restore.")
    with transaction.atomic():
        before = policy_decision_digest(policy)
        snapshot_write(policy, snapshot)
        _moved, restored = policy_record_edit(
            policy=policy,
            before=before,
            author=author,
            note=f"restored revision {revision.number}",
            restored_from=revision,
        )
    return restored
