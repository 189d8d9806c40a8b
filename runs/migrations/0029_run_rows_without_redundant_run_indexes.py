"""The run's own index on its events, messages, model calls and tool calls goes: each table
has a unique index (or the runs list's index) that starts with the run, which answers
every lookup by run as well. One index less to write on each row of every loop step.

Dropped by name (the names Django gave them, the same on SQLite and PostgreSQL): altering
the fields would rebuild the four tables on SQLite, copying every row of a long history.
"""

import django.db.models.deletion
from django.db import migrations, models

INDEXES = {
    "runs_runevent_run_id_8bd13aa7": "runs_runevent",
    "runs_message_run_id_23cc6942": "runs_message",
    "runs_modelcall_run_id_0bb33ec9": "runs_modelcall",
    "runs_toolcall_run_id_d2fbb3a3": "runs_toolcall",
}


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0028_runs_list_paging_and_search"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{name}"',
                    reverse_sql=f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("run_id")',
                )
                for name, table in INDEXES.items()
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="modelcall",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="model_calls",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="runevent",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="events",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="toolcall",
                    name="run",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="tool_calls",
                        to="runs.run",
                    ),
                ),
            ],
        )
    ]
