"""What model calls and runs cost (SPEC O4): the price table, versions, cache tokens counted
once, reported against estimated, and a model with no price."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from runs import flow
from runs.core import cost
from runs.models import ModelCall, ModelPrice, Run
from runs.pricing import call_cost, price_version_create
from runs.services import run_create
from tests.conftest import SEEDED

SONNET = cost.Price(
    1,
    "claude-sonnet-4",
    datetime(2025, 1, 1, tzinfo=UTC),
    Decimal(3),
    Decimal(15),
    Decimal("3.75"),
    Decimal("0.30"),
)
BROKEN = "# Configuration\n\nSee [the guide](getting-startd.md).\n"


def test_each_kind_of_token_is_priced_once_at_its_own_rate():
    plain = cost.Tokens(input=1000, output=200)
    assert cost.cost_of(plain, SONNET) == Decimal("0.006")  # 1000×3 + 200×15 per million
    cached = cost.Tokens(input=1000, output=200, cache_write=2000, cache_read=10_000)
    # 0.006 + 2000×3.75/1M + 10000×0.30/1M; Anthropic's input_tokens excludes the cache
    # tokens, so adding them to the input as well would give 0.0516.
    assert cost.cost_of(cached, SONNET) == Decimal("0.0165")
    assert cost.cost_of(cost.Tokens(cache_read=1), SONNET) == Decimal("0.0000003")


def test_the_longest_matching_name_then_the_newest_version_in_force_wins():
    jan, mar, may = (datetime(2026, m, 1, tzinfo=UTC) for m in (1, 3, 5))
    family = cost.Price(1, "claude-opus-4", jan, *(Decimal(n) for n in (15, 75, 18, 1)))
    exact = cost.Price(2, "claude-opus-4-5", jan, *(Decimal(n) for n in (5, 25, 6, 0)))
    newer = cost.Price(3, "claude-opus-4-5", may, *(Decimal(n) for n in (4, 20, 5, 0)))
    table = [family, exact, newer]
    assert cost.price_in_force(table, "claude-opus-4-1", mar) is family
    assert cost.price_in_force(table, "claude-opus-4-5-20260101", mar) is exact
    assert cost.price_in_force(table, "claude-opus-4-5", may) is newer
    assert cost.price_in_force(table, "claude-opus-4", mar) is family
    assert cost.price_in_force(table, "claude-opus-45", mar) is None  # no partial words
    assert cost.price_in_force(table, "gpt-5", mar) is None
    assert cost.price_in_force(table, "claude-opus-4-5", datetime(2025, 1, 1, tzinfo=UTC)) is None


@pytest.mark.django_db
def test_a_new_version_prices_later_calls_and_leaves_recorded_ones(personas):
    tokens = cost.Tokens(input=1_000_000)
    first = price_version_create(
        source=ModelPrice(
            model="claude-test-1",
            effective_from=timezone.now() - timedelta(days=1),
            input_per_mtok=Decimal(2),
            output_per_mtok=Decimal(10),
            cache_write_per_mtok=Decimal("2.5"),
            cache_read_per_mtok=Decimal("0.2"),
        ),
        user=personas.admin,
    )
    before = call_cost(model="claude-test-1", tokens=tokens, reported=True, at=timezone.now())
    assert (before.cost_usd, before.basis, before.price_id) == (Decimal(2), "reported", first.pk)
    second = price_version_create(
        source=ModelPrice(
            model="claude-test-1",
            effective_from=timezone.now(),
            input_per_mtok=Decimal(1),
            output_per_mtok=Decimal(5),
            cache_write_per_mtok=Decimal("1.25"),
            cache_read_per_mtok=Decimal("0.1"),
        )
    )
    assert (first.version, second.version) == (1, 2)
    after = call_cost(model="claude-test-1", tokens=tokens, reported=False, at=timezone.now())
    assert (after.cost_usd, after.basis, after.price_id) == (Decimal(1), "estimated", second.pk)
    earlier = call_cost(
        model="claude-test-1",
        tokens=tokens,
        reported=True,
        at=timezone.now() - timedelta(hours=1),
    )
    assert earlier.price_id == first.pk  # what a call an hour ago paid
    with pytest.raises(ValueError, match="never rewritten"):
        first.input_per_mtok = Decimal(9)
        first.save()
    unknown = call_cost(model="mystery-model", tokens=tokens, reported=True, at=timezone.now())
    assert (unknown.cost_usd, unknown.basis, unknown.price_id) == (None, "unpriced", None)


@pytest.mark.django_db
def test_the_admin_saves_a_changed_price_as_a_new_version(client, personas):
    price = price_version_create(
        source=ModelPrice(
            model="claude-test-2",
            effective_from=timezone.now() - timedelta(days=3),
            input_per_mtok=Decimal(3),
            output_per_mtok=Decimal(15),
            cache_write_per_mtok=Decimal("3.75"),
            cache_read_per_mtok=Decimal("0.3"),
        )
    )
    client.force_login(personas.admin)
    url = reverse("admin:runs_modelprice_change", args=[price.pk])
    assert client.get(url).status_code == 200
    form = {
        "model": "claude-test-2",
        "effective_from_0": price.effective_from.strftime("%Y-%m-%d"),
        "effective_from_1": price.effective_from.strftime("%H:%M:%S"),
        "input_per_mtok": "2.5",
        "output_per_mtok": "15",
        "cache_write_per_mtok": "3.75",
        "cache_read_per_mtok": "0.3",
        "note": "cheaper input",
    }
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    versions = list(ModelPrice.objects.filter(model="claude-test-2").order_by("version"))
    assert [(v.version, v.input_per_mtok) for v in versions] == [
        (1, Decimal(3)),
        (2, Decimal("2.5")),
    ]
    assert versions[1].created_by == personas.admin
    assert versions[1].effective_from > price.effective_from  # unchanged date: from now on
    bad = client.post(url, {**form, "input_per_mtok": "-1"})
    assert bad.status_code == 200 and b"greater than or equal to 0" in bad.content
    assert ModelPrice.objects.filter(model="claude-test-2").count() == 2
    assert client.post(reverse("admin:runs_modelprice_delete", args=[price.pk])).status_code == 403
    # Other roles do not reach the price table.
    client.force_login(personas.ops)
    assert client.get(reverse("admin:runs_modelprice_changelist")).status_code in (302, 403)


@pytest.fixture
def docs(workspace):
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "configuration.md").write_text(BROKEN)
    (workspace.root_path / "docs" / "getting-started.md").write_text("# Getting started\n")


def drive(run: Run) -> Run:
    flow.run_execute(run_id=run.pk, worker="test-worker")
    run.refresh_from_db()
    return run


@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_run_costs_the_sum_of_its_calls_with_cache_tokens_counted_once(personas, run, docs):
    run = drive(run)
    approval = ApprovalRequest.objects.get(run=run)
    approval_decide(approval=approval, user=personas.approver, decision="approve")
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    calls = list(ModelCall.objects.filter(run=run).order_by("turn"))
    # fix-link.json: (input, output, cache write, cache read) per turn, Sonnet 4.x prices.
    expected = [
        (900 * 3 + 40 * 15 + 600 * Decimal("3.75")) / 1_000_000,
        (300 * 3 + 60 * 15 + 600 * Decimal("0.30")) / 1_000_000,
        (350 * 3 + 20 * 15 + 600 * Decimal("0.30")) / 1_000_000,
    ]
    assert [c.cost_usd for c in calls] == expected
    assert {c.cost_basis for c in calls} == {"reported"}
    assert {c.price.model for c in calls} == {"claude-sonnet-4"}
    assert run.cost_usd == sum(expected) == Decimal("0.00906")
    assert run.cost_basis == "reported"
    # The run page shows it.
    from django.test import Client

    client = Client()
    client.force_login(personas.ops)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "$0.00906" in page and "reported" in page


@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_reply_without_usage_is_counted_here_and_marked_estimated(personas, agent, workspace):
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Say hello; the provider reports no usage",
        dispatch=False,
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    call = ModelCall.objects.get(run=run)
    assert call.input_tokens > 0 and call.output_tokens > 0  # estimated from the bytes sent
    assert call.cost_basis == "estimated" and call.cost_usd > 0
    assert run.cost_basis == "estimated" and run.cost_usd == call.cost_usd


@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_model_without_a_price_keeps_its_tokens_and_claims_no_cost(personas, run, docs):
    ModelPrice.objects.filter(model="claude-sonnet-4").delete()
    from runs.pricing import prices_changed

    prices_changed()
    run = drive(run)
    calls = ModelCall.objects.filter(run=run)
    assert calls.count() == 3 and {c.cost_basis for c in calls} == {"unpriced"}
    assert all(c.cost_usd is None for c in calls)
    run.refresh_from_db()
    assert run.cost_usd == 0 and run.cost_basis == "estimated"


def test_amounts_read_as_dollars_and_cents_or_significant_fractions():
    from runs.templatetags.money import usd

    assert usd(Decimal("1234.5")) == "$1,234.50"
    assert usd(Decimal("0.35")) == "$0.35"
    assert usd(Decimal("0.0165")) == "$0.0165"
    assert usd(Decimal("0.00995325")) == "$0.009953"
    assert usd(Decimal("0.000000300")) == "$0.0000003"
    assert (usd(0), usd(None), usd("junk")) == ("$0", "", "")
