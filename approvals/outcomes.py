"""What a person's decision, or a request's deadline, did: returned by approvals to the run
side (``runs.approval_outcomes``), which alone moves the run. Approvals records; it never
resumes, fails or dispatches a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .models import ApprovalRequest


@dataclass(frozen=True)
class Vote:
    """One approver of several said yes; the request stays pending (SPEC A4)."""

    approval: ApprovalRequest
    by: Any
    approvals: int
    required: int


@dataclass(frozen=True)
class Approved:
    approval: ApprovalRequest
    by: Any
    remember: bool  # "remember for this run": the run side makes the grant (SPEC P4)


@dataclass(frozen=True)
class Rejected:
    approval: ApprovalRequest
    by: Any


@dataclass(frozen=True)
class Expired:
    """Nobody decided in time (SPEC A5): never reported as a rejection."""

    approval: ApprovalRequest
    reason: str


Decided = Vote | Approved | Rejected


class AlreadyDecided(Exception):
    """Someone else decided first (or the request expired or was cancelled): HTTP 409."""

    def __init__(self, approval: ApprovalRequest, message: str = "") -> None:
        self.approval = approval
        who = approval.decided_by.get_username() if approval.decided_by else "the harness"
        super().__init__(message or f"This request is already {approval.status} (by {who}).")
