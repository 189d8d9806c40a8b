"""Celery tasks of the approvals domain: telling approvers a request waits (email, webhook),
sent from a worker, never from the request that asked."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from celery import shared_task

from . import notifications
from .expiry import approvals_remind_due

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def approval_email(approval_id: str, event: str) -> None:
    notifications.approval_email_send(approval_id=approval_id, event=event)


@shared_task(
    ignore_result=True,
    autoretry_for=(notifications.WebhookFailed,),
    retry_backoff=5,
    retry_kwargs={"max_retries": 4},
)
def approval_webhook(approval_id: str, event: str) -> None:
    notifications.approval_webhook_send(approval_id=approval_id, event=event)


def notify_dispatch(*, approval_id: Any, event: str) -> None:
    """Queue the email and the webhook for one request; a broker failure is logged, never
    raised into the flow that asked (the request is on the queue page either way)."""
    for task in (approval_email, approval_webhook):
        try:
            task.delay(str(approval_id), event)
        except Exception:
            logger.exception("Could not queue the %s for approval %s", task.name, approval_id)


def reminders_send(*, now: datetime.datetime | None = None) -> int:
    """Remind the approvers, once, of each pending request that expires soon."""
    due = approvals_remind_due(now=now)
    for pk in due:
        notify_dispatch(approval_id=pk, event="reminder")
    return len(due)
