"""Session grants (SPEC P4): created by an approver, used by every later call of the run,
visible on the run page and revocable there. Each change is a run event."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from harness_console.roles import may_decide
from policies.config_stamp import config_changed
from policies.core.paths import PathRefused, normalize_relative
from policies.core.permissions import Grant, PolicyError, Rule

from .events import run_event_append
from .models import Run, SessionGrant


def _may_decide(user: Any) -> None:
    if not may_decide(user):
        raise PermissionDenied("Only approvers remember or revoke decisions.")


def grant_create(*, run: Run, tool: str, path: str, user: Any) -> SessionGrant:
    _may_decide(user)
    if run.requester_id == user.pk:
        raise PermissionDenied("A requester cannot grant their own run.")
    if run.is_terminal:
        raise PolicyError("The run has ended; there is nothing left to remember.")
    try:
        Rule("grant", tool, "allow", path)  # the same validation as a policy rule
        if path and not any(ch in path for ch in "*?[{"):
            normalize_relative(path)
    except (PolicyError, PathRefused) as error:
        raise PolicyError(f"Cannot remember this: {error}") from None
    with transaction.atomic():
        grant = SessionGrant.objects.create(run=run, tool=tool, path=path, granted_by=user)
        run_event_append(
            run_id=run.pk,
            type="grant.created",
            payload={
                "grant": grant.pk,
                "tool": tool,
                "path": path or "*",
                "by": user.get_username(),
            },
        )
    return grant


def grant_revoke(*, grant: SessionGrant, user: Any) -> SessionGrant:
    _may_decide(user)
    with transaction.atomic():
        updated = SessionGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=user
        )
        if updated:
            config_changed()
            run_event_append(
                run_id=grant.run_id,
                type="grant.revoked",
                payload={"grant": grant.pk, "by": user.get_username()},
            )
    grant.refresh_from_db()
    return grant


def grants_for_run(run: Run) -> list[Grant]:
    active = run.grants.filter(revoked_at__isnull=True)
    return [
        Grant(tool, path, who or "")
        for tool, path, who in active.values_list("tool", "path", "granted_by__username")
    ]
