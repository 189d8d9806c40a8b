"""A checkpoint's new rows, one INSERT per table (SPEC R9), as SQL made from the model.

A loop step inserts its model call, its two messages, its tool call and its events in the
transaction of its checkpoint. ``bulk_create`` compiled a query for each of them, every
step of every run: in a worker driving hundreds of runs that cost more than the
statements themselves. Here the statement for a table and a number of rows is made once
per process from the model's own columns, and each value goes through its field's own
``pre_save`` and ``get_db_prep_save``, as ``bulk_create`` does: defaults, ``auto_now_add``,
JSON and UUID conversion included; only the commonest values skip the layers of those
methods that make nothing of them: a ``str`` of a text field, an ``int`` of a number field
and a ``bool`` go in as they are; a key's ``UUID`` or ``int``, and an aware ``datetime``, go
straight to the backend's own adaptation of them (each what those methods end in). That
was most of the preparing. An auto-incremented key comes back by ``RETURNING`` (SQLite
3.35+ and PostgreSQL, in the order of the rows, which ``bulk_create`` relies on too).

On PostgreSQL a checkpoint is one statement (``checkpoint_statement``): there the rows of a
table are inserted by :func:`insert_joined`, a part of that statement.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import models, transaction

# SQLite's default limit on a statement's parameters (PostgreSQL's is far higher).
MAX_PARAMETERS = 999
_AUTO_KEYS = ("AutoField", "BigAutoField", "SmallAutoField")
_statements: dict[tuple[type[models.Model], int, str], str] = {}
_joined: dict[tuple[Any, ...], str] = {}
# A field's value as the statement takes it, from the row and the connection.
Prepare = Callable[[models.Model, Any], Any]
_preparers: dict[type[models.Model], list[Prepare]] = {}
# Fields whose own methods make nothing else of a value of the type beside them than the
# value itself (numbers: then the backend's adapt_integerfield_value). Exact classes only:
# a subclass may prepare differently.
_TEXT = (models.CharField, models.TextField)
_NUMBERS = (
    models.IntegerField,
    models.BigIntegerField,
    models.SmallIntegerField,
    models.PositiveIntegerField,
    models.PositiveBigIntegerField,
    models.PositiveSmallIntegerField,
)
_INT_KEYS = (models.AutoField, models.BigAutoField, models.SmallAutoField)


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
    params = _values(model, fields, rows, db)
    with db.cursor() as cursor:
        cursor.execute(_statement(model, fields, auto, len(rows), db), params)
        keys = [key for (key,) in cursor.fetchall()] if auto is not None else []
    rows_inserted(rows, keys, db)


def rows_inserted(rows: Sequence[models.Model], keys: Sequence[Any], db: Any) -> None:
    """``rows`` are in the database now, with these auto-incremented ``keys`` (if any)."""
    auto = type(rows[0])._meta.pk if keys else None
    for index, row in enumerate(rows):
        if auto is not None:
            setattr(row, auto.attname, keys[index])
        row._state.adding, row._state.db = False, db.alias


def insert_joined(
    rows: Sequence[models.Model], source: str, db: Any, computed: dict[str, str] | None = None
) -> tuple[str, list[Any], str | None]:
    """PostgreSQL: an INSERT of ``rows`` (new rows of one model), for a WITH clause, that
    inserts them only if ``source`` (a CTE before it) has a row: (the statement, its
    parameters, the auto-incremented column it returns, if any). ``computed``: a column's
    value as an SQL expression of ``v`` (the row's own values) and ``source``'s columns.

    The values come in a VALUES list joined with ``source``, each cast to its column's
    type without a length (a cast to varchar(n) would cut a value the column refuses)."""
    model = type(rows[0])
    meta = model._meta
    auto = meta.pk if meta.pk is not None and meta.pk.get_internal_type() in _AUTO_KEYS else None
    fields = [f for f in meta.concrete_fields if f is not auto]
    quote = db.ops.quote_name
    key = (model, len(rows), source, tuple(sorted((computed or {}).items())))
    statement = _joined.get(key)
    if statement is None:
        columns = [quote(f.column) for f in fields]
        one = "(" + ", ".join(f"%s::{_cast(f, db)}" for f in fields) + ")"
        given = computed or {}
        chosen = [given.get(str(f.column), f"v.{c}") for f, c in zip(fields, columns, strict=True)]
        returning = f" RETURNING {quote(auto.column)}" if auto is not None else ""
        statement = _joined[key] = (
            f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) "  # noqa: S608 - names from the model
            f"SELECT {', '.join(chosen)} FROM (VALUES {', '.join([one] * len(rows))}) "
            f"AS v ({', '.join(columns)}) CROSS JOIN {source}{returning}"
        )
    return statement, _values(model, fields, rows, db), auto.column if auto else None


def _cast(field: Any, db: Any) -> str:
    return re.sub(r"\(.*\)", "", field.db_type(db)).strip()


def _values(
    model: type[models.Model], fields: list[Any], rows: Sequence[models.Model], db: Any
) -> list[Any]:
    preparers = _preparers.get(model)
    if preparers is None:
        preparers = _preparers[model] = [_preparer(field) for field in fields]
    return [prepare(row, db) for row in rows for prepare in preparers]


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


def _preparer(field: Any) -> Prepare:
    """How ``field``'s value of a row goes into the statement: as ``bulk_create`` prepares
    it, with a value of the type a plain text, number or boolean field holds passed on."""
    attname, kind = field.attname, type(field)

    def prepared(row: models.Model, db: Any) -> Any:
        return field.get_db_prep_save(field.pre_save(row, True), db)

    if kind in _TEXT:

        def text(row: models.Model, db: Any) -> Any:
            value = getattr(row, attname)
            return value if value is None or type(value) is str else prepared(row, db)

        return text
    if kind in _NUMBERS:
        internal = field.get_internal_type()

        def number(row: models.Model, db: Any) -> Any:
            value = getattr(row, attname)
            if type(value) is int:
                return db.ops.adapt_integerfield_value(value, internal)
            return None if value is None else prepared(row, db)

        return number
    key = field.target_field if kind is models.ForeignKey else field
    if type(key) is models.UUIDField:  # a UUID key, or a foreign key to one

        def identifier(row: models.Model, db: Any) -> Any:
            value = getattr(row, attname)
            if type(value) is uuid.UUID:  # UUIDField.get_db_prep_value's end
                return value if db.features.has_native_uuid_field else value.hex
            return prepared(row, db)

        return identifier
    if kind is models.ForeignKey and type(key) in _INT_KEYS:

        def reference(row: models.Model, db: Any) -> Any:
            value = getattr(row, attname)
            if type(value) is int:  # AutoField.get_db_prep_value's end
                return db.ops.validate_autopk_value(value)
            return prepared(row, db)

        return reference
    if kind is models.DateTimeField:

        def moment(row: models.Model, db: Any) -> Any:
            value = field.pre_save(row, True)  # auto_now_add: now, set on the row too
            if type(value) is datetime and value.utcoffset() is not None:  # aware
                return db.ops.adapt_datetimefield_value(value)  # get_prep_value keeps it
            return field.get_db_prep_save(value, db)

        return moment
    if kind is models.BooleanField:

        def boolean(row: models.Model, db: Any) -> Any:
            value = getattr(row, attname)
            return value if value is None or type(value) is bool else prepared(row, db)

        return boolean
    return prepared
