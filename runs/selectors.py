"""Read paths: who may see which run, and the events a page or a reconnect needs."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404

from harness_console.roles import may_see_runs

from .models import Run, RunEvent

REPLAY_BATCH = 200


class BadAfter(ValueError):
    """A malformed ``after`` cursor; the message is shown to the client as is."""


def parse_after(raw: str | None) -> int:
    """``after`` is the last event sequence number the client already has (0 for none)."""
    if raw is None or raw == "":
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > 10:
        raise BadAfter("after must be a whole number ≥ 0: the last event number you have.")
    return int(raw)


def parse_run_id(raw: Any) -> uuid.UUID | None:
    try:
        return raw if isinstance(raw, uuid.UUID) else uuid.UUID(str(raw))
    except ValueError:
        return None


def run_get_for_user(*, user: Any, run_id: Any) -> Run:
    """The run, if this user may see it: 403 for a user without the right, 404 if unknown.

    The right is checked first, so a user without it learns nothing about which runs exist.
    """
    if not user.is_authenticated:
        raise PermissionDenied("Log in to see runs.")
    if not may_see_runs(user):
        raise PermissionDenied("Your role may not see runs.")
    parsed = parse_run_id(run_id)
    if parsed is None:
        raise Http404("No such run.")
    try:
        return Run.objects.select_related("agent", "workspace", "requester").get(pk=parsed)
    except Run.DoesNotExist:
        raise Http404("No such run.") from None


def run_events_after(*, run_id: Any, after: int, limit: int = REPLAY_BATCH) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")[:limit])


def run_access_still_valid(*, user_id: Any, session_key: str | None, run_id: Any) -> bool:
    """For an open WebSocket: is the session still there, the user still active, and may
    they still see this run? Everything is read afresh (a user object caches its rights)."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import get_user_model

    store = import_module(settings.SESSION_ENGINE).SessionStore
    if not session_key or not store().exists(session_key):
        return False
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return False
    try:
        run_get_for_user(user=user, run_id=run_id)
    except (PermissionDenied, Http404):
        return False
    return True
