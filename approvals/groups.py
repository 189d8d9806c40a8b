"""Identical requests, decided together (B15): the same action asked by several runs — the
same kind, tool and policy rule, and the same digest of arguments, diff, file hashes and
policy version (the digest names no run) — is one line of work for an approver. Each
member stays its own request: decided one by one, each decision audited and bound to the
digest its approver was shown, separation of duties checked for each."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from .models import ApprovalRequest

# Past this, a group is split: one step decides at most this many requests.
GROUP_LIMIT = 50


def same_action(approval: ApprovalRequest) -> str:
    """The key two requests share exactly when they ask about the same action."""
    return "\x1f".join((approval.kind, approval.tool, approval.rule, approval.digest))


def action_id(key: str) -> str:
    """A short, stable name for an action key: the API's ``same_action`` and the ids of a
    queue group's fields."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


@dataclass
class Group:
    """Requests of one action, in queue order; ``first`` shows what they ask."""

    key: str
    members: list[ApprovalRequest] = field(default_factory=list)

    @property
    def dom_id(self) -> str:
        """A stable id for the group's fields: what an approver types in them survives the
        live queue's refresh (hx-preserve)."""
        return action_id(self.key)

    @property
    def first(self) -> ApprovalRequest:
        return self.members[0]

    @property
    def strong(self) -> bool:
        return any(member.strong_confirmation for member in self.members)


def groups_in(rows: Iterable[ApprovalRequest]) -> list[Group]:
    """The groups of two or more among ``rows`` (a page of the queue), in the order their
    first member comes; a request with no digest (a question to the requester) is never
    grouped."""
    groups: dict[str, Group] = {}
    for row in rows:
        if not row.digest:
            continue
        group = groups.setdefault(same_action(row), Group(same_action(row)))
        if len(group.members) < GROUP_LIMIT:
            group.members.append(row)
    return [group for group in groups.values() if len(group.members) > 1]
