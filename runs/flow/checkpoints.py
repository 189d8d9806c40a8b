"""The flow's writes (SPEC R7, R9): a stage's fields, its step rows and events, and a run's
end. Each is written inside :func:`~runs.leases.fenced`, the transaction that commits only
while the worker still holds the run's lease, so a worker that lost it writes nothing.

The loop's own step is :func:`checkpoint`: what a model turn and its tool call wrote in
memory (:class:`~runs.flow.driver_state.Pending`) goes in one transaction, its run fields
in the fence's own statement, its rows and events each in one bulk insert.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from harness_console.web.live import events_publish

from ..approval_outcomes import approvals_cancel
from ..core import status as run_status
from ..events import run_event_append
from ..leases import Lease, LeaseLost, fence_write, fenced, lease_seconds
from ..lifecycle import run_transition, steps_close, transition_applied, transition_planned
from ..models import Run, RunEvent, Step, ToolCall
from ..run_hooks import session_end
from .checkpoint_statement import checkpoint_statement, statement_fits
from .config import run_config
from .driver_state import Driver, Pending
from .outcomes import Ended, Lost
from .row_inserts import Moment, rows_insert

logger = logging.getLogger(__name__)


@contextmanager
def checkpoint(driver: Driver) -> Iterator[None]:
    """A fenced transaction that writes what the driver holds pending first, then the
    caller's writes, then what the caller deferred meanwhile (the tool call's result, say).

    What is pending goes in the fence's own statement (run fields, event numbers, taken
    first, so the events keep their order with any the caller appends) and, at the end,
    one bulk insert per table for the rows and events of both. A worker that lost the run
    raises :class:`~runs.leases.LeaseLost` before writing anything, and drops what it
    held: the run goes on from its last checkpoint with its next holder. Any other failure
    gives the held writes back to the driver (the run's failure then records them: a
    model turn's usage and cost are never lost with it). Events are published on commit in
    their numbers' order.
    """
    with (
        _taken(driver) as pending,
        transaction.atomic(),
        transaction.get_connection().cursor() as cursor,  # the fence's and the inserts'
    ):
        events = _fence_and_fields(driver, pending, cursor)
        rows, after = list(pending.rows), list(pending.after)
        _publish_on_commit(events)  # before any the caller appends: lower numbers
        yield
        if driver.pending:
            later, driver.pending = driver.pending, Pending()
            more = _fence_and_fields(driver, later, cursor)
            _publish_on_commit(more)
            events, rows, after = events + more, rows + later.rows, after + later.after
        _rows_insert(rows, events, cursor)
        for then in after:  # a run that ended: its rollup reads the rows just written
            then()


@contextmanager
def _taken(driver: Driver) -> Iterator[Pending]:
    """What the driver holds, taken for a checkpoint: dropped if the lease is lost (the
    run goes on from its last checkpoint with its next holder), given back on any other
    failure (what the failed block deferred meanwhile belonged to its failed step)."""
    pending, driver.pending = driver.pending, Pending()
    try:
        yield pending
    except LeaseLost:
        raise
    except BaseException:
        driver.pending = pending
        raise


def pending_flush(driver: Driver) -> None:
    """Commit what the driver holds, if anything (a step's end, before a failure, a hook's
    event, …): on PostgreSQL in one statement when it fits in one, else in
    :func:`checkpoint`'s transaction."""
    if not driver.pending:
        return
    if statement_fits(driver.pending) and _in_one_statement(driver):
        return
    with checkpoint(driver):
        pass


def _in_one_statement(driver: Driver) -> bool:
    """What the driver holds, written and committed by ``checkpoint_statement``; False,
    the driver holding it still, when it is too big for one statement."""
    due = _renewal_due(driver)
    with _taken(driver) as pending:
        written = checkpoint_statement(driver.lease, pending, extend=due is not None)
        if written is None:
            driver.pending = pending
            return False
    events, cancelled = written
    driver.cancelled = driver.cancelled or cancelled
    _renewed(driver, due)
    _publish_on_commit(events)  # committed: published now
    return True


def defer_fields(driver: Driver, run: Run, **fields: Any) -> None:
    """Run fields for the next checkpoint, applied to ``run`` in memory now."""
    driver.pending.set.update(fields)
    for name, value in fields.items():
        setattr(run, name, value)


def defer_added(driver: Driver, run: Run, **amounts: Any) -> None:
    """Counters the next checkpoint adds to (in its statement: a concurrent writer's
    additions are kept), added to ``run`` in memory now."""
    for name, amount in amounts.items():
        driver.pending.add[name] = driver.pending.add.get(name, 0) + amount
        setattr(run, name, getattr(run, name) + amount)


def defer_row(driver: Driver, row: Any) -> None:
    """A new row for the next checkpoint: whatever the driver holds when it is handed
    over (a hook's flush in between starts a new batch)."""
    driver.pending.rows.append(row)


def defer_event(driver: Driver, type: str, payload: dict[str, Any]) -> None:
    driver.pending.events.append((type, payload))


def defer_transition(
    driver: Driver,
    run: Run,
    to: str,
    *,
    failure_reason: str = "",
    detail: dict[str, Any] | None = None,
) -> None:
    """``run_transition`` for the run this worker drives, in the next checkpoint: planned
    against the run as this claim holds it (``run_transition`` plans from the same
    function), its fields written in the fence's own statement only while the row still
    has the status it starts from, its ``status.changed`` event numbered with the
    checkpoint's, and an ended run added to its day's rollup in that transaction."""
    change = transition_planned(
        run, to, failure_reason=failure_reason, detail=detail, now=timezone.now()
    )
    if driver.pending.status_was is None:
        driver.pending.status_was = run.status
    defer_fields(driver, run, **change.fields)
    defer_event(driver, "status.changed", change.payload)
    driver.pending.after.append(partial(transition_applied, run, change))


def defer_step(
    driver: Driver,
    run: Run,
    name: str,
    data: dict[str, Any],
    *,
    first: bool = False,
    **ended: Any,
) -> Step:
    """A step begun and ended within one checkpoint (the intake's three, a verification
    with nothing to check): its row and its ``stage.finished`` event go with the rest.
    ``first``: the caller knows the run has no step yet."""
    held = [row.index for row in driver.pending.rows if isinstance(row, Step)]
    if held or first:
        last = held[-1] if held else 0
    else:
        last = run.steps.aggregate(last=Max("index"))["last"] or 0
    status = ended.pop("status", "completed")
    now = timezone.now()
    step = Step(
        run=run,
        index=last + 1,
        name=name,
        input=data,
        status=status,
        started_at=now,
        finished_at=now,
        **ended,
    )
    driver.pending.rows.append(step)
    defer_event(driver, "stage.finished", _step_event(step))
    return step


def _fence_and_fields(driver: Driver, pending: Pending, cursor: Any) -> list[RunEvent]:
    """The fence, the run's fields and the events' numbers in one statement; the events
    to insert, numbered. The lease is extended here only when the keeper is late with it
    (a third of a lease since either renewed it): at every step it rewrote the run's row
    in the sweeper's index for nothing, the keeper renewing every lease of the process
    every third of a lease anyway."""
    due = _renewal_due(driver)
    last, cancelled = fence_write(
        driver.lease,
        pending.fence_fields(),
        len(pending.events),
        status_was=pending.status_was,
        extend=due is not None,
        cursor=cursor,
    )
    if due is not None:
        transaction.on_commit(partial(_renewed, driver, due))
    driver.cancelled = driver.cancelled or cancelled
    first = last - len(pending.events) + 1
    return [
        RunEvent(run_id=driver.lease.run_id, seq=first + i, type=kind, payload=payload)
        for i, (kind, payload) in enumerate(pending.events)
    ]


def _renewal_due(driver: Driver) -> float | None:
    """When this checkpoint extends the lease, the time it counts from (before it), for
    :func:`_renewed` once it is committed; else None: the keeper renewed it lately."""
    beat, now = driver.beat, time.monotonic()
    return now if beat is None or now >= beat.renewed + lease_seconds() / 3 else None


def _renewed(driver: Driver, at: float | None) -> None:
    if at is not None and driver.beat is not None:
        driver.beat.renewed = max(driver.beat.renewed, at)


def _rows_insert(rows: list[Any], events: list[RunEvent], cursor: Any) -> None:
    """One insert per table, each table's rows in their order, all as of one moment."""
    by_model: dict[type, list[Any]] = {}
    for row in rows:
        by_model.setdefault(type(row), []).append(row)
    moment = Moment()
    for same in by_model.values():
        rows_insert(same, cursor, moment)
    rows_insert(events, cursor, moment)


def _publish_on_commit(events: list[RunEvent]) -> None:
    if events:
        transaction.on_commit(partial(events_publish, events), robust=True)


def run_fields_write(run: Run, **fields: Any) -> None:
    """Write this flow's own fields only: status changes go through run_transition."""
    Run.objects.filter(pk=run.pk).update(**fields)
    for name, value in fields.items():
        if not hasattr(value, "resolve_expression"):
            setattr(run, name, value)


def step_begin(run: Run, name: str, data: dict[str, Any] | None = None) -> Step:
    """The stage's step row; a worker resuming a stage finds the one it left running."""
    last = run.steps.order_by("-index").first()
    if last is not None and last.name == name and last.status == "running":
        return last
    return Step.objects.create(
        run=run, index=(last.index + 1) if last else 1, name=name, input=data or {}
    )


def step_end(
    step: Step, status: str = "completed", *, driver: Driver | None = None, **fields: Any
) -> None:
    """The step ends now; given the driver, its row is saved with the driver's next
    checkpoint and its event numbered with that checkpoint's."""
    step.status, step.finished_at = status, timezone.now()
    for name, value in fields.items():
        setattr(step, name, value)
    if driver is not None:
        driver.pending.after.insert(0, step.save)
        defer_event(driver, "stage.finished", _step_event(step))
        return
    step.save()
    run_event_append(run_id=step.run_id, type="stage.finished", payload=_step_event(step))


def _step_event(step: Step) -> dict[str, Any]:
    return {
        "stage": step.name,
        "status": step.status,
        "verification": step.verification,
        "error": step.error,
    }


def run_fail(holder: Driver | Lease, reason: str, *, cancelled: bool = False) -> Ended | Lost:
    """The run fails and says why; no request stays pending, no stage running. A run
    cancelled meanwhile ends as a cancellation, whatever failed: its tool was stopped by
    the cancel (``Heartbeat``), so the failure is the cancel's. Given the driver, what it
    holds is written first (a model turn's usage and cost are never lost with the run)."""
    lease = holder.lease if isinstance(holder, Driver) else holder
    try:
        if isinstance(holder, Driver):
            pending_flush(holder)
        with fenced(lease):
            run = Run.objects.get(pk=lease.run_id)
            if run.status in (run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK):
                return Ended("failed")
            if run.cancel_requested_at is not None and not cancelled:
                reason, cancelled = f"cancelled by {username(run.cancel_requested_by)}", True
            approvals_cancel(run_id=run.pk, reason=reason)
            run_transition(run_id=run.pk, to=run_status.FAILED, failure_reason=reason)
            steps_close(run_id=run.pk, status="cancelled" if cancelled else "failed")
            if cancelled:
                run_event_append(run_id=run.pk, type="run.cancelled", payload={"reason": reason})
    except LeaseLost:
        logger.warning("Could not fail run %s: its lease is gone.", lease.run_id)
        return Lost()
    if isinstance(holder, Driver) and holder.run is not None:
        holder.current = False  # failed through other paths: its row is read again
    session_ended(lease.run_id, "failed", reason)
    return Ended("failed")


def run_complete(driver: Driver, run: Run) -> Ended:
    """The run is done: its last stage, its status and its rollup in one checkpoint with
    whatever the driver holds; then the session_end hooks, outside any transaction."""
    defer_fields(driver, run, stage="done")
    defer_transition(driver, run, run_status.COMPLETED)
    with checkpoint(driver):
        pass
    if (run.loop or {}).get("state"):  # the session started
        session_end(run, outcome="completed", reason="", bound=run_config(driver, run).hooks)
    return Ended("completed")


def session_ended(run_id: Any, outcome: str, reason: str) -> None:
    """Outside any transaction: a webhook must not hold the database while it posts."""
    run = Run.objects.select_related("agent", "workspace").get(pk=run_id)
    if (run.loop or {}).get("state"):  # the session started
        session_end(run, outcome=outcome, reason=reason)


def username(user: Any) -> str:
    return user.get_username() if user is not None else "someone"


def tool_event(record: ToolCall) -> dict[str, Any]:
    """A tool call as the run's timeline shows it (``tool.call``)."""
    return {
        "tool_call": str(record.pk),
        "tool_use_id": record.tool_use_id,
        "tool": record.tool,
        "path": record.path,
        "decision": record.decision,
        "rule": record.rule,
        "reason": record.reason[:1000],
        "status": record.status,
        "summary": str((record.output or {}).get("summary", ""))[:1000],
        "error": record.error[:1000],
        "approved_by": username(record.approved_by) if record.approved_by_id else "",
        "writes": len(written)
        if (written := getattr(record, "written_paths", None)) is not None
        else record.writes.count(),
    }


def drafts_of(run: Run) -> list[str]:
    """The run's drafts, relative paths, sorted; links are never drafts."""
    folder = run.workspace.drafts_path / str(run.pk)
    if not folder.is_dir():
        return []
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
    )
