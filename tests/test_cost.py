"""What model calls and runs cost (SPEC O4): the price table, versions, cache tokens counted
once, reported against estimated, and a model with no price."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.models import ModelCall, ModelPrice, Run
from runs.observability.core import cost
from runs.observability.pricing import call_cost, price_version_create
from runs.services import run_create
from tests.conftest import SEEDED
from tests.helpers import drive, driven

SONNET = cost.Price(
    1,
    "claude-sonnet-4",
    datetime(2025, 1, 1, tzinfo=UTC),
    Decimal(3),
    Decimal(15),
    Decimal("3.75"),
    Decimal("0.30"),
)


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


def test_a_process_keeps_the_price_table_until_a_saved_version_moves_the_stamp(
    personas, django_assert_num_queries, django_capture_on_commit_callbacks
):
    """Every model call is priced: a worker reads the table once, not at each call; a
    version saved by another process (no prices_changed here) is seen once committed."""
    tokens = cost.Tokens(input=1_000_000)
    call_cost(model="claude-test-2", tokens=tokens, reported=True, at=timezone.now())
    with django_assert_num_queries(0):
        unpriced = call_cost(model="claude-test-2", tokens=tokens, reported=True, at=timezone.now())
    assert unpriced.basis == "unpriced"
    with django_capture_on_commit_callbacks(execute=True):  # saved as another process would
        added = ModelPrice.objects.create(
            model="claude-test-2",
            version=1,
            effective_from=timezone.now() - timedelta(days=1),
            input_per_mtok=Decimal(3),
            output_per_mtok=Decimal(15),
            cache_write_per_mtok=Decimal("3.75"),
            cache_read_per_mtok=Decimal("0.3"),
        )
    priced = call_cost(model="claude-test-2", tokens=tokens, reported=True, at=timezone.now())
    assert (priced.cost_usd, priced.price_id) == (Decimal(3), added.pk)


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


@pytest.mark.django_db
def test_the_price_list_shows_each_price_as_exact_as_entered_and_sorts_by_it(client, personas):
    ModelPrice.objects.all().delete()  # the migration's prices: only these three here
    for model, input_ in (("claude-a", "3.125"), ("claude-b", "0.8"), ("claude-c", "15")):
        ModelPrice.objects.create(
            model=model,
            version=1,
            effective_from=datetime(2026, 1, 15, 9, 30, tzinfo=UTC),
            input_per_mtok=Decimal(input_),
            output_per_mtok=Decimal(15),
            cache_write_per_mtok=Decimal("3.75"),
            cache_read_per_mtok=Decimal("0.000125"),
        )
    client.force_login(personas.admin)
    url = reverse("admin:runs_modelprice_changelist")
    page = client.get(url).content.decode()
    cells = re.findall(r'<td class="field-[a-z_]+_per_mtok">([^<]*)</td>', page)
    assert cells[:4] == ["3.125", "15.00", "3.75", "0.000125"]  # claude-a, no stored zeros
    assert '<td class="field-effective">2026-01-15 09:30</td>' in page
    assert "css/admin.css" in page
    by_input = client.get(url, {"o": "3"}).content.decode()  # the input price (from 0)
    rows = re.findall(r'<th class="field-model"><a href="[^"]+">([^<]+)</a>', by_input)
    assert rows == ["claude-b", "claude-a", "claude-c"]


@pytest.fixture
def docs(docs):
    """The shared docs/ folder and the guide that ``ask``'s question is about."""
    (docs / "guide.md").write_text("# Guide\n\nInstall it.\n")
    return docs


@pytest.fixture
def api(monkeypatch):
    """The real SDK against a local server speaking the Messages API."""
    from tests.fake_anthropic import FakeAnthropic

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-test-cost")
    fake = FakeAnthropic()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    yield fake
    fake.close()


def ask(personas, agent, workspace, api, answers) -> Run:
    """A question no replay script matches, answered by ``answers`` through the SDK."""
    from tests.fake_anthropic import message

    api.answers += [message(content, **kwargs) for content, kwargs in answers]
    return driven(personas, agent, workspace, request="What does docs/guide.md say?")


