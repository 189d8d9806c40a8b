"""The runs list at any size (issue 19): its keyset order, and full-text search of requests.

- ``run_list_idx`` on (created_at, id): the list's order, newest first with the id breaking
  ties, so a page is an index range whatever the table's size.
- ``tool_call_status_idx`` on (status, started_at): the operations dashboard's recent
  refusals, read newest first without sorting every call.
- The search index: on SQLite an external-content FTS5 table over ``runs_run.request``
  (keyed by the table's rowid), kept in sync by triggers; on PostgreSQL a GIN index over
  ``to_tsvector('english', request)``, the expression ``runs.run_search`` queries.

A later migration that makes SQLite rebuild ``runs_run`` drops its triggers with the old
table; ``tests/test_run_search.py`` fails then. A VACUUM may renumber the rowids; rebuild
the index after one with ``INSERT INTO runs_run_fts(runs_run_fts) VALUES ('rebuild')``.
"""

from django.db import migrations, models

SQLITE_UP = [
    "CREATE VIRTUAL TABLE runs_run_fts USING fts5("
    "request, content='runs_run', content_rowid='rowid', tokenize='porter unicode61')",
    "CREATE TRIGGER runs_run_fts_insert AFTER INSERT ON runs_run BEGIN "
    "INSERT INTO runs_run_fts(rowid, request) VALUES (new.rowid, new.request); END",
    "CREATE TRIGGER runs_run_fts_delete AFTER DELETE ON runs_run BEGIN "
    "INSERT INTO runs_run_fts(runs_run_fts, rowid, request) "
    "VALUES ('delete', old.rowid, old.request); END",
    # Only a change of the request touches the index: a run's status updates do not.
    "CREATE TRIGGER runs_run_fts_update AFTER UPDATE OF request ON runs_run BEGIN "
    "INSERT INTO runs_run_fts(runs_run_fts, rowid, request) "
    "VALUES ('delete', old.rowid, old.request); "
    "INSERT INTO runs_run_fts(rowid, request) VALUES (new.rowid, new.request); END",
    "INSERT INTO runs_run_fts(runs_run_fts) VALUES ('rebuild')",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS runs_run_fts_insert",
    "DROP TRIGGER IF EXISTS runs_run_fts_delete",
    "DROP TRIGGER IF EXISTS runs_run_fts_update",
    "DROP TABLE IF EXISTS runs_run_fts",
]
PG_UP = ["CREATE INDEX run_request_search ON runs_run USING GIN (to_tsvector('english', request))"]
PG_DOWN = ["DROP INDEX IF EXISTS run_request_search"]


def _execute(schema_editor, by_vendor):
    for sql in by_vendor.get(schema_editor.connection.vendor, []):
        schema_editor.execute(sql)


def create(apps, schema_editor):
    _execute(schema_editor, {"sqlite": SQLITE_UP, "postgresql": PG_UP})


def drop(apps, schema_editor):
    _execute(schema_editor, {"sqlite": SQLITE_DOWN, "postgresql": PG_DOWN})


class Migration(migrations.Migration):
    dependencies = [("runs", "0027_model_call_context")]
    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["-created_at", "-id"], name="run_list_idx"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["status", "-started_at"], name="tool_call_status_idx"),
        ),
        migrations.RunPython(create, drop),
    ]
