"""Celery tasks of the run domain: thin wrappers that reload by id and call one service."""

from __future__ import annotations

import logging
import os

from asgiref.sync import async_to_sync
from celery import shared_task
from channels.layers import get_channel_layer

from . import flow, leases, services

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def run_execute(run_id: str) -> None:
    """Drive a run until it waits for a person or ends (runs.flow).

    A duplicate delivery does nothing: the claim is a conditional update on the lease. No
    retries: a run whose worker died is found again by the sweeper, not by redelivery.
    """
    worker = f"{run_execute.request.hostname or 'worker'}:{os.getpid()}"
    flow.run_execute(run_id=run_id, worker=worker)


@shared_task(ignore_result=True)
def runs_sweep() -> int:
    """Re-dispatch active runs nobody holds (a killed worker, a lost message)."""
    found = leases.runs_to_sweep()
    for run_id in found:
        logger.info("Sweeper re-dispatches run %s", run_id)
        services.run_dispatch(run_id=run_id)
    return len(found)


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
    from .rollups import rollups_reconcile

    rollups_reconcile()


@shared_task(ignore_result=True)
def run_session_end(run_id: str, outcome: str, reason: str) -> None:
    """session_end hooks of a run that ended outside a worker (services.session_end_dispatch)."""
    from .models import Run
    from .run_hooks import session_end

    run = Run.objects.select_related("agent", "workspace").filter(pk=run_id).first()
    if run is not None and (run.loop or {}).get("state"):
        session_end(run, outcome=outcome, reason=reason)