READ = [
    {"type": "text", "text": "Let me read it."},
    {"type": "tool_use", "id": "toolu_1", "name": "readSource", "input": {"path": "docs/guide.md"}},
]
DONE = [{"type": "text", "text": "It says to install it."}]
FIRST = {"input_tokens": 120, "output_tokens": 30, "cache_creation_input_tokens": 900}
SECOND = {"input_tokens": 180, "output_tokens": 45, "cache_read_input_tokens": 900}


@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_run_costs_the_sum_of_its_calls_with_cache_tokens_counted_once(
    personas, agent, workspace, docs, api
):
    run = ask(
        personas,
        agent,
        workspace,
        api,
        [
            (READ, {"stop_reason": "tool_use", "usage": FIRST, "model": "claude-sonnet-4-6"}),
            (DONE, {"usage": SECOND, "model": "claude-sonnet-4-6"}),
        ],
    )
    assert run.status == "completed", run.failure_reason
    calls = list(ModelCall.objects.filter(run=run).order_by("turn"))
    # Sonnet 4.x: $3 input, $15 output, $3.75 cache write, $0.30 cache read per million.
    # Counting the cache tokens in the input as well would add 900 x $3 twice.
    expected = [
        (120 * 3 + 30 * 15 + 900 * Decimal("3.75")) / 1_000_000,
        (180 * 3 + 45 * 15 + 900 * Decimal("0.30")) / 1_000_000,
    ]
    assert [c.cost_usd for c in calls] == expected
    assert {c.cost_basis for c in calls} == {"reported"}
    assert {c.price.model for c in calls} == {"claude-sonnet-4"}
    assert run.cost_usd == sum(expected) == Decimal("0.00567")
    assert run.cost_basis == "reported"
    from django.test import Client

    client = Client()
    client.force_login(personas.ops)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "$0.00567" in page and "reported" in page


@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_model_without_a_price_keeps_its_tokens_and_claims_no_cost(
    personas, agent, workspace, docs, api
):
    run = ask(personas, agent, workspace, api, [(DONE, {"usage": FIRST, "model": "claude-9"})])
    assert run.status == "completed", run.failure_reason
    call = ModelCall.objects.get(run=run)
    assert (call.cost_usd, call.cost_basis, call.price) == (None, "unpriced", None)
    assert call.cache_creation_input_tokens == 900
    assert run.cost_usd == 0 and run.cost_basis == "estimated"


@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_an_offline_replay_costs_nothing_whatever_its_script_says(personas, run, docs):
    run = drive(run)  # fix-link.json: scripted usage, cache tokens included
    calls = ModelCall.objects.filter(run=run)
    assert calls.count() == 3 and calls.exclude(input_tokens=0).count() == 3
    assert {(c.cost_usd, c.cost_basis, c.price_id) for c in calls} == {(0, "replay", None)}
    run.refresh_from_db()
    assert (run.cost_usd, run.cost_basis) == (0, "replay")


@pytest.mark.usefixtures(*SEEDED[1].args)
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_reply_without_usage_is_counted_here_and_marked_estimated(personas, agent, workspace):
    """The offline replay's scripts may omit usage; the count is still made (and shown)."""
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
    assert call.input_tokens > 0 and call.output_tokens > 0  # counted from the bytes sent


def test_the_run_basis_is_reported_only_while_every_call_is():
    assert cost.run_basis("", "reported") == "reported"
    assert cost.run_basis("reported", "reported") == "reported"
    assert cost.run_basis("reported", "estimated") == "estimated"
    assert cost.run_basis("reported", "unpriced") == "estimated"
    assert cost.run_basis("", "unpriced") == "estimated"
    assert cost.run_basis("estimated", "reported") == "estimated"
    assert cost.run_basis("replay", "replay") == "replay"


def test_amounts_read_as_dollars_and_cents_or_significant_fractions():
    from runs.templatetags.money import usd

    assert usd(Decimal("1234.5")) == "$1,234.50"
    assert usd(Decimal("0.35")) == "$0.35"
    assert usd(Decimal("0.0165")) == "$0.0165"
    assert usd(Decimal("0.00995325")) == "$0.009953"
    assert usd(Decimal("0.000000300")) == "$0.0000003"
    assert (usd(0), usd(None), usd("junk")) == ("$0", "", "")
