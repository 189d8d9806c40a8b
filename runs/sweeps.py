"""Which runs the sweeper sends again (SPEC R9; issue 17 §5): active runs whose worker is
gone, and runs whose dispatch was lost, never a run whose message still waits in the queue
or in a live worker. It reads what the leases record (``runs.leases``): each run's lease,
who received its message, and which workers' keepers said lately that they live."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from .core import status as run_status
from .leases import CLAIMABLE, lease_seconds, workers_alive
from .lifecycle import RUN_EXECUTE
from .models import Run

logger = logging.getLogger(__name__)

LOST_MESSAGE_LEASES = 10  # an unclaimed run waits this many leases while others are queued


def run_queue_depth(queue: str = "") -> int | None:
    """Messages waiting in the run queue (or ``queue``); None when the broker cannot say."""
    from celery import current_app

    try:
        name = queue or current_app.amqp.router.route({}, RUN_EXECUTE)["queue"].name
        with current_app.connection_for_read() as broker:
            # Not passive: on Redis a queue no worker bound yet would be "not found";
            # declaring it (as every worker does) changes nothing and counts its messages.
            declared = broker.default_channel.queue_declare(queue=name)
        return int(declared.message_count)
    except Exception:
        logger.warning("Could not read the run queue's depth", exc_info=True)
        return None


def runs_to_sweep(
    *, limit: int = 500, queued: Callable[[], int | None] = run_queue_depth
) -> list[Any]:
    """Active runs whose worker is gone, and runs whose dispatch was lost; never a run whose
    message still waits in the queue or in a live worker, nor one sent again within a
    lease (``dispatched_at``: a backlog must not be answered with more messages).

    - A lease that expired: its worker stopped renewing it (killed, frozen, cut off).
    - An active run nobody claimed for a lease (created, or resumed after a decision):
      received by a worker that is gone (its keeper stopped saying so), sent again;
      received by a live one, left to it for ``LOST_MESSAGE_LEASES`` leases (then sent
      again: a task that died before its claim); received by none, sent again when the run
      queue is empty (its message cannot be waiting) or after ``LOST_MESSAGE_LEASES``
      leases behind a backlog. When the broker cannot say how many are queued, sent again.
    """
    now = timezone.now()
    stale = now - timedelta(seconds=lease_seconds())
    long_lost = now - timedelta(seconds=lease_seconds() * LOST_MESSAGE_LEASES)
    rows = list(
        Run.objects.filter(status__in=CLAIMABLE)
        .filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=stale))
        .filter(
            Q(lease_expires_at__lt=now)
            | Q(lease_expires_at__isnull=True, status=run_status.CREATED, created_at__lt=stale)
            | Q(lease_expires_at__isnull=True, started_at__isnull=False, updated_at__lt=stale)
        )
        .order_by("updated_at")
        .values_list(
            "pk", "lease_expires_at", "received_by", "received_at", "dispatched_at", "updated_at"
        )[:limit]
    )
    alive = workers_alive({row[2] for row in rows if row[2]})
    depth: int | None = -1  # not read yet
    found = []
    for pk, expires, received, received_at, dispatched, updated in rows:
        if expires is not None:
            found.append(pk)
        elif received:
            if received not in alive or (received_at or updated) < long_lost:
                found.append(pk)
        else:
            if depth == -1:
                depth = queued()
            if not depth or (dispatched or updated) < long_lost:
                found.append(pk)
    return found
