"""A transactional test's teardown puts back the rows ``post_migrate`` made, rather than
sending the signal again.

Django's flush empties every table and then sends ``post_migrate``, whose receivers
(content types, permissions, the console's roles) rebuild the same rows app by app: about
40 ms a test on SQLite and 130 ms on PostgreSQL here, for some 500 transactional tests
per configuration. The first flush of each database in a test process sends the signal
as Django does and keeps the rows of the receivers' tables; each later flush inserts
those rows again (their keys included, so a cached content type still names the same
row) in one transaction. On PostgreSQL each restored table's sequence is then set to its
rows' highest key, so that a key made later is never one of theirs (a flush that reset
the sequences would otherwise hand them out again). The tables end up as the signal
leaves them, as the first flush saw them. The receivers still run for real whenever a
test database is migrated, and at each test process's first flush.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management.color import no_style
from django.core.management.commands import flush
from django.db import connections, transaction
from django.db.models import Model


@dataclass(frozen=True)
class _Table:
    name: str
    columns: list[str]
    rows: list[tuple[Any, ...]]


_made: dict[str, list[_Table]] = {}  # database alias -> the rows post_migrate made there


def _made_by_receivers() -> list[type[Model]]:
    """The models whose tables the receivers write: content types, permissions and the
    roles. Only these are kept: a live stack's process may commit rows elsewhere meanwhile
    (a channel layer's group, a run), which no later test must find put back."""
    return [ContentType, Permission, Group, Group.permissions.through]


def _rows_read(alias: str) -> list[_Table]:
    connection = connections[alias]
    tables = []
    existing = set(connection.introspection.table_names())
    with connection.cursor() as cursor:
        for name in [m._meta.db_table for m in _made_by_receivers()]:
            if name not in existing:
                continue
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(name)}")  # noqa: S608
            rows = cursor.fetchall()
            if rows:
                columns = [column[0] for column in cursor.description]
                tables.append(_Table(name, columns, [tuple(row) for row in rows]))
    return tables


def _rows_restore(alias: str, tables: list[_Table]) -> None:
    """Foreign keys are checked at the commit (Django makes them deferrable), so the
    tables may go in any order."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    restored = {table.name for table in tables}
    models = [m for m in _made_by_receivers() if m._meta.db_table in restored]
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        for table in tables:
            columns = ", ".join(quote(column) for column in table.columns)
            marks = ", ".join(["%s"] * len(table.columns))
            cursor.executemany(
                f"INSERT INTO {quote(table.name)} ({columns}) VALUES ({marks})",  # noqa: S608
                table.rows,
            )
        for statement in connection.ops.sequence_reset_sql(no_style(), models):
            cursor.execute(statement)
    ContentType.objects.clear_cache()


def _restoring(emit: Any) -> Any:
    def emit_or_restore(verbosity: int, interactive: bool, db: str, **kwargs: Any) -> None:
        made = _made.get(db)
        if made is not None:
            _rows_restore(db, made)
            return
        emit(verbosity, interactive, db, **kwargs)
        _made[db] = _rows_read(db)

    return emit_or_restore


def install() -> None:
    """Called once, as the tests' conftest is imported."""
    flush.emit_post_migrate_signal = _restoring(flush.emit_post_migrate_signal)
