"""Driving a run (SPEC R4, R9): claim its lease, keep it alive with a heartbeat, and call
the stage the run is in until it waits for a person or ends. Each stage checkpoints its own
work and answers :class:`~runs.flow.outcomes.Next`, ``Waits`` or ``Ended``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import InterfaceError, OperationalError

from ..connections import connection_return
from ..core import status as run_status
from ..leases import CLAIMABLE, Heartbeat, LeaseLost, lease_claim, lease_release
from ..models import Run
from ..services import cancel_if_requested
from .approval import approval_stage
from .checkpoints import defer_transition, pending_flush, run_fail, username
from .commit import commit_stage
from .driver_state import Driver
from .intake import intake_stage
from .outcomes import NEXT, Ended, Next, StageOutcome, Waits
from .synthesize import synthesize_stage
from .verify import verify_stage

logger = logging.getLogger(__name__)

MAX_UNITS_PER_CLAIM = 10_000  # a guard against a bug looping forever, far above max_turns
MAX_TAKEOVERS = 100  # workers lost by one run (killed, frozen): then it is given up
# A database that refused a connection, dropped it, or stayed locked past its timeout
# (SQLite's busy timeout, PostgreSQL's lock or pool timeout, a deadlock victim).
DATABASE_FAULTS = (OperationalError, InterfaceError)

Stage = Callable[[Driver, Run], StageOutcome]
STAGES: dict[str, Stage] = {
    "intake": intake_stage,
    "synthesize": synthesize_stage,
    "verify": verify_stage,
    "approval": approval_stage,
    "commit": commit_stage,
}


def run_drive(*, run_id: Any, worker: str) -> None:
    """Claim the run and drive it until it waits for a person or ends.

    1. Claim the lease (one conditional update); a run held, waiting or ended is left.
    2. A run that keeps losing its workers (killing them, say, out of memory) fails; a
       resume after a person's decision is no lost worker, however many a run asks.
    3. Under a heartbeat, advance stage by stage; a lost lease stops without writing, a
       harness bug fails the run saying why, and nothing recorded is lost; a database that
       fails this worker leaves the run to another, as a killed worker does (3').
    4. Release the lease; a cancel that arrived during a wait takes effect now.
    """
    lease = lease_claim(run_id=run_id, worker=worker)
    if lease is None:
        logger.info("Run %s is not claimable (held, waiting or ended).", run_id)
        return
    if lease.takeovers > MAX_TAKEOVERS:
        run_fail(lease, f"abandoned after {MAX_TAKEOVERS} lost workers: its workers keep stopping")
        lease_release(lease)
        return
    driver: Driver | None = None
    left, outcome = False, None
    try:
        with Heartbeat(lease) as beat:
            driver = Driver(lease=lease, beat=beat)
            for _ in range(MAX_UNITS_PER_CLAIM):
                outcome = _advance(driver)
                done = not isinstance(outcome, Next)
                if done:
                    beat.release()  # it waits or ended: its own checkpoint let the run go
                connection_return()  # between steps, the other runs' and the keeper's
                if done:
                    break
            pending_flush(driver)  # a stage that stopped with writes held: they are the run's
    except LeaseLost as error:
        logger.warning("Stopping: %s", error)
    except DATABASE_FAULTS as error:
        # 3'. The database refused, dropped or timed out this worker: a fault of the
        # machine, not of the run, and nothing half-written (every checkpoint is one
        # transaction). The worker leaves as a killed one does, lease unreleased: the lease
        # expires, the sweeper sends the run again, and recovery resumes it from its last
        # checkpoint, reconciling any tool call it finds running. Counted as a lost worker.
        logger.warning("Run %s left for another worker: the database failed: %s", run_id, error)
        left = True
    except Exception as error:  # a harness bug: the run fails and says why, nothing is lost
        logger.exception("Run %s failed in the harness", run_id)
        _held_written(driver)
        run_fail(lease, f"internal error in the harness: {type(error).__name__}: {error}"[:2000])
    finally:
        if not left:
            lease_release(lease)
            if not isinstance(outcome, Ended):  # an ended run has nothing left to cancel
                cancel_if_requested(run_id=run_id)


def _held_written(driver: Driver | None) -> None:
    """Before a harness failure: what the step held (a model turn, its usage and cost)."""
    if driver is None or not driver.pending:
        return
    try:
        pending_flush(driver)
    except Exception:
        logger.exception("Run %s: the held writes could not be recorded", driver.lease.run_id)


def _advance(driver: Driver) -> StageOutcome:
    """One unit of the stage the run is in. The run's row is read again only when the last
    unit did not leave it current in memory (the model turn and the tool step do: they
    wrote every field they changed, so reading it again would read what they wrote); a
    cancel is seen by the lease keeper or by the checkpoint's own statement."""
    if driver.beat.lost:
        raise LeaseLost(f"The lease of run {driver.lease.run_id} expired.")
    if driver.run is None or not driver.current or driver.cancelled or driver.beat.cancelled:
        pending_flush(driver)
        driver.run = Run.objects.select_related("agent", "workspace", "requester").get(
            pk=driver.lease.run_id
        )
        driver.cancelled = driver.run.cancel_requested_at is not None
    run, driver.current = driver.run, False
    if run.status == run_status.WAITING_FOR_ANSWER:
        return Waits("answer")
    if run.status == run_status.WAITING_FOR_APPROVAL:
        return Waits("approval")
    if run.status not in CLAIMABLE:  # ended meanwhile (failed, completed, rolled back)
        return Ended("failed" if run.status == run_status.FAILED else "completed")
    if run.cancel_requested_at is not None:
        who = username(run.cancel_requested_by)
        return run_fail(driver, f"cancelled by {who}", cancelled=True)
    if run.status == run_status.CREATED:  # written with the intake's checkpoint
        defer_transition(driver, run, run_status.PLANNING, detail={"worker": driver.lease.worker})
        driver.current = True
        return NEXT
    return STAGES[run.stage or "intake"](driver, run)
