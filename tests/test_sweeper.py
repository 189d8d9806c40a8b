"""The sweeper sends a run again only when its worker is gone or its message was lost
(issue 17 §5): never a run whose message still waits in the queue or in a live worker.
And the lease keeper: one per process, renewing every lease it holds in one statement."""

from __future__ import annotations

import datetime
import uuid
from types import SimpleNamespace

import pytest
from celery import current_app
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.leases import (
    KEEPER,
    RECEIPTS,
    Heartbeat,
    lease_claim,
    lease_seconds,
    node_of,
    run_received,
    run_received_signal,
    workers_alive,
    workers_seen,
)
from runs.lifecycle import run_dispatch
from runs.models import Run
from runs.services import run_create
from runs.sweeps import run_queue_depth, runs_to_sweep
from tests.conftest import SEEDED
from tests.helpers import FIX
from tests.stack import wait_until

pytestmark = SEEDED


def aged(run: Run, leases: float = 2) -> Run:
    """The run as if created (and last changed) ``leases`` leases ago."""
    then = timezone.now() - datetime.timedelta(seconds=lease_seconds() * leases)
    Run.objects.filter(pk=run.pk).update(created_at=then, updated_at=then)
    return run


def swept(queued: int | None) -> list:
    return runs_to_sweep(queued=lambda: queued)


def test_an_expired_lease_is_swept_whatever_the_queue_holds(run):
    lease_claim(run_id=run.pk, worker="gone@host:1")
    Run.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert run.pk in swept(queued=50)


def test_an_unclaimed_run_nobody_received_waits_while_the_queue_holds_messages(run):
    aged(run)
    assert run.pk not in swept(queued=3)  # its message may be among them
    assert run.pk in swept(queued=0)  # it cannot be: it was lost
    assert run.pk in swept(queued=None)  # the broker cannot say: send it again (harmless)


def test_a_message_lost_behind_a_backlog_is_sent_again_after_ten_leases(run):
    aged(run, leases=11)
    assert run.pk in swept(queued=3)


def test_a_young_unclaimed_run_is_left_alone(run):
    assert run.pk not in swept(queued=0)


def test_a_run_received_by_a_live_worker_is_left_to_it_and_a_dead_ones_is_sent_again(run):
    node = f"busy-{uuid.uuid4().hex[:8]}@host"
    aged(run)
    run_received(run.pk, node)
    assert Run.objects.get(pk=run.pk).received_by == node
    assert run.pk in swept(queued=0)  # nobody says the node lives
    workers_seen({node})
    assert workers_alive({node, "other@host"}) == {node}
    assert run.pk not in swept(queued=0)  # its message is in a live worker's hands


def test_a_new_dispatch_forgets_who_received_the_last_one(run):
    run_received(run.pk, "old@host")
    run_dispatch(run_id=run.pk)
    assert Run.objects.get(pk=run.pk).received_by == ""


def test_a_claimed_run_is_not_marked_received(run):
    lease_claim(run_id=run.pk, worker="me@host:1")
    run_received(run.pk, "late@host")
    assert Run.objects.get(pk=run.pk).received_by == ""


def test_the_workers_signal_notes_only_run_dispatches(run):
    run_received_signal(request=SimpleNamespace(name="other.task", args=[str(run.pk)]))
    RECEIPTS.flush()
    assert Run.objects.get(pk=run.pk).received_by == ""
    run_received_signal(
        request=SimpleNamespace(name="runs.tasks.run_execute", args=[str(run.pk)], hostname="n@h")
    )
    wait_until(
        lambda: Run.objects.get(pk=run.pk).received_by == "n@h",
        timeout=10,
        what="the receipt thread to note it",
    )


def test_receipts_are_noted_off_the_consumer_thread_in_one_statement(run, personas, agent):
    """The consumer hands receipts over and goes on; they are noted together, and a claimed
    run keeps none (whether the note comes before the claim or after it)."""
    others = [
        run_create(
            agent=agent,
            workspace=run.workspace,
            requester=personas.operator,
            request=run.request,
            dispatch=False,
        )
        for _ in range(3)
    ]
    with CaptureQueriesContext(connection) as queries:
        for each in [run, *others]:
            run_received_signal(
                request=SimpleNamespace(
                    name="runs.tasks.run_execute", args=[str(each.pk)], hostname="n@h"
                )
            )
    assert len(queries) == 0  # nothing written in the consumer's thread
    lease_claim(run_id=others[0].pk, worker="n@h:1")
    RECEIPTS.flush()
    found = dict(
        Run.objects.filter(pk__in=[r.pk for r in [run, *others]]).values_list("pk", "received_by")
    )
    assert [found[r.pk] for r in [run, *others]] == ["n@h", "", "n@h", "n@h"]


def test_the_queue_depth_is_read_from_the_real_broker():
    from kombu import Exchange, Queue

    queue = f"test-depth-{uuid.uuid4().hex[:8]}"
    assert run_queue_depth(queue) == 0  # a queue nobody declared holds nothing
    with current_app.connection_for_write() as broker:  # as a worker consuming it would
        Queue(queue, Exchange(queue), routing_key=queue)(broker.default_channel).declare()
    for _ in range(2):
        current_app.send_task("runs.tasks.run_execute", args=[str(uuid.uuid4())], queue=queue)
    try:
        assert run_queue_depth(queue) == 2
    finally:
        with current_app.connection_for_write() as broker:
            broker.default_channel.queue_purge(queue)


# --- the lease keeper ---------------------------------------------------------------------
@pytest.fixture
def leases(personas, agent, workspace):
    """Five claimed runs of this process."""
    runs = [
        run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request=FIX,
            dispatch=False,
        )
        for i in range(5)
    ]
    return [lease_claim(run_id=r.pk, worker=f"keeper-test@host:{i}") for i, r in enumerate(runs)]


def test_one_beat_renews_every_lease_of_the_process_in_one_statement(leases):
    beats = [Heartbeat(lease) for lease in leases]
    Run.objects.filter(pk__in=[lease.run_id for lease in leases]).update(
        lease_expires_at=timezone.now() + datetime.timedelta(seconds=1)
    )
    KEEPER._renewed_at = 0.0  # due now
    with CaptureQueriesContext(connection) as queries:
        KEEPER.beat(beats)
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1
    soon = timezone.now() + datetime.timedelta(seconds=lease_seconds() / 2)
    assert all(
        r.lease_expires_at > soon
        for r in Run.objects.filter(pk__in=[lease.run_id for lease in leases])
    )
    assert not any(beat.lost for beat in beats)
    assert workers_alive({node_of(leases[0].worker)}) == {"keeper-test@host"}


def test_a_beat_finds_the_run_another_worker_took_and_the_cancels(leases):
    beats = [Heartbeat(lease) for lease in leases]
    taken, cancelled = leases[0], leases[1]
    Run.objects.filter(pk=taken.run_id).update(lease_expires_at=timezone.now())
    assert lease_claim(run_id=taken.run_id, worker="thief@host:9") is not None
    Run.objects.filter(pk=cancelled.run_id).update(cancel_requested_at=timezone.now())
    KEEPER._renewed_at = 0.0
    KEEPER.beat(beats)
    assert [b.lost for b in beats] == [True, False, False, False, False]
    assert [b.cancelled for b in beats] == [False, True, False, False, False]
    # The thief's lease is its own: the keeper renewed only the tokens it holds.
    assert Run.objects.get(pk=taken.run_id).lease_owner == "thief@host:9"
