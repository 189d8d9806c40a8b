"""Deadlines (SPEC A5): a pending request expires after its policy's time, its approvers are
reminded once before. Expiring records what happened (:class:`~approvals.outcomes.Expired`,
never a rejection: nobody decided); the run side fails the run that waited on it."""

from __future__ import annotations

import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from .models import ApprovalRequest
from .outcomes import Expired

EXPIRED_REASON = "approval expired"


def approvals_due(*, now: datetime.datetime, limit: int = 500) -> list[Any]:
    """Pending requests past their deadline."""
    return list(
        ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING, expires_at__lte=now
        ).values_list("pk", flat=True)[:limit]
    )


def approval_expiry_record(*, approval: ApprovalRequest, now: datetime.datetime) -> Expired | None:
    """Expire the request if it is still pending past its deadline (None: decided or
    cancelled meanwhile). Inside the caller's transaction, the run's row locked first."""
    assert transaction.get_connection().in_atomic_block, "expire inside a transaction"
    waited = _duration(now - approval.requested_at)
    reason = f"{EXPIRED_REASON}: no decision on “{approval.summary[:200]}” within {waited}"
    expired = ApprovalRequest.objects.filter(
        pk=approval.pk, status=ApprovalRequest.Status.PENDING, expires_at__lte=now
    ).update(status=ApprovalRequest.Status.EXPIRED, decided_at=now, status_reason=reason)
    return Expired(approval, reason) if expired else None


def approvals_remind_due(*, now: datetime.datetime | None = None, limit: int = 500) -> list[Any]:
    """Mark, once, each pending request that expires soon as reminded, and return them: the
    caller tells their approvers. A conditional update: two beat processes (or a retry)
    remind once."""
    now = now or timezone.now()
    due = list(
        ApprovalRequest.objects.filter(
            status=ApprovalRequest.Status.PENDING, remind_at__lte=now, reminded_at__isnull=True
        ).values_list("pk", flat=True)[:limit]
    )
    return [
        pk
        for pk in due
        if ApprovalRequest.objects.filter(pk=pk, reminded_at__isnull=True).update(reminded_at=now)
    ]


def _duration(delta: datetime.timedelta) -> str:
    minutes = max(1, round(delta.total_seconds() / 60))
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes / 60
    return f"{hours:.0f} h" if hours < 48 else f"{hours / 24:.0f} days"
