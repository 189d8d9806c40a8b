"""A run's status and what follows from it (SPEC R6): every change goes through
``run_transition``, which checks it against the lifecycle, adds an ended run to its day's
rollup, traces it, and records it as an event; runs are handed to workers from here."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from celery import current_app
from django.db import transaction
from django.utils import timezone

from .core import status as run_status
from .core.failures import failure_kind
from .events import run_event_append
from .models import Run, Step
from .observability import rollups, telemetry

logger = logging.getLogger(__name__)

RUN_EXECUTE = "runs.tasks.run_execute"
RUN_SESSION_END = "runs.tasks.run_session_end"


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
        counted = run.finished_at is not None  # a completed run is in its day's rollup
        if to in (run_status.COMPLETED, run_status.FAILED) or (
            to == run_status.ROLLED_BACK and not counted
        ):
            # A rollback later keeps the moment the run finished: its day's figures move
            # from completed to rolled back in that same day.
            run.finished_at, fields = now, [*fields, "finished_at"]
        if to not in run_status.CLAIMABLE:  # waiting or ended: no worker holds it any more
            run.lease_owner, run.lease_expires_at = "", None
            fields = [*fields, "lease_owner", "lease_expires_at"]
        if to == run_status.FAILED:
            run.failure_reason = failure_reason.strip()
            run.failure_kind = failure_kind(run.failure_reason)
            fields = [*fields, "failure_reason", "failure_kind"]
        run.save(update_fields=fields)
        if to in rollups.FINISHED:
            rollups.rollup_run_ended(run, previous if counted else "")
        payload = {"from": previous, "to": to, **(detail or {})}
        if failure_reason:
            payload["reason"] = failure_reason.strip()
        if run.shown_status != to:  # a cancel: the live pages show "cancelled"
            payload["shown"] = run.shown_status
        run_event_append(run_id=run.pk, type="status.changed", payload=payload)
        telemetry.run_transitioned(run)  # an ended run's trace spans, sent on commit (O1)
    return run


def steps_close(*, run_id: Any, status: str) -> None:
    """A run that ended (failed, cancelled, rejected) leaves no stage marked running."""
    Step.objects.filter(run_id=run_id, status__in=("running", "waiting")).update(
        status=status, finished_at=timezone.now()
    )


def run_fail_idle(*, run_id: Any, reason: str, steps: str) -> None:
    """Fail a run no worker holds (cancelled or its commit rejected while it waited, its
    approval expired): no stage left running, and once committed the session_end hooks
    are told from a worker. Inside the caller's transaction, the run's row locked."""
    run_transition(run_id=run_id, to=run_status.FAILED, failure_reason=reason)
    steps_close(run_id=run_id, status=steps)
    transaction.on_commit(
        partial(session_end_dispatch, run_id=run_id, outcome="failed", reason=reason)
    )


def run_dispatch(*, run_id: Any) -> None:
    """Queue the run for a worker. A lost message is harmless: the sweeper finds an
    unclaimed run and dispatches it again. By the task's name: the tasks module imports
    the flow, which moves runs through this module."""
    # A new message: nobody has received it yet, and it was sent now (the sweeper reads both).
    Run.objects.filter(pk=run_id).update(received_by="", dispatched_at=timezone.now())
    try:
        current_app.send_task(RUN_EXECUTE, args=[str(run_id)])
    except Exception:
        logger.exception("Could not queue run %s; the sweeper will.", run_id)


def session_end_dispatch(*, run_id: Any, outcome: str, reason: str) -> None:
    """A run that ended outside a worker (cancelled while idle, its commit rejected) still
    tells the session_end hooks, from a worker: a webhook must not hold a web request."""
    try:
        current_app.send_task(RUN_SESSION_END, args=[str(run_id), outcome, reason])
    except Exception:
        logger.exception("Could not queue the session_end hooks of run %s", run_id)
