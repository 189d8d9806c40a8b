"""Write paths of the run domain: create a run, move its status, append its events.

Each service runs in a transaction and sends its news only on commit, so no page ever shows
an event that rolled back.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .core import status as run_status
from .live import event_publish
from .models import Agent, Run, RunEvent, Workspace

logger = logging.getLogger(__name__)

MAX_REQUEST_CHARS = 20_000
MAX_EVENT_TYPE_CHARS = 64


def run_event_append(*, run_id: Any, type: str, payload: dict[str, Any] | None = None) -> RunEvent:
    """Append one event to a run, numbered after the last, and publish it once committed.

    1. Take the run's row lock by incrementing its counter (SQLite's IMMEDIATE transactions
       and PostgreSQL's row lock both serialise concurrent appenders here).
    2. Insert the event with that number; (run, seq) is unique, so a bug cannot duplicate one.
    3. On commit, send it to the run's group and to the ops group.
    """
    if not type or len(type) > MAX_EVENT_TYPE_CHARS:
        raise ValueError(f"An event type needs 1 to {MAX_EVENT_TYPE_CHARS} characters.")
    if payload is not None and not isinstance(payload, dict):
        raise ValueError("An event payload is a JSON object.")
    with transaction.atomic():
        if not Run.objects.filter(pk=run_id).update(event_seq=F("event_seq") + 1):
            raise Run.DoesNotExist(f"No run {run_id}.")
        seq = Run.objects.filter(pk=run_id).values_list("event_seq", flat=True).get()
        event = RunEvent.objects.create(run_id=run_id, seq=seq, type=type, payload=payload or {})
        transaction.on_commit(partial(event_publish, event), robust=True)
    return event


def run_create(
    *, agent: Agent, workspace: Workspace, requester: Any, request: str, dispatch: bool = True
) -> Run:
    """Record a new run and, once committed, hand it to a worker."""
    text = (request or "").strip()
    if not text:
        raise ValidationError({"request": "Describe the task: the request is empty."})
    if len(text) > MAX_REQUEST_CHARS:
        raise ValidationError(
            {"request": f"The request is {len(text)} characters; the limit is {MAX_REQUEST_CHARS}."}
        )
    with transaction.atomic():
        run = Run.objects.create(
            agent=agent, workspace=workspace, requester=requester, request=text
        )
        run_event_append(
            run_id=run.pk,
            type="run.created",
            payload={
                "agent": agent.slug,
                "workspace": workspace.slug,
                "requester": requester.get_username(),
            },
        )
        if dispatch:
            transaction.on_commit(partial(run_dispatch, run_id=run.pk))
    return run


def run_dispatch(*, run_id: Any) -> None:
    """Queue the run for a worker; imported late so services stay importable without Celery."""
    from .tasks import run_start

    run_start.delay(str(run_id))


def run_transition(
    *,
    run_id: Any,
    to: str,
    failure_reason: str = "",
    only_from: str | None = None,
    detail: dict[str, Any] | None = None,
) -> Run | None:
    """Move a run to ``to`` if the lifecycle allows it, and record the change as an event.

    ``only_from`` makes it a claim: when the run is no longer in that state (another worker
    got there first), nothing changes and None is returned. An invalid transition raises
    :class:`~runs.core.status.InvalidTransition` and changes nothing.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if only_from is not None and run.status != only_from:
            return None
        run_status.check_transition(run.status, to, failure_reason=failure_reason)
        previous, now = run.status, timezone.now()
        run.status = to
        fields = ["status", "updated_at"]
        if previous == run_status.CREATED:
            run.started_at, fields = now, [*fields, "started_at"]
        if to in (run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK):
            run.finished_at, fields = now, [*fields, "finished_at"]
        if to == run_status.FAILED:
            run.failure_reason, fields = failure_reason.strip(), [*fields, "failure_reason"]
        run.save(update_fields=fields)
        payload = {"from": previous, "to": to, **(detail or {})}
        if failure_reason:
            payload["reason"] = failure_reason.strip()
        run_event_append(run_id=run.pk, type="status.changed", payload=payload)
    return run


def run_claim(*, run_id: Any, worker: str) -> Run | None:
    """A worker takes a newly created run into planning; at most one worker ever gets it."""
    try:
        run = run_transition(
            run_id=run_id,
            to=run_status.PLANNING,
            only_from=run_status.CREATED,
            detail={"worker": worker},
        )
    except Run.DoesNotExist:
        logger.warning("Run %s vanished before a worker could claim it.", run_id)
        return None
    if run is None:
        logger.info("Run %s was already claimed; nothing to do.", run_id)
    return run
