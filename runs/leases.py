"""Who runs a run right now (SPEC R9): a lease in the run's own row, with a fencing token.

The database is the source of truth, not the broker: the filesystem broker never
redelivers a task whose worker died, and Redis redelivers only after its visibility
timeout (../shared/NOTES.md). So:

- a worker *claims* a run with one conditional update (free or expired lease only), which
  also increments ``lease_token``; only one claimant can win; taking over an expired lease
  (its worker died or froze) also counts in ``lease_takeovers``;
- while it works, a heartbeat thread renews the lease; every checkpoint is written inside
  :func:`fenced`, which re-reads the token under the row lock, so a worker that lost its
  lease (frozen past the expiry, then woken) cannot write another step;
- a periodic sweeper re-dispatches active runs whose lease expired; a run waiting for a
  person is not active in this sense and holds no lease, nor does an ended one (the
  transition that ends it or makes it wait clears the lease fields, and neither the
  heartbeat nor a fence sets them again).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Case, DateTimeField, F, PositiveIntegerField, Q, Value, When
from django.utils import timezone

from .core import status as run_status
from .models import Run
from .tools.isolation import tool_calls_in_flight, tool_processes_stop, tool_scope

logger = logging.getLogger(__name__)

CLAIMABLE = run_status.CLAIMABLE


class LeaseLost(Exception):
    """Another worker owns the run now; this one must stop without writing."""


@dataclass(frozen=True)
class Lease:
    run_id: Any
    token: int
    worker: str
    takeovers: int = 0  # how many workers lost this run before this one (see the model)


def lease_seconds() -> float:
    return float(settings.HARNESS_RUN_LEASE_SECONDS)


def lease_claim(*, run_id: Any, worker: str) -> Lease | None:
    """Take the run if nobody holds a live lease on it; None when another worker does."""
    now = timezone.now()
    with transaction.atomic():
        claimed = (
            Run.objects.filter(pk=run_id, status__in=CLAIMABLE)
            .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
            .update(
                lease_owner=worker[:200],
                lease_token=F("lease_token") + 1,
                lease_takeovers=Case(
                    When(lease_expires_at__isnull=False, then=F("lease_takeovers") + 1),
                    default=F("lease_takeovers"),
                    output_field=PositiveIntegerField(),
                ),
                lease_expires_at=now + timedelta(seconds=lease_seconds()),
            )
        )
        if not claimed:
            return None
        token, takeovers = (
            Run.objects.filter(pk=run_id).values_list("lease_token", "lease_takeovers").get()
        )
    return Lease(run_id=run_id, token=token, worker=worker, takeovers=takeovers)


def lease_renew(lease: Lease) -> bool:
    """Extend the lease while the run is active; False once another worker holds it (a
    run that waits or ended is not renewed: its lease was cleared on purpose)."""
    expires = timezone.now() + timedelta(seconds=lease_seconds())
    held = Run.objects.filter(pk=lease.run_id, lease_token=lease.token)
    return bool(held.filter(status__in=CLAIMABLE).update(lease_expires_at=expires)) or (
        held.exists()
    )


def lease_release(lease: Lease) -> None:
    """Free the run (it waits for a person, or it ended); the token stays, as a fence."""
    Run.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
        lease_owner="", lease_expires_at=None
    )


@contextmanager
def fenced(lease: Lease) -> Iterator[None]:
    """A transaction that commits only while ``lease`` is still the run's lease.

    One conditional update both checks the token and extends the lease; it also takes the
    row's lock (PostgreSQL) or the write lock (SQLite's IMMEDIATE transactions) until the
    commit, so no other writer slips in between the check and the checkpoint.
    """
    with transaction.atomic():
        expires = timezone.now() + timedelta(seconds=lease_seconds())
        if not Run.objects.filter(pk=lease.run_id, lease_token=lease.token).update(
            lease_expires_at=Case(
                When(status__in=CLAIMABLE, then=Value(expires)),
                default=Value(None),
                output_field=DateTimeField(),
            )
        ):
            owner = Run.objects.filter(pk=lease.run_id).values_list("lease_owner", flat=True)
            raise LeaseLost(f"Run {lease.run_id} is now leased by {owner.first() or 'nobody'}.")
        yield


class Heartbeat:
    """Renews a lease every third of its length from a thread, until stopped; stops the
    run's tools when the run is cancelled.

    The thread has its own database connection (Django's are per thread) and closes it.
    If a renewal finds the lease gone, or none succeeded for a whole lease, ``lost`` is set,
    the run's tools in this process are stopped, and the work stops at its next checkpoint
    (the fence refuses it anyway). While a tool call of the run is in flight,
    it also reads the run's cancel flag every ``CANCEL_POLL_SECONDS``: a cancel stops the
    tool at once (``tool_processes_stop``), and the run then ends as cancelled at its next
    checkpoint instead of when the tool would have finished. Entering the heartbeat opens
    the run's tool scope in the driving thread: the tools it runs are the run's.
    """

    CANCEL_POLL_SECONDS = 0.5

    def __init__(self, lease: Lease) -> None:
        self.lease, self.lost = lease, False
        self._stop = threading.Event()
        self._scope = tool_scope(lease.run_id)
        # In the run's context (contextvars), so its log lines carry the run and trace ids.
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._beat,),
            name="lease-heartbeat",
            daemon=True,
        )

    def __enter__(self) -> Heartbeat:
        self._scope.__enter__()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=lease_seconds())
        self._scope.__exit__(None, None, None)

    def _beat(self) -> None:
        renew_every = lease_seconds() / 3
        renewed = time.monotonic()
        try:
            while not self._stop.wait(min(renew_every, self.CANCEL_POLL_SECONDS)):
                try:
                    if time.monotonic() >= renewed + renew_every:
                        if not lease_renew(self.lease):
                            return self._lost("another worker holds the run now")
                        renewed = time.monotonic()
                    self._stop_tools_if_cancelled()
                except Exception:  # a busy database: try again next beat, while it lasts
                    logger.warning("Could not renew the lease of run %s", self.lease.run_id)
                    close_old_connections()
                    if time.monotonic() >= renewed + lease_seconds():
                        return self._lost("its lease could not be renewed before it expired")
        finally:
            connection.close()

    def _lost(self, why: str) -> None:
        """The run may be another worker's now: its tools in this process stop at once, so
        nothing this worker started goes on beside the new holder (their effects could
        not land anyway: the fence refuses them)."""
        self.lost = True
        stopped = tool_processes_stop(
            run_id=self.lease.run_id, reason=f"this worker lost the run: {why}"
        )
        logger.warning(
            "Lost the lease of run %s (%s); %s tool call(s) stopped",
            self.lease.run_id,
            why,
            stopped,
        )

    def _stop_tools_if_cancelled(self) -> None:
        """One indexed read, and only while a tool of the run runs in this process."""
        run_id = self.lease.run_id
        if not tool_calls_in_flight(run_id=run_id):
            return
        if not Run.objects.filter(pk=run_id, cancel_requested_at__isnull=False).exists():
            return
        stopped = tool_processes_stop(run_id=run_id, reason="the run was cancelled")
        if stopped:
            logger.info("Run %s was cancelled: %s tool call(s) stopped", run_id, stopped)


def runs_to_sweep(*, limit: int = 500) -> list[Any]:
    """Active runs nobody holds: a lease that expired, or a created run never claimed
    (its task was lost with a killed worker on the filesystem broker)."""
    now = timezone.now()
    stale_created = now - timedelta(seconds=lease_seconds())
    return list(
        Run.objects.filter(status__in=CLAIMABLE)
        .filter(
            Q(lease_expires_at__lt=now)
            | Q(
                lease_expires_at__isnull=True,
                status=run_status.CREATED,
                created_at__lt=stale_created,
            )
            | Q(
                lease_expires_at__isnull=True,
                started_at__isnull=False,
                updated_at__lt=stale_created,
            )
        )
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )
