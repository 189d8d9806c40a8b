"""Celery tasks of the approvals domain: thin wrappers around one service each."""

from __future__ import annotations

from celery import shared_task

from . import notifications, services


@shared_task(ignore_result=True)
def approvals_sweep() -> None:
    """Beat: remind of requests about to expire, then expire the overdue (SPEC A5)."""
    services.approvals_remind_due()
    services.approvals_expire_due()


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
