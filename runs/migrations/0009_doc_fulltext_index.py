"""The full-text index behind searchDocs: SQLite FTS5, or a PostgreSQL GIN index."""

from django.db import migrations

SQLITE_UP = (
    "CREATE VIRTUAL TABLE runs_doc_fts USING fts5("
    "title, content, tokenize='porter unicode61')"
)
PG_UP = (
    "CREATE INDEX runs_doc_search ON runs_docindexentry USING GIN (("
    "setweight(to_tsvector('english', coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('english', content), 'B')))"
)


def create(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute(SQLITE_UP)
    elif vendor == "postgresql":
        schema_editor.execute(PG_UP)


def drop(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute("DROP TABLE IF EXISTS runs_doc_fts")
    elif vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS runs_doc_search")


class Migration(migrations.Migration):
    dependencies = [("runs", "0008_docindexentry")]
    operations = [migrations.RunPython(create, drop)]
