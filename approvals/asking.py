"""Asking a person (SPEC P5, A3–A5): a request bound to the fingerprint of what they will be
shown, with its deadline and the number of approvers it needs; and a request that no
longer holds (invalidated) or whose run ended (cancelled). The run side tells the run's
timeline and the live pages (``runs.approval_outcomes``)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from policies.models import ToolDefinition
from policies.permissions import policy_row_for_agent

from .core.fingerprint import Fingerprint
from .models import ApprovalRequest
from .tasks import notify_dispatch

MAX_CONFIRM_CHARS = 1024  # what an approver's typed confirmation holds


def approval_request_create(
    *,
    run: Any,  # the run asking (runs.Run: approvals never imports runs)
    fingerprint: Fingerprint,
    paths: Sequence[str],
    tool_use_id: str,
    summary: str,
    rule: str,
    reason: str,
    strong_confirmation: bool,
    confirm_text: str = "",
) -> ApprovalRequest:
    """Record a question to the approvers, bound to what they will be shown (``fingerprint``:
    the diff, the files' hashes, the policy version — read by the caller before it takes
    its locks), with its expiry from the agent's policy and the number of approvers an L3
    action needs. A strong confirmation asks to type ``confirm_text``: by default the first
    path, or for a call without one (a shell command) the command itself. Call inside the
    caller's transaction; the approvers are notified once it commits."""
    policy = policy_row_for_agent(run.agent)
    kind, tool, arguments = fingerprint.kind, fingerprint.tool, dict(fingerprint.arguments)
    if strong_confirmation and not confirm_text:
        command = arguments.get("command")
        confirm_text = paths[0] if paths else str(command or tool)
    if strong_confirmation and len(confirm_text) > MAX_CONFIRM_CHARS:
        # Never cut what must be typed: a prefix would approve a command with another tail.
        raise ValueError(f"A confirmation over {MAX_CONFIRM_CHARS} characters cannot be typed.")
    level = ToolDefinition.objects.filter(name=tool).values_list("permission_level", flat=True)
    required = policy.l3_approvals_required if policy and level.first() == "L3" else 1
    now = timezone.now()
    expires_at = remind_at = None
    if policy is not None:
        expires_at = now + datetime.timedelta(minutes=policy.approval_expiry_minutes)
        if policy.approval_reminder_minutes:
            remind_at = expires_at - datetime.timedelta(minutes=policy.approval_reminder_minutes)
            remind_at = max(remind_at, now)
    approval = ApprovalRequest.objects.create(
        run=run,
        kind=kind,
        tool_use_id=tool_use_id,
        tool=tool[:120],
        arguments=arguments,
        paths=list(paths),
        diff=fingerprint.diff,
        summary=summary,
        rule=rule[:63],
        reason=reason,
        risk=run.risk,
        strong_confirmation=strong_confirmation,
        confirm_text=confirm_text if strong_confirmation else "",
        digest=fingerprint.digest,
        file_hashes=dict(fingerprint.file_hashes),
        policy_version=fingerprint.policy_version,
        required_approvals=required,
        expires_at=expires_at,
        remind_at=remind_at,
    )
    transaction.on_commit(partial(notify_dispatch, approval_id=approval.pk, event="requested"))
    return approval


def approval_invalidation_record(*, approval: ApprovalRequest, changes: list[str]) -> bool:
    """What was approved (or is pending) no longer matches the workspace or the policy: the
    request stops counting, and the harness asks again. True when it did (it was pending
    or approved); the run side then withdraws its grant and tells the run. Call inside the
    caller's transaction."""
    reason = "; ".join(changes)[:2000]
    updated = ApprovalRequest.objects.filter(
        pk=approval.pk,
        status__in=(ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED),
    ).update(status=ApprovalRequest.Status.INVALIDATED, status_reason=reason)
    return bool(updated)


def approvals_cancel_for_run(*, run_id: Any, reason: str) -> list[ApprovalRequest]:
    """A run that ends leaves no request pending: nobody is asked about a dead run. Returns
    the requests it cancelled, for the run side to tell the queue pages of each one that
    leaves. Inside the caller's transaction."""
    pending = list(
        ApprovalRequest.objects.filter(run_id=run_id, status=ApprovalRequest.Status.PENDING).only(
            "pk", "run_id", "kind", "tool"
        )
    )
    return [
        approval
        for approval in pending
        if ApprovalRequest.objects.filter(
            pk=approval.pk, status=ApprovalRequest.Status.PENDING
        ).update(
            status=ApprovalRequest.Status.CANCELLED,
            decided_at=timezone.now(),
            status_reason=reason[:2000],
        )
    ]
