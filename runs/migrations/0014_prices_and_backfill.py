"""Seed the price table with Anthropic's published prices, and bring the runs recorded
before costs and rollups up to date: failure kinds, each model call's cost, each run's
total, and the daily rollups of every day that has finished runs."""

import datetime
from decimal import Decimal

from django.db import migrations
from django.db.models import Sum

# platform.claude.com/docs/en/about-claude/pricing (5-minute cache writes), checked
# 2026-11-30. The longest matching name wins: claude-sonnet-4 prices every Sonnet 4.x.
PRICES = [
    # model, input, output, cache write, cache read ($ per million tokens)
    ("claude-opus-4", "15", "75", "18.75", "1.50"),
    ("claude-opus-4-5", "5", "25", "6.25", "0.50"),
    ("claude-opus-4-6", "5", "25", "6.25", "0.50"),
    ("claude-opus-4-7", "5", "25", "6.25", "0.50"),
    ("claude-sonnet-4", "3", "15", "3.75", "0.30"),
    ("claude-haiku-4-5", "1", "5", "1.25", "0.10"),
    ("claude-3-5-haiku", "0.80", "4", "1", "0.08"),
]
SINCE = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
NOTE = "Anthropic's published price (5-minute cache writes) when the console shipped."


def forwards(apps, schema_editor):
    from runs.observability.core import cost
    from runs.core.failures import failure_kind
    from runs.observability.rollups import days_with_runs, reconcile_day

    ModelPrice = apps.get_model("runs", "ModelPrice")
    Run = apps.get_model("runs", "Run")
    ModelCall = apps.get_model("runs", "ModelCall")
    for model, input_, output, write, read in PRICES:
        if not ModelPrice.objects.filter(model=model).exists():
            ModelPrice.objects.create(
                model=model,
                version=1,
                effective_from=SINCE,
                input_per_mtok=Decimal(input_),
                output_per_mtok=Decimal(output),
                cache_write_per_mtok=Decimal(write),
                cache_read_per_mtok=Decimal(read),
                note=NOTE,
            )
    for run in Run.objects.filter(status="failed", failure_kind="").only("failure_reason"):
        Run.objects.filter(pk=run.pk).update(failure_kind=failure_kind(run.failure_reason))

    prices = [
        cost.Price(
            p.pk,
            p.model,
            p.effective_from,
            p.input_per_mtok,
            p.output_per_mtok,
            p.cache_write_per_mtok,
            p.cache_read_per_mtok,
        )
        for p in ModelPrice.objects.all()
    ]
    priced_runs = set()
    for call in ModelCall.objects.filter(cost_basis="").iterator():
        price = cost.price_in_force(prices, call.model, call.created_at)
        tokens = cost.Tokens(
            call.input_tokens,
            call.output_tokens,
            call.cache_creation_input_tokens,
            call.cache_read_input_tokens,
        )
        ModelCall.objects.filter(pk=call.pk).update(
            cost_usd=None if price is None else cost.cost_of(tokens, price),
            cost_basis=cost.UNPRICED if price is None else cost.REPORTED,
            price_id=None if price is None else price.id,
        )
        priced_runs.add(call.run_id)
    for run_id in priced_runs:
        calls = ModelCall.objects.filter(run_id=run_id)
        basis = "estimated" if calls.exclude(cost_basis="reported").exists() else "reported"
        Run.objects.filter(pk=run_id).update(
            cost_usd=calls.aggregate(s=Sum("cost_usd"))["s"] or 0, cost_basis=basis
        )

    models = {
        "run_model": Run,
        "call_model": ModelCall,
        "tool_model": apps.get_model("runs", "ToolCall"),
        "approval_model": apps.get_model("approvals", "ApprovalRequest"),
        "rollup_model": apps.get_model("runs", "DailyRollup"),
    }
    for day in days_with_runs(Run):
        reconcile_day(day, **models)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0013_cost_and_rollups"),
        ("approvals", "0003_backfill_expiry_and_decisions"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
