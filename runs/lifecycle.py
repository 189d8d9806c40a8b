"""A run's status and what follows from it (SPEC R6): every change goes through
``run_transition``, which checks it against the lifecycle, adds an ended run to its day's
rollup, traces it, and records it as an event; runs are handed to workers from here."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
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


@dataclass(frozen=True)
class Transition:
    """What moving a run from ``previous`` to ``to`` writes: its ``fields`` and the
    ``status.changed`` event's ``payload``; ``counted``: the run was in its day's rollup
    already (a completed run being rolled back)."""

    previous: str
    to: str
    fields: dict[str, Any]
    payload: dict[str, Any]
    counted: bool


def transition_planned(
    run: Run,
    to: str,
    *,
    failure_reason: str = "",
    detail: dict[str, Any] | None = None,
    now: datetime,
) -> Transition:
    """The change to ``to`` of ``run`` as read (under its lock, or by the worker holding
    its lease); raises :class:`~runs.core.status.InvalidTransition` when the lifecycle
    forbids it."""
    run_status.check_transition(run.status, to, failure_reason=failure_reason)
    fields: dict[str, Any] = {"status": to, "updated_at": now}
    if run.status == run_status.CREATED:
        fields["started_at"] = now
    counted = run.finished_at is not None  # a completed run is in its day's rollup
    if to in (run_status.COMPLETED, run_status.FAILED) or (
        to == run_status.ROLLED_BACK and not counted
    ):
        # A rollback later keeps the moment the run finished: its day's figures move
        # from completed to rolled back in that same day.
        fields["finished_at"] = now
    if to not in run_status.CLAIMABLE:  # waiting or ended: no worker holds it any more
        fields.update(lease_owner="", lease_expires_at=None)
    kind = run.failure_kind
    if to == run_status.FAILED:
        kind = failure_kind(failure_reason.strip())
        fields.update(failure_reason=failure_reason.strip(), failure_kind=kind)
    payload = {"from": run.status, "to": to, **(detail or {})}
    if failure_reason:
        payload["reason"] = failure_reason.strip()
    if (shown := run_status.shown_status(to, kind)) != to:  # a cancel: pages show "cancelled"
        payload["shown"] = shown
    return Transition(run.status, to, fields, payload, counted)


def transition_applied(run: Run, change: Transition) -> None:
    """In the transaction that wrote ``change`` (``run`` as it is now): an ended run is
    added to its day's rollup and traced once committed (O1)."""
    if change.to in rollups.FINISHED:
        rollups.rollup_run_ended(run, change.previous if change.counted else "")
    telemetry.run_transitioned(run, change.to)


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
    :class:`~runs.core.status.InvalidTransition` and changes nothing. The worker driving a
    run writes its own transitions with its checkpoint instead
    (``flow.checkpoints.defer_transition``), from the same :func:`transition_planned`.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if only_from is not None and run.status != only_from:
            return None
        change = transition_planned(
            run, to, failure_reason=failure_reason, detail=detail, now=timezone.now()
        )
        for name, value in change.fields.items():
            setattr(run, name, value)
        run.save(update_fields=list(change.fields))
        transition_applied(run, change)
        run_event_append(run_id=run.pk, type="status.changed", payload=change.payload)
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
    run_send(run_id=run_id)


def run_send(*, run_id: Any) -> None:
    """The message only, for a run whose row already says it was sent (a new run, whose
    insert notes the dispatch)."""
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
