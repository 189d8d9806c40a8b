"""SQLite: a document's full-text row goes with its index entry, however the entry goes.

``runs_doc_fts`` is no model: the code deleted a row beside each entry it removed, but
an entry removed otherwise (its workspace deleted, whose cascade removes it; a flush)
left its row behind, counted in every search's ranking, and in the way of the next entry
given its key. A trigger now deletes the row with the entry, whoever deletes it; the rows
left behind until now are deleted once here. PostgreSQL's index is a column of the
entry's own row: nothing to do there.
"""

from django.db import migrations

SQLITE_UP = [
    "CREATE TRIGGER runs_doc_fts_delete AFTER DELETE ON runs_docindexentry BEGIN "
    "DELETE FROM runs_doc_fts WHERE rowid = old.id; END",
    "DELETE FROM runs_doc_fts WHERE rowid NOT IN (SELECT id FROM runs_docindexentry)",
]
SQLITE_DOWN = ["DROP TRIGGER IF EXISTS runs_doc_fts_delete"]


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_UP:
            schema_editor.execute(sql)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_DOWN:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("runs", "0030_rollup_deltas")]
    operations = [migrations.RunPython(create, drop)]
