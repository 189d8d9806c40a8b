"""Celery tasks of the eval set: thin wrappers that call one service."""

from __future__ import annotations

import os

from celery import shared_task

from .progress import suites_abandoned_mark
from .starting import suite_run_claimed


@shared_task(ignore_result=True)
def suite_execute(suite_id: str) -> None:
    """Run a suite started from the evals page (on the default queue: settings).

    At most once: acknowledged on receipt, no retries. A duplicate delivery finds the suite
    claimed and does nothing; a suite whose worker died is ended by :func:`suites_sweep`.
    """
    worker = f"{suite_execute.request.hostname or 'worker'}:{os.getpid()}"
    suite_run_claimed(suite_id=suite_id, worker=worker)


@shared_task(ignore_result=True)
def suites_sweep() -> int:
    """Beat: end the running suites whose runner fell silent, and cancel their runs."""
    return suites_abandoned_mark()
