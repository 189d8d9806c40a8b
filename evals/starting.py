"""A suite started from the evals page (SPEC E1): begun in the request, run by a worker.

The request only begins the suite (its row, refused while another suite runs: the same
``suite_begin`` the command passes) and queues the task once that is committed; the
worker claims the row with a conditional update and runs it. The task is at-most-once:
a suite whose worker died is ended by the sweeper (``progress.suites_abandoned_mark``),
never run twice.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from celery import current_app
from django.db import transaction
from django.utils import timezone

from .loading import SuiteError, cases_load
from .models import EvalSuiteRun
from .progress import suite_news
from .suite import suite_begin, suite_check, suite_execute, suite_fail

logger = logging.getLogger(__name__)

# By name: the tasks module imports this one. Routed to the default queue (settings).
SUITE_EXECUTE: Final = "evals.tasks.suite_execute"
# A worker's eval runs are claimed by the run workers as any run is; within this long.
CLAIM_TIMEOUT: Final = 60.0


def suite_start(*, model: str, category: str, user: Any) -> EvalSuiteRun:
    """Begin a suite for a worker to run: :class:`SuiteError` says why it cannot (another
    suite runs, no key for the live model); the task is queued once the row is committed."""
    suite_check(model=model, category=category)
    with transaction.atomic():
        suite = suite_begin(model=model, category=category, started_by=user.get_username())
        transaction.on_commit(lambda: _suite_queue(suite))
    return suite


def _suite_queue(suite: EvalSuiteRun) -> None:
    """Hand the suite to a worker; one that cannot be handed over ends at once, said."""
    try:
        current_app.send_task(SUITE_EXECUTE, args=[str(suite.pk)])
    except Exception as error:
        logger.exception("Could not queue eval suite %s", suite.pk)
        suite_fail(suite, f"it could not be handed to a worker: {error}")


def suite_run_claimed(*, suite_id: str, worker: str) -> EvalSuiteRun | None:
    """The worker's side: claim the suite (a conditional update: a second delivery, or a
    suite the sweeper ended, gets no row and does nothing), then load and run its cases.
    None when it was not claimed."""
    claimed = EvalSuiteRun.objects.filter(
        pk=suite_id, status=EvalSuiteRun.Status.RUNNING, worker=""
    ).update(worker=worker[:200], heartbeat_at=timezone.now())
    if claimed != 1:
        logger.info("Eval suite %s was not claimed by %s (taken or ended)", suite_id, worker)
        return None
    suite = EvalSuiteRun.objects.get(pk=suite_id)
    suite_news(suite.pk)
    try:
        loaded = cases_load(suite.category)
    except SuiteError as error:
        suite_fail(suite, str(error))
        return suite
    try:
        return suite_execute(suite, loaded, claim_timeout=CLAIM_TIMEOUT)
    except SuiteError:  # recorded on the suite, which the page shows
        logger.warning("Eval suite %s stopped", suite.pk, exc_info=True)
        return EvalSuiteRun.objects.get(pk=suite.pk)
