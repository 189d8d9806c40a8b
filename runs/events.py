"""A run's events (SPEC R7, L1): appended once, numbered per run from 1 in commit order, and
published to the live pages only once committed, so no page ever shows an event that
rolled back."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction

from harness_console.web.live import event_publish

from .models import Run, RunEvent

MAX_EVENT_TYPE_CHARS = 64


def run_event_append(*, run_id: Any, type: str, payload: dict[str, Any] | None = None) -> RunEvent:
    """Append one event to a run, numbered after the last, and publish it once committed.

    1. Take the run's row lock by incrementing its counter (SQLite's IMMEDIATE transactions
       and PostgreSQL's row lock both serialise concurrent appenders here).
    2. Insert the event with that number; (run, seq) is unique, so a bug cannot duplicate one.
    3. On commit, send it to the run's group and to the ops group.
    """
    if not type or len(type) > MAX_EVENT_TYPE_CHARS:
        raise ValueError(f"An event type needs 1 to {MAX_EVENT_TYPE_CHARS} characters.")
    if payload is not None and not isinstance(payload, dict):
        raise ValueError("An event payload is a JSON object.")
    # Inside a caller's transaction no savepoint is needed: a failure rolls it all back.
    run_id = Run._meta.pk.to_python(run_id)  # a malformed id fails here, before any write
    with transaction.atomic(savepoint=False):
        seq = _next_seq(run_id)
        if seq is not None:
            event = RunEvent.objects.create(
                run_id=run_id, seq=seq, type=type, payload=payload or {}
            )
            transaction.on_commit(partial(event_publish, event), robust=True)
    if seq is None:  # raised outside the block, so a caller's transaction stays usable
        raise Run.DoesNotExist(f"No run {run_id}.")
    return event


def run_first_event(*, run: Run, type: str, payload: dict[str, Any]) -> RunEvent:
    """The first event of a run inserted in the caller's transaction with its counter at 1
    (``Run.event_seq``): number 1, without taking the counter again."""
    assert run.event_seq == 1, "a run's first event is numbered with the run's own insert"
    event = RunEvent.objects.create(run=run, seq=1, type=type, payload=payload)
    transaction.on_commit(partial(event_publish, event), robust=True)
    return event


def _next_seq(run_id: Any) -> int | None:
    """Increment the run's counter and read it back in one statement (RETURNING: SQLite
    3.35+ and PostgreSQL), taking the row lock that orders the run's appenders."""
    connection = transaction.get_connection()
    table, pk = Run._meta.db_table, Run._meta.pk
    key = pk.get_db_prep_value(run_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(table)} SET event_seq = event_seq + 1 "  # noqa: S608 - names from the model
            f"WHERE {connection.ops.quote_name(pk.column)} = %s RETURNING event_seq",
            [key],
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])
