"""A suite run while it runs (SPEC E1): its counts so far, its runner's sign of life, and
the news of both for the evals page.

The runner (a worker, or ``run_evals``) counts each case on the suite's row as it is
judged and renews ``heartbeat_at`` as it goes; every change is news for the evals page's
WebSocket group, whose consumer sends the page its progress fragment. A suite whose runner
stopped (a killed worker, a task no worker took, a closed terminal) is found by
:func:`suites_abandoned_mark`, the one place that ends such a suite: beat's sweeper calls
it, and so does every suite before it begins, so a dead suite never blocks the next one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from harness_console.web.live import EVALS_GROUP, group_news_publish
from runs.models import Run

from .fixtures import eval_user
from .loading import SuiteError
from .models import EvalSuiteRun
from .running import SETTLED, run_cancel_if_waiting

logger = logging.getLogger(__name__)

SUITE_PROGRESS_MESSAGE: Final = "suite.progress"  # the consumer's suite_progress handler
BEATS_PER_LEASE: Final = 6


class SuiteAbandoned(SuiteError):
    """The suite was marked abandoned while this runner still ran it: it stops."""


def suite_news(suite_id: Any) -> None:
    """Tell the evals pages that the suite changed, once the change is committed."""
    message = {"type": SUITE_PROGRESS_MESSAGE, "suite": str(suite_id)}
    transaction.on_commit(lambda: group_news_publish(EVALS_GROUP, message))


def lease() -> timedelta:
    return timedelta(seconds=settings.HARNESS_EVAL_LEASE_SECONDS)


@dataclass
class Progress:
    """What the runner of one suite tells as it goes: the number of cases, each verdict
    (counted on the row and said on ``say``, the command's output) and that it lives."""

    suite_id: Any
    say: Callable[[str], None] = lambda line: None
    last_beat: float = field(default_factory=time.monotonic)

    def total(self, cases: int) -> None:
        EvalSuiteRun.objects.filter(pk=self.suite_id).update(
            total=cases, heartbeat_at=timezone.now()
        )
        self.last_beat = time.monotonic()
        suite_news(self.suite_id)

    def recorded(self, verdict: str, line: str) -> None:
        """One case judged: ``verdict`` is passed, failed or skipped (the row's counter)."""
        assert verdict in ("passed", "failed", "skipped")
        EvalSuiteRun.objects.filter(pk=self.suite_id).update(
            **{verdict: F(verdict) + 1}, heartbeat_at=timezone.now()
        )
        self.last_beat = time.monotonic()
        self.say(line)
        suite_news(self.suite_id)

    def beat(self) -> None:
        """Renew the suite's sign of life (a few times per lease, however often called);
        :class:`SuiteAbandoned` when it was marked abandoned meanwhile."""
        if time.monotonic() - self.last_beat < lease().total_seconds() / BEATS_PER_LEASE:
            return
        alive = EvalSuiteRun.objects.filter(
            pk=self.suite_id, status=EvalSuiteRun.Status.RUNNING
        ).update(heartbeat_at=timezone.now())
        self.last_beat = time.monotonic()
        if not alive:
            raise SuiteAbandoned(
                "This suite was marked abandoned while it ran (its runner was silent for "
                f"longer than {lease().total_seconds():g} s); it stops here."
            )


def suites_abandoned_mark(*, now: datetime | None = None) -> int:
    """End every running suite whose runner was silent for longer than the lease, then
    cancel the eval runs such a suite left unfinished (the next suite lays its cases out
    in the same eval workspaces). Returns how many suites it ended."""
    now = now or timezone.now()
    stale = EvalSuiteRun.objects.filter(
        status=EvalSuiteRun.Status.RUNNING, heartbeat_at__lt=now - lease()
    )
    ended = 0
    for pk, worker in stale.values_list("pk", "worker"):
        why = (
            f"its runner ({worker}) showed no sign of life for {lease().total_seconds():g} s"
            if worker
            else f"no worker took it within {lease().total_seconds():g} s"
        )
        marked = stale.filter(pk=pk).update(
            status=EvalSuiteRun.Status.ERROR, error=f"abandoned: {why}", finished_at=now
        )
        if marked:
            logger.warning("Eval suite %s abandoned: %s", pk, why)
            suite_news(pk)
            ended += 1
    if ended:
        eval_runs_orphaned_cancel(before=now)
    return ended


def eval_runs_orphaned_cancel(*, before: datetime) -> None:
    """Cancel the eval set's unfinished runs created before ``before``: an abandoned
    suite's (a suite that begins after it was ended creates its runs later)."""
    runs = Run.objects.filter(agent__for_evals=True, created_at__lt=before).exclude(
        status__in=SETTLED
    )
    if runs.exists():
        user = eval_user()
        for run in runs:
            run_cancel_if_waiting(run, user)
