"""Celery tasks of the run domain: thin wrappers that reload by id and call one service."""

from __future__ import annotations

import logging
import os
import threading
from contextvars import Token
from typing import Any

from asgiref.sync import async_to_sync
from celery import shared_task
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutdown,
)
from channels.layers import get_channel_layer
from django.conf import settings

from approvals.tasks import reminders_send
from harness_console.logging import run_log_context, run_log_enter, run_log_exit

from . import flow, sweeps
from .approval_outcomes import approvals_expire_due
from .lifecycle import run_dispatch
from .model_clients import sdk_preload
from .models import Run
from .observability import telemetry
from .observability.rollups import rollups_fold, rollups_reconcile
from .run_hooks import session_end

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def run_execute(run_id: str) -> None:
    """Drive a run until it waits for a person or ends (runs.flow).

    A duplicate delivery does nothing: the claim is a conditional update on the lease. No
    retries: a run whose worker died is found again by the sweeper, not by redelivery.
    """
    worker = f"{run_execute.request.hostname or 'worker'}:{os.getpid()}"
    with run_log_context(run_id):
        try:
            flow.run_drive(run_id=run_id, worker=worker)
        finally:
            # A prefork pool may recycle this process after the task; under threads, spans
            # leave as the run ends rather than whenever the batch is next sent.
            telemetry.tracing_flush()


@shared_task(ignore_result=True)
def runs_sweep() -> int:
    """Re-dispatch active runs nobody holds (a killed worker, a lost message)."""
    found = sweeps.runs_to_sweep()
    for run_id in found:
        logger.info("Sweeper re-dispatches run %s", run_id)
        run_dispatch(run_id=run_id)
    return len(found)


@shared_task(ignore_result=True)
def approvals_sweep() -> None:
    """Beat: remind the approvers of requests about to expire, then expire the overdue;
    a run waiting on an expired request fails (SPEC A5)."""
    reminders_send()
    approvals_expire_due()


@shared_task(ignore_result=True)
def live_layer_trim() -> None:
    """The embedded channel layer keeps delivered rows until they expire; drop expired ones."""
    layer = get_channel_layer()
    clean = getattr(layer, "clean_expired", None)
    if clean is not None:
        async_to_sync(clean)()


@shared_task(ignore_result=True)
def rollups_reconcile_recent() -> None:
    """Beat: yesterday's and today's rollups rebuilt from the raw rows (SPEC O6)."""
    rollups_reconcile()


@shared_task(ignore_result=True)
def rollups_fold_pending() -> None:
    """Beat: the runs that ended lately, moved from their deltas into their cells (SPEC O6):
    the readers fold before they read anyway; this keeps the delta table short."""
    rollups_fold()


@shared_task(ignore_result=True)
def run_session_end(run_id: str, outcome: str, reason: str) -> None:
    """session_end hooks of a run that ended outside a worker (lifecycle.session_end_dispatch)."""
    with run_log_context(run_id):
        run = Run.objects.select_related("agent", "workspace").filter(pk=run_id).first()
        if run is not None and (run.loop or {}).get("state"):
            session_end(run, outcome=outcome, reason=reason)


# --- one run's context for Celery's own lines, and each worker process's tracer ------------
RUN_TASKS = frozenset({"runs.tasks.run_execute", "runs.tasks.run_session_end"})
# Keyed by task and thread: under the threads pool, a redelivered message may run on two
# threads at once, and a token can only be reset in the thread (context) that set it.
_log_tokens: dict[tuple[str, int], Token[tuple[str, str]]] = {}


@task_prerun.connect
def _run_task_started(task_id: str, task: Any, args: Any = (), **kwargs: Any) -> None:
    """Celery logs a task's end ("succeeded in ...") outside the task's body: the run's
    context is set around the whole execution, so that line carries it too. Both signals
    are sent on the thread that runs the task, whose own context the token belongs to."""
    if task.name in RUN_TASKS and args:
        _log_tokens[task_id, threading.get_ident()] = run_log_enter(args[0])


@task_postrun.connect
def _run_task_finished(task_id: str, **kwargs: Any) -> None:
    token = _log_tokens.pop((task_id, threading.get_ident()), None)
    if token is not None:
        run_log_exit(token)


def _forks(worker: Any) -> bool:
    pool = getattr(worker, "pool_cls", "")
    return "prefork" in (pool if isinstance(pool, str) else getattr(pool, "__module__", ""))


@worker_init.connect
def _worker_started(sender: Any = None, **kwargs: Any) -> None:
    """A threads pool runs its tasks in this process and sends no worker_process_init: the
    tracer (its exporter's thread) starts here, once, before the first task. A prefork
    parent traces nothing; its children configure theirs below. A worker that takes runs
    imports the model SDK now (a prefork parent for its children), not in its first run."""
    if not _forks(sender):
        telemetry.tracing_configure()
    if _takes_runs(sender):
        sdk_preload()


def _takes_runs(worker: Any) -> bool:
    """Whether this worker consumes the run queue (its queues are set before worker_init)."""
    try:
        return settings.RUNS_QUEUE in worker.app.amqp.queues.consume_from
    except AttributeError:  # not a worker as Celery makes one: take no chance
        return True


@worker_shutdown.connect
def _worker_stopping(**kwargs: Any) -> None:
    """Flush and stop the exporter as the worker exits (a no-op where this process never
    configured one: a prefork parent)."""
    telemetry.tracing_shutdown()


@worker_process_init.connect
def _pool_process_started(**kwargs: Any) -> None:
    """Each prefork pool process exports its own spans: an exporter's thread does not
    survive the fork, and the parent never traces anything."""
    telemetry.tracing_configure()


@worker_process_shutdown.connect
def _pool_process_stopping(**kwargs: Any) -> None:
    telemetry.tracing_shutdown()
