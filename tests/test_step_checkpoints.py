"""A loop step is one checkpoint (issue 17 §3), and what it holds is never lost or
misplaced: a cancel asked during the model call stops the call that turn asked for, a
harness failure still records the turn it held, and a lease the keeper no longer holds is
never set again."""

from __future__ import annotations

import datetime
import threading

from django.utils import timezone

from runs.leases import KEEPER, Heartbeat, lease_claim, lease_release, lease_seconds
from runs.model_clients import ReplayModel
from runs.models import ModelCall, Run, RunEvent, ToolCall, WriteRecord
from runs.tools.isolation import tool_in_flight
from tests.conftest import SEEDED
from tests.helpers import drive

pytestmark = SEEDED


def test_a_cancel_asked_during_the_model_call_stops_the_call_that_turn_asked_for(
    run, docs, monkeypatch, personas
):
    """The second turn asks for patchDraft; the cancel comes while the model answers. The
    keeper sees it before the call starts: the patch never runs, nothing is written, and
    the run ends cancelled with the turn recorded."""
    complete = ReplayModel.complete

    def cancelled_meanwhile(self, **kwargs):
        if self.position == 1:
            Run.objects.filter(pk=run.pk).update(
                cancel_requested_at=timezone.now(), cancel_requested_by=personas.operator
            )
            threading.Event().wait(KEEPER.CANCEL_POLL_SECONDS * 3)  # a model call's seconds
        return complete(self, **kwargs)

    monkeypatch.setattr(ReplayModel, "complete", cancelled_meanwhile)
    run = drive(run)
    assert run.status == "failed" and run.failure_reason.startswith("cancelled by")
    # Never started: the run ended at the step's start, or the call was refused at its own.
    patches = list(
        ToolCall.objects.filter(run=run, tool="patchDraft").values_list("status", "rule")
    )
    assert patches in ([], [("refused", "cancelled")])
    assert not WriteRecord.objects.filter(tool_call__run=run).exists()
    assert not (run.workspace.drafts_path / str(run.pk) / "docs" / "configuration.md").exists()
    assert list(run.model_calls.order_by("turn").values_list("turn", flat=True)) == [1, 2]


def test_a_harness_failure_still_records_the_turn_it_held(run, docs, monkeypatch):
    """The turn that asks for a tool is held for the call's checkpoint; a bug in between
    fails the run, and the turn (its usage and cost) is recorded all the same."""
    from runs.flow import tool_step

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the tool step")

    monkeypatch.setattr(tool_step, "_tool_call", broken)
    run = drive(run)
    assert run.status == "failed" and "a bug in the tool step" in run.failure_reason
    (call,) = ModelCall.objects.filter(run=run)
    assert call.turn == 1 and run.input_tokens == call.input_tokens > 0
    assert RunEvent.objects.filter(run=run, type="model.turn").count() == 1
    seqs = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_the_keeper_never_sets_a_lease_a_wait_or_a_release_cleared(run):
    lease = lease_claim(run_id=run.pk, worker="keeper@host:1")
    beat = Heartbeat(lease)
    lease_release(lease)  # the drive waits now; the keeper's snapshot still holds it
    KEEPER._renewed_at = 0.0
    KEEPER.beat([beat])
    row = Run.objects.get(pk=run.pk)
    assert row.lease_expires_at is None and row.lease_owner == ""


def test_a_late_beat_for_a_drive_that_ended_cannot_stop_the_runs_next_drive(run, caplog):
    """The keeper took its snapshot of the beats while the run's first drive held it; the
    drive then waited, and the run is driven again in this process (the new claim moved
    the token). The late beat reads a moved token: it must neither stop the new drive's tool
    (on the old code the revision a rejected change asked for was stopped so) nor log a
    lost lease, and the new drive's own beat goes on."""
    first = lease_claim(run_id=run.pk, worker="keeper@host:1")
    with Heartbeat(first) as stale:
        lease_release(first)  # the drive waits for a person
    second = lease_claim(run_id=run.pk, worker="keeper@host:1")
    assert second is not None and second.token != first.token
    stopped: list[str] = []
    with Heartbeat(second) as beat, tool_in_flight(stop=lambda: stopped.append("stopped")):
        KEEPER._renewed_at = 0.0
        KEEPER.beat([stale, beat])
        assert stopped == []
        assert not stale.lost and not beat.lost
    assert "Lost the lease" not in caplog.text


