"""A checkpoint as one statement on PostgreSQL (SPEC R9): the fence, the run's fields and
every new row and event of a step, sent, checked and committed in one round trip.

As a transaction, a loop step's checkpoint cost PostgreSQL seven round trips: BEGIN, the
fence, an INSERT for each of the model call, the messages, the tool call and the events,
and COMMIT; waiting on them was most of a step's overhead. One statement is atomic by
itself: here the fence's UPDATE is its first part (``f``), and each table's rows are
inserted by a part that takes them from a VALUES list joined with ``f``'s row, so that a
fence that refuses (no row) inserts nothing, and the events are numbered from the
sequence ``f`` reserved. Data-modifying parts of a WITH run exactly once, to completion,
on one snapshot; the foreign keys are checked at the commit (Django's are deferred), when
every part's rows are in. Sent in autocommit, the statement is the commit.

The statement goes as PostgreSQL writes it, with ``$1``, ``$2``, … for its values
(:func:`_numbered`, once per shape of statement), through psycopg's raw cursor: psycopg
parses a statement for its ``%s`` only up to 4096 characters and 50 values, and a step's
checkpoint is longer, so it was parsed again at every step, a fifth of the statement's
time in the worker.

Only for what such a statement can hold: a checkpoint with nothing to do after its rows
are in (``Pending.after``), outside any transaction, in autocommit, on PostgreSQL;
everything else goes through :func:`~runs.flow.checkpoints.checkpoint`'s transaction, as
on SQLite, where the statements cost no round trip.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any

from django.db import connection, transaction

from ..leases import Lease, fence_refused, fence_statement
from ..models import RunEvent
from .driver_state import Pending
from .row_inserts import Moment, insert_joined, rows_inserted

# A bound on the statement's size: Django's cursor binds the values client-side (in the
# text), and with server-side binding PostgreSQL takes at most 65535 parameters. A larger
# checkpoint (a compaction's rows, say) goes as a transaction of several statements.
MAX_PARAMETERS = 65535

# Where a psycopg connection keeps its checkpoint cursor (_kept_cursor).
_KEPT = "_harness_checkpoint_cursor"


def _prepared_cursor(db: Any) -> Any:
    """A Django cursor (its errors, logging and ``execute_wrapper`` as any other's) whose
    statements psycopg prepares, once per connection: a step's checkpoint is the same
    statement every step, its values aside, and PostgreSQL took as long to plan it as to
    run it. Its values are bound server-side, as a prepared statement takes them. Where
    the settings leave preparing off (``prepare_threshold`` None: no pool of this process's
    own, an external pooler), psycopg sends it unprepared."""
    db.close_if_health_check_failed()  # as db.cursor() does, step by step
    db.ensure_connection()
    db.validate_thread_sharing()
    with db.wrap_database_errors:
        raw = _kept_cursor(db.connection)
        cursor = db.make_debug_cursor(raw) if db.queries_logged else db.make_cursor(raw)
    return cursor  # not closed: the connection's next checkpoint takes it again


def _kept_cursor(connection: Any) -> Any:
    """The connection's own raw cursor for its checkpoints, made on its first: a new one
    each step made psycopg look up again how to send each of the statement's values and
    read each of its columns (its caches are the cursor's). A connection serves one
    thread at a time, and the cursor dies with it. Until its next checkpoint it holds
    the last one's values and result (bounded by ``MAX_PARAMETERS``); the two refer to
    each other, so a connection the pool drops unclosed is freed by the cycle collector."""
    cursor = getattr(connection, _KEPT, None)
    if cursor is None or cursor.closed:
        cursor = _prepared_class()(connection)
        setattr(connection, _KEPT, cursor)
    return cursor


@cache
def _prepared_class() -> type:
    """psycopg's raw cursor (server-side binding, ``$n`` placeholders, with Django's
    backend's mixin) that asks for each statement to be prepared; made on first use: only
    PostgreSQL's workers import it."""
    from django.db.backends.postgresql.base import CursorMixin
    from psycopg import RawCursor

    class Prepared(CursorMixin, RawCursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs.setdefault("prepare", True)
            return super().execute(query, params, **kwargs)

    return Prepared


@lru_cache(maxsize=256)
def _numbered(statement: str) -> str:
    """``statement`` (built here, its every value a ``%s``) with PostgreSQL's own
    placeholders, numbered in order."""
    parts = statement.split("%s")
    if any("%" in part for part in parts):  # a literal %: not a statement built here
        raise ValueError(f"a checkpoint statement holds a literal %: {statement[:200]}")
    numbered = [f"{part}${i}" for i, part in enumerate(parts[:-1], 1)]
    return "".join([*numbered, parts[-1]])


def statement_fits(pending: Pending) -> bool:
    """Whether :func:`checkpoint_statement` can write ``pending`` now."""
    return (
        connection.vendor == "postgresql"
        and not pending.after
        and not connection.in_atomic_block
        and connection.get_autocommit()  # else the statement would not commit by itself
    )


def checkpoint_statement(
    lease: Lease, pending: Pending, *, extend: bool
) -> tuple[list[RunEvent], bool] | None:
    """Write ``pending`` in one statement, committed when it returns: (its events,
    numbered; whether a cancel was asked); None, having sent nothing, when it is too big
    for one. Raises :class:`~runs.leases.LeaseLost`, having written nothing, when the
    fence refuses; the rows get their keys."""
    db = transaction.get_connection()
    fence, params = fence_statement(
        lease,
        pending.fence_fields(),
        len(pending.events),
        status_was=pending.status_was,
        extend=extend,
        db=db,
    )
    parts, keyed = [f"f AS ({fence})"], []
    tables: dict[type, list[Any]] = {}
    for row in pending.rows:
        tables.setdefault(type(row), []).append(row)
    events = [
        RunEvent(run_id=lease.run_id, seq=i + 1, type=kind, payload=payload)
        for i, (kind, payload) in enumerate(pending.events)
    ]
    numbered = {"seq": f"f.event_seq - {len(events)} + v.seq"}
    written = [same for same in [*tables.values(), events] if same]
    moment = Moment()
    for same in written:
        computed = numbered if same is events else None
        insert, values, auto = insert_joined(same, "f", db, computed, moment)
        name = f"i{len(parts)}"
        parts.append(f"{name} AS ({insert})")
        params += values
        if auto is not None:
            keys = f"ARRAY(SELECT {db.ops.quote_name(auto)} FROM {name} ORDER BY 1)"  # noqa: S608
            keyed.append((same, keys))
    if len(params) > MAX_PARAMETERS:
        return None
    columns = ", ".join(["f.event_seq", "f.cancel_requested_at", *(a for _, a in keyed)])
    statement = f"WITH {', '.join(parts)} SELECT {columns} FROM f"  # noqa: S608 - built above
    cursor = _prepared_cursor(db)
    cursor.execute(_numbered(statement), params)
    row = cursor.fetchone()
    if row is None:
        raise fence_refused(lease, pending.status_was)
    last, cancelled, keys = int(row[0]), row[1] is not None, row[2:]
    ids = {id(same): got for (same, _), got in zip(keyed, keys, strict=True)}
    for same in written:
        rows_inserted(same, ids.get(id(same), []), db)
    for event in events:
        event.seq = last - len(events) + event.seq
    return events, cancelled
