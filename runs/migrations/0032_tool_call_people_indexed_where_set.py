"""A tool call's ``requested_by`` and ``approved_by`` are indexed only where they are set.

``requested_by`` is set only when a caller of the tool door names the person asking (no
run does, nor ``manage.py call_tool``), ``approved_by`` only on a call a person approved. A
run's own calls (nearly all of them) have neither, yet each wrote an entry, and a page,
into both indexes at every loop step. The indexes serve one lookup: the SET NULL when a
user is deleted (``WHERE requested_by_id IN (...)``), which a partial index on
``IS NOT NULL`` answers as well, on SQLite and PostgreSQL alike.

The full indexes are dropped by name (the names Django gave them, the same on both
databases): altering the fields would rebuild the table on SQLite, copying every row.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

INDEXES = {
    "runs_toolcall_requested_by_id_d62ff435": "requested_by_id",
    "runs_toolcall_approved_by_id_4c23c4fd": "approved_by_id",
}


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0031_doc_index_rows_follow_their_entries"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{name}"',
                    reverse_sql=f'CREATE INDEX IF NOT EXISTS "{name}" ON "runs_toolcall" ("{column}")',
                )
                for name, column in INDEXES.items()
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="toolcall",
                    name="approved_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AlterField(
                    model_name="toolcall",
                    name="requested_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(
                condition=models.Q(("requested_by__isnull", False)),
                fields=["requested_by"],
                name="tool_call_requested_by_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(
                condition=models.Q(("approved_by__isnull", False)),
                fields=["approved_by"],
                name="tool_call_approved_by_idx",
            ),
        ),
    ]