def test_a_stop_for_a_lost_drive_reaches_only_that_drive_s_tools(run):
    """Two drives of one run in this process, the first not yet ended when the run was
    taken again: the first's beat finds its lease gone and stops its own tools, none of
    the second's."""
    first = lease_claim(run_id=run.pk, worker="keeper@host:1")
    stopped: list[str] = []
    with Heartbeat(first) as stale:
        lease_release(first)
        second = lease_claim(run_id=run.pk, worker="keeper@host:1")
        with Heartbeat(second) as beat, tool_in_flight(stop=lambda: stopped.append("stopped")):
            KEEPER._renewed_at = 0.0
            KEEPER.beat([stale, beat])
            assert stale.lost and not beat.lost
            assert stopped == []


def test_a_drive_whose_run_waits_is_not_told_it_lost_it_when_the_run_is_taken_again(
    run, docs, monkeypatch, caplog
):
    """The drive commits the run's wait for a person, and before it has left, the person
    decides and another worker claims the run (its token moves), and the keeper beats. The
    drive let the run go itself: nothing is lost, and no lost lease is logged (the keeper
    said "Lost the lease ... 0 tool call(s) stopped" of a drive that had done its part)."""
    from runs.core import status as run_status
    from runs.flow import driver as flow_driver
    from runs.lifecycle import run_transition

    between_steps = flow_driver.connection_return
    taken = []

    def taken_meanwhile(**kwargs):
        between_steps(**kwargs)
        status = Run.objects.values_list("status", flat=True).get(pk=run.pk)
        if status == run_status.WAITING_FOR_APPROVAL and not taken:
            run_transition(run_id=run.pk, to=run_status.RUNNING)  # the person approved
            taken.append(lease_claim(run_id=run.pk, worker="other@host:2"))
            KEEPER._renewed_at = 0.0
            KEEPER.beat(list(KEEPER._beats))

    monkeypatch.setattr(flow_driver, "connection_return", taken_meanwhile)
    drive(run)
    assert taken and taken[0] is not None, "the run never waited for a person"
    assert "Lost the lease" not in caplog.text
    row = Run.objects.get(pk=run.pk)
    assert row.lease_owner == "other@host:2" and row.lease_token == taken[0].token
    lease_release(taken[0])


def test_a_release_forgets_the_receipt(run):
    from runs.leases import run_received

    run_received(run.pk, "node@host")
    lease = lease_claim(run_id=run.pk, worker="node@host:1")
    lease_release(lease)
    assert Run.objects.get(pk=run.pk).received_by == ""


def test_the_sweeper_does_not_answer_a_backlog_with_more_messages(run):
    from runs.lifecycle import run_dispatch
    from runs.sweeps import runs_to_sweep

    lease_claim(run_id=run.pk, worker="gone@host:1")
    Run.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert run.pk in runs_to_sweep(queued=lambda: 0)
    run_dispatch(run_id=run.pk)  # what the sweep does; nobody takes it yet
    assert run.pk not in runs_to_sweep(queued=lambda: 0)  # not again within a lease
    Run.objects.filter(pk=run.pk).update(
        dispatched_at=timezone.now() - datetime.timedelta(seconds=lease_seconds() * 2)
    )
    assert run.pk in runs_to_sweep(queued=lambda: 0)


def test_a_live_worker_that_never_claims_what_it_received_loses_it_after_ten_leases(run):
    from runs.leases import run_received, workers_seen
    from runs.sweeps import runs_to_sweep

    old = timezone.now() - datetime.timedelta(seconds=lease_seconds() * 11)
    run_received(run.pk, "stuck@host")
    workers_seen({"stuck@host"})
    Run.objects.filter(pk=run.pk).update(created_at=old, updated_at=old)
    assert run.pk not in runs_to_sweep(queued=lambda: 0)  # received just now: its own
    Run.objects.filter(pk=run.pk).update(received_at=old)
    assert run.pk in runs_to_sweep(queued=lambda: 0)  # a task that died before its claim
