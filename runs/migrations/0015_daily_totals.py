"""Daily totals: the sum of each day's rollup cells, for the unfiltered retrospective; and
an index on when runs were created (the operations dashboard counts the last hour's), and
one on tool calls by run and tool (the runs list's "called this tool" filter)."""

from django.db import migrations, models


def sum_the_cells(apps, schema_editor):
    """Each day's total from the cells the earlier migration built."""
    from runs.observability.core import rollup

    DailyRollup = apps.get_model("runs", "DailyRollup")
    DailyTotal = apps.get_model("runs", "DailyTotal")
    totals = {}
    for day, data in DailyRollup.objects.values_list("day", "data").iterator():
        rollup.accumulate(totals.setdefault(day, {}), data)
    DailyTotal.objects.bulk_create([DailyTotal(day=d, data=v) for d, v in totals.items()])


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0014_prices_and_backfill'),
    ]

    operations = [
        migrations.CreateModel(
            name='DailyTotal',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateField(unique=True)),
                ('data', models.JSONField(default=dict)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['day'],
            },
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['created_at'], name='run_created_idx'),
        ),
        migrations.AddIndex(
            model_name='toolcall',
            index=models.Index(fields=['run', 'tool'], name='tool_call_run_tool_idx'),
        ),
        migrations.RunPython(sum_the_cells, migrations.RunPython.noop),
    ]
