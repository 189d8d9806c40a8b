"""A checkpoint's new rows, one INSERT per table (SPEC R9), as SQL made from the model.

A loop step inserts its model call, its two messages, its tool call and its events in the
transaction of its checkpoint. ``bulk_create`` compiled a query for each of them, every
step of every run: in a worker driving hundreds of runs that cost more than the
statements themselves. Here the statement for a table and a number of rows is made once
per process from the model's own columns, and each value goes through its field's own
``pre_save`` and ``get_db_prep_save``, as ``bulk_create`` does: defaults, ``auto_now_add``,
JSON and UUID conversion included; only the commonest values skip the layers of those
methods that make nothing of them: a ``str`` of a text field, an ``int`` of a number field
and a ``bool`` go in as they are; a key's ``UUID`` or ``int``, an aware ``datetime`` and a
JSON field's ``dict`` or ``list`` go straight to the backend's own adaptation of them (each
what those methods end in). That was most of the preparing. The rows of one checkpoint
share one time for their ``auto_now``/``auto_now_add`` fields (:class:`Moment`: they go in
one transaction; Django's ``pre_save`` took the time again for each row, and adapted it
again), and one cursor. An auto-incremented key comes back by ``RETURNING`` (SQLite
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

from django.db import models
from django.utils import timezone

# SQLite's default limit on a statement's parameters (PostgreSQL's is far higher).
MAX_PARAMETERS = 999
_AUTO_KEYS = ("AutoField", "BigAutoField", "SmallAutoField")
_statements: dict[tuple[type[models.Model], int, str], str] = {}
_joined: dict[tuple[Any, ...], str] = {}


class Moment:
    """The time of one checkpoint's inserts, for every ``auto_now``/``auto_now_add`` field
    of its rows, as Django's ``pre_save`` takes it (``timezone.now()``) and as the
    database takes it (the field's ``get_db_prep_save``): taken once, at the first row
    that needs it."""

    __slots__ = ("adapted", "value")

    def __init__(self) -> None:
        self.value: datetime | None = None
        self.adapted: Any = None

    def of(self, field: Any, db: Any) -> tuple[datetime, Any]:
        if self.value is None:
            self.value = timezone.now()
            self.adapted = field.get_db_prep_save(self.value, db)
        return self.value, self.adapted


# A field's value as the statement takes it, from the row, the connection and the time.
Prepare = Callable[[models.Model, Any, Moment], Any]
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


def rows_insert(rows: Sequence[models.Model], cursor: Any, moment: Moment | None = None) -> None:
    """Insert ``rows`` (new rows of one model) in as few statements as the parameter limit
    allows, through ``cursor`` (a checkpoint's, for all of its tables, as its ``moment``);
    their auto-incremented keys are set from what the database returns."""
    if not rows:
        return
    moment = moment if moment is not None else Moment()
    model = type(rows[0])
    meta = model._meta
    auto = meta.pk if meta.pk is not None and meta.pk.get_internal_type() in _AUTO_KEYS else None
    fields = [f for f in meta.concrete_fields if f is not auto]
    per_statement = max(1, MAX_PARAMETERS // max(1, len(fields)))
    for start in range(0, len(rows), per_statement):
        _insert(model, fields, auto, rows[start : start + per_statement], cursor, moment)


def _insert(
    model: type[models.Model],
    fields: list[Any],
    auto: Any,
    rows: Sequence[models.Model],
    cursor: Any,
    moment: Moment,
) -> None:
    db = cursor.db
    params = _values(model, fields, rows, db, moment)
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
    rows: Sequence[models.Model],
    source: str,
    db: Any,
    computed: dict[str, str] | None,
    moment: Moment,
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
    return statement, _values(model, fields, rows, db, moment), auto.column if auto else None


def _cast(field: Any, db: Any) -> str:
    return re.sub(r"\(.*\)", "", field.db_type(db)).strip()


def _values(
    model: type[models.Model],
    fields: list[Any],
    rows: Sequence[models.Model],
    db: Any,
    moment: Moment,
) -> list[Any]:
    preparers = _preparers.get(model)
    if preparers is None:
        preparers = _preparers[model] = [_preparer(field) for field in fields]
    return [prepare(row, db, moment) for row in rows for prepare in preparers]


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

    def prepared(row: models.Model, db: Any, moment: Moment) -> Any:
        return field.get_db_prep_save(field.pre_save(row, True), db)

    if kind in _TEXT:

        def text(row: models.Model, db: Any, moment: Moment) -> Any:
            value = getattr(row, attname)
            return value if value is None or type(value) is str else prepared(row, db, moment)

        return text
    if kind in _NUMBERS:
        internal = field.get_internal_type()

        def number(row: models.Model, db: Any, moment: Moment) -> Any:
            value = getattr(row, attname)
            if type(value) is int:
                return db.ops.adapt_integerfield_value(value, internal)
            return None if value is None else prepared(row, db, moment)

        return number
    key = field.target_field if kind is models.ForeignKey else field
    if type(key) is models.UUIDField:  # a UUID key, or a foreign key to one

        def identifier(row: models.Model, db: Any, moment: Moment) -> Any:
            value = getattr(row, attname)
            if type(value) is uuid.UUID:  # UUIDField.get_db_prep_value's end
                return value if db.features.has_native_uuid_field else value.hex
            return prepared(row, db, moment)

        return identifier
    if kind is models.ForeignKey and type(key) in _INT_KEYS:

        def reference(row: models.Model, db: Any, moment: Moment) -> Any:
            value = getattr(row, attname)
            if type(value) is int:  # AutoField.get_db_prep_value's end
                return db.ops.validate_autopk_value(value)
            return prepared(row, db, moment)

        return reference
    if kind is models.DateTimeField:

        def instant(row: models.Model, db: Any, moment: Moment) -> Any:
            if field.auto_now or field.auto_now_add:  # read at each insert, as pre_save does
                value, adapted = moment.of(field, db)  # pre_save's now, set on the row too
                setattr(row, attname, value)
                return adapted
            value = getattr(row, attname)
            if type(value) is datetime and value.utcoffset() is not None:  # aware
                return db.ops.adapt_datetimefield_value(value)  # get_prep_value keeps it
            return prepared(row, db, moment)

        return instant
    if kind is models.JSONField:
        encoder = field.encoder

        def document(row: models.Model, db: Any, moment: Moment) -> Any:
            value = getattr(row, attname)
            if type(value) is dict or type(value) is list:  # get_db_prep_value's end
                return db.ops.adapt_json_value(value, encoder)
            return prepared(row, db, moment)

        return document
    if kind is models.BooleanField:

        def boolean(row: models.Model, db: Any, moment: Moment) -> Any:
            value = getattr(row, attname)
            return value if value is None or type(value) is bool else prepared(row, db, moment)

        return boolean
    return prepared
