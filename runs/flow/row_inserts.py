"""A checkpoint's new rows, one INSERT per table (SPEC R9), as SQL made from the model.

A loop step inserts its model call, its two messages, its tool call and its events in the
transaction of its checkpoint. ``bulk_create`` compiled a query for each of them, every
step of every run: in a worker driving hundreds of runs that cost more than the
statements themselves. Here the statement for a table and a number of rows is made once
per process from the model's own columns, and each value goes through its field's own
``pre_save`` and ``get_db_prep_save``, as ``bulk_create`` does: defaults, ``auto_now_add``,
JSON and UUID conversion included. An auto-incremented key comes back by ``RETURNING``
(SQLite 3.35+ and PostgreSQL, in the order of the rows, which ``bulk_create`` relies on
too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models, transaction

# SQLite's default limit on a statement's parameters (PostgreSQL's is far higher).
MAX_PARAMETERS = 999
_AUTO_KEYS = ("AutoField", "BigAutoField", "SmallAutoField")
_statements: dict[tuple[type[models.Model], int, str], str] = {}


def rows_insert(rows: Sequence[models.Model]) -> None:
    """Insert ``rows`` (new rows of one model) in as few statements as the parameter limit
    allows; their auto-incremented keys are set from what the database returns."""
    if not rows:
        return
    model = type(rows[0])
    meta = model._meta
    auto = meta.pk if meta.pk is not None and meta.pk.get_internal_type() in _AUTO_KEYS else None
    fields = [f for f in meta.concrete_fields if f is not auto]
    per_statement = max(1, MAX_PARAMETERS // max(1, len(fields)))
    for start in range(0, len(rows), per_statement):
        _insert(model, fields, auto, rows[start : start + per_statement])


def _insert(
    model: type[models.Model],
    fields: list[Any],
    auto: Any,
    rows: Sequence[models.Model],
) -> None:
    db = transaction.get_connection()
    params: list[Any] = []
    for row in rows:
        for field in fields:
            params.append(field.get_db_prep_save(field.pre_save(row, True), db))
    with db.cursor() as cursor:
        cursor.execute(_statement(model, fields, auto, len(rows), db), params)
        keys = cursor.fetchall() if auto is not None else []
    for index, row in enumerate(rows):
        if auto is not None:
            setattr(row, auto.attname, keys[index][0])
        row._state.adding, row._state.db = False, db.alias


def _statement(model: type[models.Model], fields: list[Any], auto: Any, count: int, db: Any) -> str:
    key = (model, count, db.vendor)
    statement = _statements.get(key)
    if statement is None:
        quote = db.ops.quote_name
        columns = ", ".join(quote(f.column) for f in fields)
        one = "(" + ", ".join(["%s"] * len(fields)) + ")"
        returning = f" RETURNING {quote(auto.column)}" if auto is not None else ""
        statement = (
            f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "  # noqa: S608 - names from the model
            f"VALUES {', '.join([one] * count)}{returning}"
        )
        _statements[key] = statement
    return statement
