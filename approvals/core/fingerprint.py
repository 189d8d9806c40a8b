"""An approval request's fingerprint: what the person was shown, and what changed since.

A person approves what they were shown: these arguments, this diff, these files as they
were, under this policy version. The digest of all of it is recorded with the request and
with each decision; before the approved action runs, the harness takes the fingerprint again
and, if any part differs, the approval no longer holds — it is invalidated and asked again,
naming what changed. Pure: the caller reads the files and the policy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def content_hash(data: bytes | None) -> str | None:
    """sha256 of a file's bytes; None for a file that does not exist."""
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    kind: str
    tool: str
    arguments: Mapping[str, Any]
    diff: str
    file_hashes: Mapping[str, str | None] = field(default_factory=dict)
    policy_version: int | None = None

    @property
    def digest(self) -> str:
        body = json.dumps(
            {
                "kind": self.kind,
                "tool": self.tool,
                "arguments": self.arguments,
                "diff": self.diff,
                "files": dict(self.file_hashes),
                "policy_version": self.policy_version,
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(body.encode()).hexdigest()


def accepted_digest(
    request_digest: str, applied_patch: str, rejected_hunks: Mapping[str, Sequence[int]]
) -> str:
    """The digest an approval binds to: the request's own when it approves the change as
    shown; when an approver rejected hunks or edited the patch, one that covers the request
    and exactly what was accepted (the patch applied instead, the hunks left out), so a
    decision on a subset is bound to that subset and to no other."""
    if not applied_patch and not any(rejected_hunks.values()):
        return request_digest
    body = json.dumps(
        {
            "request": request_digest,
            "applied_patch": applied_patch,
            "rejected_hunks": {p: sorted(set(n)) for p, n in rejected_hunks.items() if n},
        },
        sort_keys=True,
    )
    return hashlib.sha256(body.encode()).hexdigest()


def fingerprint_changes(
    shown: Fingerprint, now: Fingerprint, *, diff_replaced: bool = False
) -> list[str]:
    """What differs between the fingerprint a person approved and the one in force now, in
    words an approver reads; empty when the approval still holds. ``diff_replaced``: the
    approver edited the patch, so the proposed diff no longer matters — the files and the
    policy still do, since the edit was validated against them."""
    changes = []
    if (shown.kind, shown.tool) != (now.kind, now.tool):
        changes.append(f"the action changed from {shown.tool} to {now.tool}")
    if _canonical(shown.arguments) != _canonical(now.arguments):
        changes.append("the tool call's arguments changed")
    for path in sorted(set(shown.file_hashes) | set(now.file_hashes)):
        before, after = shown.file_hashes.get(path), now.file_hashes.get(path)
        if before == after:
            continue
        if before is None:
            changes.append(f"{path} was created since the request")
        elif after is None:
            changes.append(f"{path} was deleted since the request")
        else:
            changes.append(f"{path} changed since the request")
    if shown.policy_version != now.policy_version:
        changes.append(
            f"the policy changed (version {shown.policy_version} → {now.policy_version})"
        )
    if not diff_replaced and shown.diff != now.diff and not changes:
        changes.append("the proposed change differs from the one shown")
    return changes


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
