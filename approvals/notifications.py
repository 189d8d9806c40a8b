"""Telling approvers a request waits (issue 6): email through Django's mail backend, and an
optional webhook with a JSON body. Sent from a worker, never from the request that asked,
so a slow mail server or webhook never holds a run or a page."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.mail import EmailMessage, mailers
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from .core.risk import LEVELS
from .links import link_token_make
from .models import ApprovalRequest

logger = logging.getLogger(__name__)

RISKS = tuple(name for _threshold, name in LEVELS)  # low, medium, high, critical
WEBHOOK_TIMEOUT_SECONDS = 5.0


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook that redirects is answered with a failure, not followed: the console posts
    only to the URL an admin configured."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class WebhookFailed(Exception):
    """The webhook did not answer 2xx; the task retries."""


def worth_notifying(risk: str) -> bool:
    """At or above the configured risk; an unknown risk (not assessed) counts as high."""
    threshold = settings.HARNESS_APPROVAL_NOTIFY_RISK
    if threshold not in RISKS:
        return False
    level = RISKS.index(risk) if risk in RISKS else len(RISKS) - 1
    return level >= RISKS.index(threshold)


def approvers_to_tell(approval: ApprovalRequest) -> list[str]:
    """Active users who may decide it: approvers and admins, not its own requester."""
    perm = Permission.objects.filter(
        content_type__app_label="approvals", codename="decide_approval"
    ).first()
    who = Q(is_superuser=True)
    if perm is not None:
        who |= Q(user_permissions=perm) | Q(groups__permissions=perm)
    users = (
        get_user_model()
        .objects.filter(who, is_active=True)
        .exclude(email="")
        .exclude(pk=approval.run.requester_id)
        .values_list("email", flat=True)
        .distinct()
    )
    return sorted(set(users))


def approval_email_send(*, approval_id: Any, event: str) -> int:
    """One message per approver (none sees the others' addresses); returns how many."""
    approval = _load(approval_id)
    if approval is None or not approval.is_pending or not worth_notifying(approval.risk):
        return 0
    recipients = approvers_to_tell(approval)
    if not recipients:
        return 0
    subject, body = _email_text(approval, event)
    # Each message its own links (fresh nonces): one approver's use leaves the others'.
    messages = [
        EmailMessage(subject, body + _email_links(approval), settings.DEFAULT_FROM_EMAIL, [address])
        for address in recipients
    ]
    return mailers.default.send_messages(messages) or 0


def approval_webhook_send(*, approval_id: Any, event: str) -> bool:
    url = settings.HARNESS_APPROVAL_WEBHOOK_URL
    approval = _load(approval_id)
    if not url or approval is None or not approval.is_pending:
        return False
    if not worth_notifying(approval.risk):
        return False
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        logger.error("HARNESS_APPROVAL_WEBHOOK_URL must be an http(s) URL; nothing sent.")
        return False
    body = json.dumps(webhook_body(approval, event), sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "harness-console"}
    if secret := settings.HARNESS_APPROVAL_WEBHOOK_SECRET:
        # Signed with the time, so a receiver can refuse a captured call replayed later.
        stamp = str(int(time.time()))
        signed = stamp.encode() + b"." + body
        headers["X-Harness-Timestamp"] = stamp
        headers["X-Harness-Signature"] = (
            "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        )
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - http(s) only, checked above
    try:
        with _OPENER.open(request, timeout=WEBHOOK_TIMEOUT_SECONDS) as response:
            if not 200 <= response.status < 300:
                raise WebhookFailed(f"The approval webhook answered {response.status}.")
    except urllib.error.HTTPError as error:  # 3xx (not followed), 4xx, 5xx
        raise WebhookFailed(f"The approval webhook answered {error.code}.") from None
    except (urllib.error.URLError, OSError) as error:
        raise WebhookFailed(f"The approval webhook failed: {error}") from None
    return True


def webhook_body(approval: ApprovalRequest, event: str) -> dict[str, Any]:
    """What a chat bot or pager needs to say a request waits, and where; no diff, no file
    content, not the request's own text (any of them may hold what only approvers should
    read)."""
    run = approval.run
    return {
        "event": f"approval.{event}",
        "approval": {
            "id": str(approval.pk),
            "url": _url(approval),
            **decide_urls(approval),
            "kind": approval.kind,
            "tool": approval.tool,
            "paths": approval.paths,
            "summary": approval.summary,
            "risk": approval.risk,
            "rule": approval.rule,
            "reason": approval.reason,
            "strong_confirmation": approval.strong_confirmation,
            "required_approvals": approval.required_approvals,
            "requested_at": approval.requested_at.isoformat(),
            "expires_at": approval.expires_at.isoformat() if approval.expires_at else None,
        },
        "run": {
            "id": str(run.pk),
            "agent": run.agent.slug,
            "workspace": run.workspace.slug,
            "requester": run.requester.get_username(),
        },
    }


def _email_text(approval: ApprovalRequest, event: str) -> tuple[str, str]:
    run = approval.run
    summary = approval.summary.replace("\n", " ")[:120]
    if event == "reminder":
        subject = f"[Harness] Reminder: approval expires soon: {summary}"
        opening = "A request still waits for a decision and expires soon."
    else:
        subject = f"[Harness] Approval needed ({approval.risk or 'unassessed'} risk): {summary}"
        opening = "An agent waits for a decision."
    lines = [
        opening,
        "",
        f"What: {approval.summary}",
        f"Risk: {approval.risk or 'not assessed'}",
        f"Agent: {run.agent.name} in {run.workspace.name}",
        f"Requested by: {run.requester.get_username()}",
        f"Why it asks: {approval.reason or approval.rule}",
    ]
    if approval.expires_at:
        lines.append(f"Expires: {approval.expires_at:%Y-%m-%d %H:%M} UTC")
    if approval.required_approvals > 1:
        lines.append(f"Needs {approval.required_approvals} distinct approvers.")
    # The link on a line of its own, short of 76 characters: mail encodings fold longer
    # lines, and a folded link cannot be copied from a log or a plain-text reader.
    lines += ["", "Review it:", _url(approval)]
    return subject, "\n".join(lines) + "\n"


def decide_urls(approval: ApprovalRequest) -> dict[str, str | None]:
    """Signed single-use links to approve or reject from anywhere (issue 18, B14); each
    opens a confirmation page, never decides by itself. None once the deadline passed
    (the sweep may not have expired the request yet): a link that cannot work is not sent."""
    if approval.expires_at is not None and approval.expires_at <= timezone.now():
        return {"approve_url": None, "reject_url": None}
    return {
        f"{decision}_url": settings.HARNESS_BASE_URL
        + reverse("approvals:link", args=[link_token_make(approval=approval, decision=decision)])
        for decision in ("approve", "reject")
    }


def _email_links(approval: ApprovalRequest) -> str:
    """The email's decide links, each on a line of its own (longer than a mail line
    should be: a signed token), or nothing once the deadline passed."""
    urls = decide_urls(approval)
    if urls["approve_url"] is None:
        return ""
    return (
        "\nDecide from here (each link opens a confirmation page and works once):\n"
        f"Approve: {urls['approve_url']}\n"
        f"Reject: {urls['reject_url']}\n"
    )


def _url(approval: ApprovalRequest) -> str:
    return settings.HARNESS_BASE_URL + reverse("approvals:review", args=[approval.pk])


def _load(approval_id: Any) -> ApprovalRequest | None:
    """The request to tell approvers about; never one of the eval set's runs (its runner
    answers them itself within seconds)."""
    return (
        ApprovalRequest.objects.select_related("run__agent", "run__workspace", "run__requester")
        .without_evals()
        .filter(pk=approval_id)
        .first()
    )
