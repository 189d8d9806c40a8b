"""The operations and retrospective dashboards (issue 7 points 5 and 6, SPEC O5, O6, L2)
through Django's test client and the real ASGI stack: who may open them, bad filters, the
figures the pages show, the links from every chart to the runs behind it (and the runs
list's filters they use), and the ops socket's notices. The arithmetic of the figures is
tested against the raw rows elsewhere; here the pages must show what
runs.observability.dashboards.figures says. The real browser is in test_dashboards_browser."""

from __future__ import annotations

import html
import json
import re
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalRequest
from policies.models import Agent, InstructionVersion
from runs.models import ModelCall, Run, RunEvent, ToolCall
from runs.observability.dashboards.figures import retro_figures
from runs.observability.rollups import day_of, rollups_reconcile
from runs.observability.synthetic import synthetic_runs_generate
from runs.services import run_create
from runs.templatetags.money import usd
from tests.conftest import EVERYWHERE
from tests.helpers import FIX
from tests.plotly_bundle import assert_drawable
from tests.test_run_websocket import _connect, _receive_all, cookie

pytestmark = pytest.mark.django_db

PAGES = ("dashboards", "dashboards:ops", "dashboards:retro")
CHARTS = (
    "runs-per-day",
    "success-rate",
    "failure-reasons",
    "cost-per-day",
    "tokens-per-day",
    "tool-errors",
    "approval-latency",
    "run-duration",
    "escape-rate",
)
FIGURE = re.compile(
    r'<script type="application/json" id="chart-([a-z-]+)-figure">(.*?)</script>', re.S
)


# --- helpers ---------------------------------------------------------------------------------
def get(client, url: str, expect: int = 200, **params) -> str:
    response = client.get(url, params)
    assert response.status_code == expect, response.content[:800]
    return response.content.decode()


def retro_shown(client, expect: int = 200, **params) -> str:
    """The retrospective as a browser shows it: the page, then the charts it fetches from
    the address it names (``data-charts-url``, preloaded by its head)."""
    page = get(client, reverse("dashboards:retro"), expect, **params)
    if expect != 200:
        return page
    url = html.unescape(re.search(r'data-charts-url="([^"]+)"', page).group(1))
    assert f'<link rel="preload" href="{html.escape(url)}" as="fetch" crossorigin>' in page
    return page + get(client, url)


def figures(page: str) -> dict[str, dict]:
    return {key: json.loads(text) for key, text in FIGURE.findall(page)}


def table_links(page: str, chart: str) -> list[tuple[str, str]]:
    """(text, url) of every link in a chart's table: what a person without the chart uses."""
    table = re.search(
        rf'<table class="table chart-data" data-chart="{chart}">(.*?)</table>', page, re.S
    )
    assert table, f"no table for {chart}"
    return [
        (html.unescape(text), html.unescape(url))
        for url, text in re.findall(r'<a href="([^"]+)">([^<]+)</a>', table.group(1))
    ]


def listed(client, url: str) -> int:
    """How many runs the runs list says it holds at ``url``."""
    page = get(client, url)
    return int(re.search(r'id="run-count" data-total="(\d+)"', page).group(1))


def listed_ids(client, **params) -> set[str]:
    page = get(client, reverse("runs:list"), **params)
    return set(re.findall(r'href="/runs/([0-9a-f-]{36})/"', page))


def listed_ids_at(client, url: str) -> set[str]:
    return set(re.findall(r'href="/runs/([0-9a-f-]{36})/"', get(client, url)))


def traces(figure: dict) -> list[dict]:
    """The figure's own traces, without the policy/instruction change markers."""
    return [t for t in figure["data"] if t.get("yaxis") != "y3"]


def rounded(values: list) -> list:
    return [None if v is None else round(v, 6) for v in values]


@contextmanager
def stamped(model, name: str):
    """Let a row keep the timestamp the test gives it (``auto_now_add`` would say now)."""
    field = model._meta.get_field(name)
    saved = field.auto_now_add
    field.auto_now_add = False
    try:
        yield
    finally:
        field.auto_now_add = saved


@pytest.fixture
def second_agent(db) -> Agent:
    return Agent.objects.create(slug="reviewer", name="Reviewer", identity="You review.")


@pytest.fixture
def history(personas, agent, second_agent, workspace):
    """300 finished runs over the last 30 days, by two agents, with their rollups."""
    return synthetic_runs_generate(
        runs=300, days=30, seed=7, requester=personas.operator, approvers=[personas.approver]
    )


# --- who may open them -----------------------------------------------------------------------
@pytest.mark.parametrize("name", PAGES)
@pytest.mark.parametrize(
    "who,status",
    [("ops", 200), ("admin", 200), ("approver", 200), ("operator", 403), ("outsider", 403)],
)
def test_only_ops_admins_and_approvers_open_the_dashboards(client, personas, name, who, status):
    client.force_login(getattr(personas, who))
    response = client.get(reverse(name))
    assert response.status_code == status
    if status == 403:
        assert b"Your role may not open the dashboards." in response.content


@pytest.mark.parametrize("name", PAGES)
def test_an_anonymous_visitor_is_sent_to_log_in(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.parametrize("params", [{"part": "charts"}, {"inline": "1"}])
@pytest.mark.parametrize("who,status", [("ops", 200), ("operator", 403), ("anonymous", 302)])
def test_the_retrospective_s_charts_are_held_as_the_page_is(client, personas, params, who, status):
    if who != "anonymous":
        client.force_login(getattr(personas, who))
    response = client.get(reverse("dashboards:retro"), params)
    assert response.status_code == status
    if status == 302:
        assert "/login/" in response["Location"]


def test_the_retrospective_page_names_its_charts_and_the_charts_are_theirs_alone(
    client, personas, history, agent
):
    """The page carries the filters and where its charts are, not the figures (read while
    the browser starts plotly.js); the charts part carries the figures without the page
    around them; ``inline=1`` is both in one page, for a browser without scripts."""
    client.force_login(personas.ops)
    page = get(client, reverse("dashboards:retro"), days="30", agent=agent.slug)
    assert figures(page) == {} and 'id="retro-filters"' in page
    charts = re.search(r'data-charts-url="([^"]+)"', page).group(1)
    inline = re.search(r'<noscript><p><a href="([^"]+)">', page).group(1)
    assert parse_qs(urlsplit(html.unescape(charts)).query) == {
        "days": ["30"],
        "agent": [agent.slug],
        "part": ["charts"],
    }
    assert parse_qs(urlsplit(html.unescape(inline)).query) == {
        "days": ["30"],
        "agent": [agent.slug],
        "inline": ["1"],
    }
    part = get(client, html.unescape(charts))
    assert "runs-per-day" in figures(part) and "<html" not in part and "retro-filters" not in part
    whole = get(client, html.unescape(inline))
    assert figures(whole) == figures(part) and 'id="retro-filters"' in whole
    assert "data-charts-url" not in whole


def test_a_bad_query_for_the_charts_is_the_page_s_clear_400(client, personas):
    client.force_login(personas.ops)
    page = get(client, reverse("dashboards:retro"), expect=400, days="9", part="charts")
    assert "Choose a window of 7 or 30 days" in page


def test_the_dashboards_home_is_the_operations_dashboard(client, personas):
    client.force_login(personas.ops)
    home = get(client, reverse("dashboards"))
    assert 'id="ops-live"' in home and 'data-socket-path="/ws/dashboards/ops/"' in home
    assert 'data-nav="dashboards" aria-current="page"' in home


# --- the retrospective: windows and filters --------------------------------------------------
@pytest.mark.parametrize("days", ["7", "30"])
def test_the_window_is_the_last_7_or_30_days(client, personas, history, days):
    client.force_login(personas.ops)
    page = retro_shown(client, days=days)
    x = figures(page)["runs-per-day"]["data"][0]["x"]
    assert len(x) == int(days) and x[-1] == day_of(timezone.now()).isoformat()


def test_the_window_is_7_days_by_default(client, personas, history):
    client.force_login(personas.ops)
    page = retro_shown(client)
    assert len(figures(page)["runs-per-day"]["data"][0]["x"]) == 7
    assert '<option value="7" selected>' in page


@pytest.mark.parametrize("days", ["5", "junk", "7.0", "-7", "300", "30 days"])
def test_any_other_window_is_a_clear_400(client, personas, days):
    client.force_login(personas.ops)
    page = retro_shown(client, expect=400, days=days)
    assert "Choose a window of 7 or 30 days" in page
    assert 'id="retro-filters"' in page and "js-plotly-plot" not in page


@pytest.mark.parametrize("name", ["agent", "workspace"])
def test_an_unknown_agent_or_workspace_is_a_clear_400(client, personas, agent, workspace, name):
    client.force_login(personas.ops)
    page = retro_shown(client, expect=400, **{name: "nobody"})
    assert f"Unknown {name} &#x27;nobody&#x27;." in page
    assert 'type="application/json"' not in page


def test_an_empty_window_says_no_runs_finished(client, personas, agent, workspace):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30")
    assert "No runs finished in this window." in page
    assert figures(page) == {}


# --- the retrospective: its figures ----------------------------------------------------------
def test_the_retrospective_shows_every_figure_of_retro_figures(client, personas, history):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30")
    retro = retro_figures(days=30)
    shown = figures(page)
    assert list(shown) == list(CHARTS)  # one chart per figure

    runs = traces(shown["runs-per-day"])
    assert {t["name"]: t["y"] for t in runs} == {
        "Completed": retro.runs["completed"],
        "Failed": retro.runs["failed"],
        "Cancelled": retro.runs["cancelled"],
        "Rolled back": retro.runs["rolled_back"],
    }
    success = traces(shown["success-rate"])[0]["y"]
    assert rounded(success) == rounded([None if s is None else s * 100 for s in retro.success_rate])
    bars, cumulative = shown["failure-reasons"]["data"]
    assert bars["x"] == [label for _kind, label, _n in retro.failures]
    assert bars["y"] == [n for _kind, _label, n in retro.failures]
    assert round(cumulative["y"][-1]) == 100
    assert cumulative["y"] == sorted(cumulative["y"])
    cost = {t["name"]: t["y"] for t in traces(shown["cost-per-day"])}
    assert cost == {f"{a} · {m}": [float(v) for v in vs] for (a, m), vs in retro.cost.items()}
    tokens = {t["name"]: t["y"] for t in traces(shown["tokens-per-day"])}
    assert tokens == {f"{a} · {m}": vs for (a, m), vs in retro.tokens.items()}
    tools = shown["tool-errors"]["data"][0]
    assert tools["x"] == [t["tool"] for t in retro.tools]
    assert rounded(tools["y"]) == rounded([(t["error_rate"] or 0) * 100 for t in retro.tools])
    for key, p50, p95 in (
        ("approval-latency", retro.approval_p50, retro.approval_p95),
        ("run-duration", retro.duration_p50, retro.duration_p95),
    ):
        lines = {t["name"]: t["y"] for t in traces(shown[key])}
        assert lines == {
            "p50": [None if v is None else v / 1000 for v in p50],
            "p95": [None if v is None else v / 1000 for v in p95],
        }
    escapes = traces(shown["escape-rate"])[0]["y"]
    assert rounded(escapes) == rounded([None if e is None else e * 100 for e in retro.escape_rate])


def test_the_headline_shows_the_window_totals(client, personas, history):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30")
    totals = retro_figures(days=30).totals

    def headline(key: str) -> str:
        box = re.search(rf'data-headline="{key}">(.*?)</div>\s*</div>', page, re.S).group(1)
        return re.sub(r"<[^>]+>", "", box)

    assert f"{totals['finished']:,}" in headline("runs")
    assert f"{totals['success_rate'] * 100:.1f} %" in headline("success")
    assert f"{totals['tokens']:,}" in headline("tokens")
    assert "$" in headline("cost")
    assert " min" in headline("approval") or " s" in headline("approval")
    assert f"{totals['escaped']:,} of {totals['verified']:,}" in headline("escape")


@pytest.mark.parametrize(
    "bases,said",
    [
        (["reported", "reported"], ""),
        (["estimated", "unpriced"], "1 call estimated, 1 call unpriced"),
        (["estimated", "estimated"], "2 calls estimated"),
    ],
)
def test_the_cost_headline_says_how_many_calls_were_estimated_or_unpriced(
    client, personas, agent, workspace, bases, said
):
    run = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request=FIX, dispatch=False
    )
    Run.objects.filter(pk=run.pk).update(status="completed", finished_at=timezone.now())
    for turn, basis in enumerate(bases, start=1):
        cost = None if basis == "unpriced" else Decimal("0.0042")
        ModelCall.objects.create(
            run=run,
            turn=turn,
            label="x",
            model="m",
            stop_reason="end",
            cost_usd=cost,
            cost_basis=basis,
            input_tokens=100,
        )
    rollups_reconcile([day_of(timezone.now())])
    client.force_login(personas.ops)
    page = retro_shown(client)
    cost = re.search(r'data-headline="cost">(.*?)</div>\s*</div>', page, re.S).group(1)
    priced = sum(1 for b in bases if b != "unpriced")
    assert usd(Decimal("0.0042") * priced) in cost
    assert said in cost
    if not said:
        assert "estimated" not in cost and "unpriced" not in cost


def test_the_filters_narrow_every_figure_to_an_agent_and_a_workspace(
    client, personas, history, second_agent, workspace
):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30", agent="reviewer", workspace=workspace.slug)
    retro = retro_figures(days=30, agent_id=second_agent.pk, workspace_id=workspace.pk)
    runs = {t["name"]: t["y"] for t in traces(figures(page)["runs-per-day"])}
    assert runs["Failed"] == retro.runs["failed"]
    cost = [t["name"] for t in traces(figures(page)["cost-per-day"])]
    assert cost and all(name.startswith("reviewer · ") for name in cost)
    for _text, url in table_links(page, "runs-per-day"):
        query = parse_qs(urlsplit(url).query)
        assert query["agent"] == ["reviewer"] and query["workspace"] == [workspace.slug]
    assert '<option value="reviewer" selected>' in page


def test_changes_of_policy_and_instructions_are_marked_on_the_time_axes(
    client, personas, history, agent
):
    InstructionVersion.objects.create(agent=agent, version=99, text="Be brief.", note="shorter")
    client.force_login(personas.ops)
    page = retro_shown(client, days="7")
    changes = retro_figures(days=7).changes
    assert any(c["label"] == "tester instructions v99" for c in changes)
    for key in ("runs-per-day", "cost-per-day", "run-duration"):
        figure = figures(page)[key]
        marks = [t for t in figure["data"] if t.get("yaxis") == "y3"]
        assert len(marks) == 1 and len(marks[0]["x"]) == len(changes)
        assert any("tester instructions v99" in text for text in marks[0]["hovertext"])
        assert len(figure["layout"]["shapes"]) == len(changes)
    assert "tester instructions v99" in page.split('id="retro-changes"')[1]


def test_every_figure_is_valid_for_plotly_and_drawn_by_the_vendored_bundle(
    client, personas, history, agent
):
    """The pages serialise figures without plotly's validation (it cost more than the
    figures themselves); plotly's schema checks every one here, marks of changes included,
    and each trace is of a type the vendored partial plotly.js draws."""
    InstructionVersion.objects.create(agent=agent, version=98, text="Be brief.", note="shorter")
    client.force_login(personas.ops)
    for url in (reverse("dashboards:retro") + "?days=30&part=charts", reverse("dashboards:ops")):
        found = figures(client.get(url).content.decode())
        assert found, url
        for figure in found.values():
            assert_drawable(figure)  # raises on any property plotly does not know, e.g. a typo


# --- every chart links to its runs -----------------------------------------------------------
def test_every_point_of_every_chart_carries_the_address_of_its_runs(client, personas, history):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30")
    for key, figure in figures(page).items():
        for trace in traces(figure):
            assert len(trace["customdata"]) == len(trace["x"]), (key, trace["name"])
            assert all(url.startswith("/runs/?") for url in trace["customdata"]), key
        links = table_links(page, key)
        assert links, key
        assert all(url.startswith("/runs/?") for _text, url in links), key


def test_a_days_bar_lists_exactly_the_runs_it_counts(client, personas, history):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30")
    retro = retro_figures(days=30)
    busiest = max(range(30), key=lambda i: retro.runs["failed"][i])
    day = retro.days[busiest].isoformat()
    failed = figures(page)["runs-per-day"]["data"][1]
    assert failed["name"] == "Failed"
    url = failed["customdata"][busiest]
    assert parse_qs(urlsplit(url).query) == {"status": ["failed"], "finished": [day]}
    assert listed(client, url) == retro.runs["failed"][busiest] > 0
    # The table's links are the same lists: every count there is the list's total.
    for text, url in table_links(page, "runs-per-day")[:40]:
        assert listed(client, url) == int(text.replace(",", "")), url


def test_the_top_failure_reason_lists_exactly_its_runs(client, personas, history):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30")
    kind, _label, count = retro_figures(days=30).failures[0]
    url = figures(page)["failure-reasons"]["data"][0]["customdata"][0]
    assert parse_qs(urlsplit(url).query)["failure_kind"] == [kind]
    assert listed(client, url) == count
    for text, url in table_links(page, "failure-reasons"):
        assert listed(client, url) == int(text), url


def test_a_tools_errors_link_lists_the_runs_with_an_error_of_that_tool(client, personas, history):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30")
    retro = retro_figures(days=30)
    worst = retro.tools[0]
    assert worst["errors"] > 0
    url = figures(page)["tool-errors"]["data"][0]["customdata"][0]
    start = datetime.combine(retro.days[0], datetime.min.time(), tzinfo=UTC)
    runs_with_errors = (
        ToolCall.objects.filter(
            tool=worst["tool"], status__in=("error", "timeout"), run__finished_at__gte=start
        )
        .values("run_id")
        .distinct()
        .count()
    )
    assert 0 < listed(client, url) == runs_with_errors <= worst["errors"]


def test_the_other_charts_links_list_their_runs(client, personas, history):
    client.force_login(personas.ops)
    page = retro_shown(client, days="30")
    retro = retro_figures(days=30)
    shown = figures(page)
    escapes = traces(shown["escape-rate"])[0]["customdata"]
    for i in (i for i, n in enumerate(retro.escaped) if n):
        assert listed(client, escapes[i]) == retro.escaped[i]
    for text, url in table_links(page, "escape-rate"):
        assert listed(client, url) == int(text)
    (agent, model), values = next(iter(retro.cost.items()))
    day = next(i for i, v in enumerate(values) if v)
    url = traces(shown["cost-per-day"])[0]["customdata"][day]
    expected = (
        Run.objects.filter(agent__slug=agent, model_calls__model=model)
        .filter(finished_at__date=retro.days[day])
        .distinct()
        .count()
    )
    assert listed(client, url) == expected > 0
    decided = traces(shown["approval-latency"])[0]["customdata"]
    day = next(i for i, v in enumerate(retro.approval_p50) if v is not None)
    assert listed(client, decided[day]) == (
        ApprovalRequest.objects.filter(
            status__in=("approved", "rejected"), run__finished_at__date=retro.days[day]
        )
        .values("run_id")
        .distinct()
        .count()
    )
    finished = sum(retro.runs[o][day] for o in retro.runs)
    assert listed(client, traces(shown["run-duration"])[0]["customdata"][day]) == finished


# --- the runs list's filters -----------------------------------------------------------------
@pytest.fixture
def world(personas, agent, workspace):
    """Four runs around a UTC midnight, with the child rows the filters look for."""
    day = day_of(timezone.now()) - timedelta(days=3)
    midnight = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    made = {}
    for name in ("early", "late", "next", "live"):
        made[name] = run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request=FIX,
            dispatch=False,
        )
    finish = {
        "early": dict(status="completed", finished_at=midnight, verification={"result": "pass"}),
        "late": dict(
            status="failed",
            finished_at=midnight + timedelta(days=1, microseconds=-1),
            failure_reason="something odd",
            failure_kind="",
        ),
        "next": dict(
            status="failed",
            finished_at=midnight + timedelta(days=1),
            failure_reason="model call failed: 529",
            failure_kind="model_error",
            verification={"result": "fail"},
        ),
    }
    for name, fields in finish.items():
        Run.objects.filter(pk=made[name].pk).update(**fields)
    for name, model in (("early", "m-a"), ("late", "m-b"), ("next", "m-b")):
        ModelCall.objects.create(run=made[name], turn=1, label="x", model=model, stop_reason="end")
    for name, status in (("early", "timeout"), ("late", "ok"), ("next", "error")):
        ToolCall.objects.create(
            run=made[name], workspace=workspace, tool="shell", decision="allow", status=status
        )
    ApprovalRequest.objects.create(
        run=made["early"],
        kind="commit",
        status="approved",
        tool_use_id="c1",
        decided_at=midnight,
    )
    ApprovalRequest.objects.create(run=made["next"], kind="commit", tool_use_id="c2")
    return {"day": day, **{k: str(v.pk) for k, v in made.items()}}


@pytest.mark.parametrize(
    "params,expected",
    [
        ({"finished": "{day}"}, {"early", "late"}),
        ({"finished": "{next_day}"}, {"next"}),
        ({"finished_from": "{day}", "finished_to": "{day}"}, {"early", "late"}),
        ({"finished_from": "{day}", "finished_to": "{next_day}"}, {"early", "late", "next"}),
        ({"finished_from": "{next_day}"}, {"next"}),
        ({"finished_to": "{day}"}, {"early", "late"}),
        ({"failure_kind": "other"}, {"late"}),
        ({"failure_kind": "model_error"}, {"next"}),
        ({"failure_kind": "cancelled"}, set()),
        ({"model": "m-a"}, {"early"}),
        ({"model": "m-b", "finished": "{day}"}, {"late"}),
        ({"tool": "shell"}, {"early", "late", "next"}),
        ({"tool": "shell", "tool_status": "error"}, {"early", "next"}),
        ({"tool": "shell", "tool_status": "timeout"}, {"early"}),
        ({"tool": "shell", "tool_status": "ok"}, {"late"}),
        ({"tool": "readSource"}, set()),
        ({"approval": "decided"}, {"early"}),
        ({"verification": "pass"}, {"early"}),
        ({"verification": "fail"}, {"next"}),
        ({"workspace": "test"}, {"early", "late", "next", "live"}),
        ({"status": "failed", "tool": "shell", "tool_status": "error"}, {"next"}),
    ],
)
def test_each_runs_list_filter_selects_exactly_its_runs(client, personas, world, params, expected):
    client.force_login(personas.ops)
    days = {
        "day": world["day"].isoformat(),
        "next_day": (world["day"] + timedelta(days=1)).isoformat(),
    }
    query = {k: v.format(**days) for k, v in params.items()}
    assert listed_ids(client, **query) == {world[name] for name in expected}


def test_the_list_says_which_runs_it_holds_and_keeps_its_filters(client, personas, world):
    client.force_login(personas.ops)
    day = world["day"].isoformat()
    params = {"status": "failed", "finished": day, "tool": "shell", "tool_status": "error"}
    response = client.get(reverse("runs:list"), params)
    page = response.content.decode()
    assert response.context["query"] == f"status=failed&finished={day}&tool=shell&tool_status=error"
    assert f'<input type="hidden" name="finished" value="{day}">' in page
    assert '<input type="hidden" name="tool_status" value="error">' in page
    assert "called the tool shell with an error or a timeout" in page
    assert f"finished on {day} (UTC)" in page
    assert 'id="run-count" data-total="0"' in page  # "late" failed on that day, but with no error
    fragment = client.get(reverse("runs:list"), params, HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and 'id="run-count"' in fragment


def test_the_pager_keeps_the_filters(client, personas, agent, workspace):
    runs = [
        run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request=FIX,
            dispatch=False,
        )
        for _ in range(51)
    ]
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(
        status="completed", finished_at=timezone.now()
    )
    client.force_login(personas.ops)
    today = day_of(timezone.now()).isoformat()
    page = get(client, reverse("runs:list"), finished=today, workspace="test")
    older = re.search(r'href="\?(workspace=test&amp;finished=[0-9-]+&after=[0-9a-f.]+)"', page)
    assert older is not None, "the older link keeps the filters"
    second = "/runs/?" + older.group(1).replace("&amp;", "&")
    assert listed(client, second) == 51
    assert len(listed_ids_at(client, second)) == 1 and "page 2 of 2" in get(client, second)


@pytest.mark.parametrize(
    "params,message",
    [
        ({"status": "exploded"}, "Unknown status"),
        ({"finished": "2026-13-01"}, "finished must be a day written YYYY-MM-DD"),
        ({"finished": "yesterday"}, "finished must be a day written YYYY-MM-DD"),
        ({"finished": "20260101"}, "finished must be a day written YYYY-MM-DD"),
        ({"finished_from": "2026-02-30"}, "finished_from must be a day written YYYY-MM-DD"),
        ({"finished_to": "2026-1-1"}, "finished_to must be a day written YYYY-MM-DD"),
        (
            {"finished_from": "2026-03-02", "finished_to": "2026-03-01"},
            "finished_from (2026-03-02) is after finished_to (2026-03-01).",
        ),
        ({"failure_kind": "exploded"}, "Unknown failure kind &#x27;exploded&#x27;"),
        ({"tool": "shell", "tool_status": "broken"}, "Unknown tool status &#x27;broken&#x27;"),
        ({"tool_status": "error"}, "tool_status needs a tool"),
        ({"approval": "pending"}, "Unknown approval filter &#x27;pending&#x27;"),
        ({"verification": "maybe"}, "Unknown verification result &#x27;maybe&#x27;"),
        ({"model": "m" * 201}, "model is too long"),
        ({"agent": "nope"}, "Unknown agent &#x27;nope&#x27;."),
        ({"workspace": "nope"}, "Unknown workspace &#x27;nope&#x27;."),
        ({"requester": "nobody"}, "Unknown requester &#x27;nobody&#x27;."),
    ],
)
def test_a_bad_runs_list_filter_is_a_clear_400(client, personas, params, message):
    client.force_login(personas.ops)
    page = get(client, reverse("runs:list"), expect=400, **params)
    assert message in page
    assert 'role="alert"' in page and 'id="run-table"></div>' in page
    assert 'id="run-filters-said"' not in page  # a refused filter is not described as one


# --- the operations dashboard ----------------------------------------------------------------
def a_run(personas, agent, workspace, **fields) -> Run:
    run = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request=FIX, dispatch=False
    )
    if fields:
        Run.objects.filter(pk=run.pk).update(**fields)
    return run


def ops_page(client, user) -> str:
    client.force_login(user)
    return get(client, reverse("dashboards:ops"))


def test_the_ops_dashboard_counts_runs_per_state_with_zero_rows(client, personas, agent, workspace):
    a_run(personas, agent, workspace)
    a_run(personas, agent, workspace, status="running")
    a_run(personas, agent, workspace, status="failed", finished_at=timezone.now())
    page = ops_page(client, personas.ops)
    for status, count in (
        ("created", 1),
        ("planning", 0),
        ("waiting_for_answer", 0),
        ("running", 1),
        ("waiting_for_approval", 0),
        ("verifying", 0),
        ("completed", 0),
        ("failed", 1),
        ("rolled_back", 0),
    ):
        assert f'<td data-status="{status}">{count}</td>' in page, status
    assert '<dd id="ops-hour-failed">1</dd>' in page
    assert '<dd id="ops-hour-error-rate">100.0 %</dd>' in page
    assert 'id="ops-updated"' in page
    chart = figures(page)["ops-states"]["data"][0]
    assert chart["y"] == [1, 0, 0, 1, 0, 0]
    assert chart["customdata"][3] == "/runs/?status=running"


def test_a_stuck_run_appears_with_the_threshold(client, personas, agent, workspace):
    """A run that works (running) but wrote no event for longer than the threshold."""
    long_ago = timezone.now() - timedelta(minutes=25)
    rows = {"agent": agent, "workspace": workspace, "requester": personas.operator}
    stuck = Run.objects.create(**rows, request=FIX, status="running")
    busy = Run.objects.create(**rows, request=FIX, status="running")
    silent = Run.objects.create(**rows, request=FIX, status="verifying")  # not one event
    Run.objects.filter(pk__in=[stuck.pk, busy.pk, silent.pk]).update(created_at=long_ago)
    with stamped(RunEvent, "created_at"):
        RunEvent.objects.create(run=stuck, seq=1, type="status.changed", created_at=long_ago)
    RunEvent.objects.create(run=busy, seq=1, type="note")  # just now
    with override_settings(HARNESS_STUCK_AFTER_SECONDS=1200):
        section = ops_page(client, personas.ops).split('id="ops-stuck"')[1]
    assert (
        'no event for <span id="ops-stuck-after" data-seconds="1200">20 minutes</span>' in section
    )
    for run in (stuck, silent):
        assert f'<tr data-run="{run.pk}">' in section
        assert f'href="/runs/{run.pk}/"' in section
    assert f'data-run="{busy.pk}"' not in section
    assert "25\xa0minutes ago" in section
    with override_settings(HARNESS_STUCK_AFTER_SECONDS=1800):
        section = ops_page(client, personas.ops).split('id="ops-stuck"')[1]
    assert "data-run=" not in section and "No run is stuck." in section


def test_the_oldest_wait_for_approval_is_shown_and_linked(client, personas, agent, workspace):
    older = a_run(personas, agent, workspace, status="waiting_for_approval")
    newer = a_run(personas, agent, workspace, status="waiting_for_approval")
    first = ApprovalRequest.objects.create(run=older, kind="commit", tool_use_id="a")
    ApprovalRequest.objects.create(run=newer, kind="commit", tool_use_id="b")
    ApprovalRequest.objects.filter(pk=first.pk).update(
        requested_at=timezone.now() - timedelta(minutes=42)
    )
    page = ops_page(client, personas.approver)
    waiting = page.split('id="ops-waiting"')[1].split("</section>")[0]
    assert '<strong id="ops-waiting-runs">2</strong> runs waiting' in waiting
    assert "42\xa0minutes" in waiting
    assert reverse("approvals:review", args=[first.pk]) in waiting
    assert f'href="/runs/{older.pk}/"' in waiting
    # Ops see the run, not a review page they may not open.
    waiting = ops_page(client, personas.ops).split('id="ops-waiting"')[1].split("</section>")[0]
    assert reverse("approvals:review", args=[first.pk]) not in waiting
    assert f'href="/runs/{older.pk}/"' in waiting


def test_recent_failures_are_listed_with_their_reasons(client, personas, agent, workspace):
    failed = a_run(
        personas,
        agent,
        workspace,
        status="failed",
        finished_at=timezone.now(),
        failure_reason="approval expired: nobody decided within 60 minutes",
        failure_kind="approval_expired",
    )
    page = ops_page(client, personas.ops)
    section = page.split('id="ops-failures"')[1].split("</section>")[0]
    assert f'<tr data-run="{failed.pk}">' in section
    assert f'href="/runs/{failed.pk}/"' in section
    assert "Approval expired" in section
    assert "nobody decided within 60 minutes" in section


def test_the_live_fragment_is_served_to_htmx_and_on_request(client, personas, agent, workspace):
    a_run(personas, agent, workspace)
    client.force_login(personas.ops)
    for response in (
        client.get(reverse("dashboards:ops"), HTTP_HX_REQUEST="true"),
        client.get(reverse("dashboards:ops"), {"fragment": "1"}),
    ):
        fragment = response.content.decode()
        assert response.status_code == 200
        assert "<html" not in fragment and 'id="ops-updated"' in fragment
        assert '<td data-status="created">1</td>' in fragment
    client.force_login(personas.operator)
    assert client.get(reverse("dashboards:ops"), {"fragment": "1"}).status_code == 403


# --- the ops socket --------------------------------------------------------------------------
OPS_SOCKET = "/ws/dashboards/ops/"


@EVERYWHERE
@pytest.mark.parametrize("who,code", [("operator", 4403), ("outsider", 4403), (None, 4401)])
def test_the_ops_socket_refuses_who_may_not_see_dashboards(client, personas, who, code):
    session = cookie(client, getattr(personas, who)) if who else None

    async def scenario():
        ws, connected, closed = await _connect(OPS_SOCKET, cookie=session)
        await ws.disconnect()  # the consumer ends in this event loop, with its layer calls
        return connected, closed

    assert async_to_sync(scenario)() == (False, code)


@EVERYWHERE
@pytest.mark.parametrize("who", ["ops", "admin", "approver"])
def test_a_status_change_reaches_the_ops_socket_as_a_notice(client, personas, run, who):
    from channels.db import database_sync_to_async

    from runs.events import run_event_append
    from runs.lifecycle import run_transition

    session = cookie(client, getattr(personas, who))

    async def scenario():
        ws, connected, _ = await _connect(OPS_SOCKET, cookie=session)
        assert connected
        early = await _receive_all(ws, timeout=1.0)  # the run's creation may be on its way
        assert all(json.loads(f) == {"type": "changed", "event": "run.created"} for f in early)
        await database_sync_to_async(run_event_append)(run_id=run.pk, type="note")
        quiet = await ws.receive_nothing(timeout=1.0)
        await database_sync_to_async(run_transition)(run_id=run.pk, to="planning")
        notice = json.loads(await ws.receive_from(timeout=10))
        await ws.disconnect()
        return quiet, notice

    quiet, notice = async_to_sync(scenario)()
    assert quiet  # an event that changes no figure says nothing
    assert notice == {"type": "changed", "event": "status.changed"}


@EVERYWHERE
def test_the_ops_socket_closes_for_a_user_who_lost_the_right(client, personas, run, monkeypatch):
    from channels.db import database_sync_to_async

    from runs.lifecycle import run_transition
    from runs.observability.dashboards.consumers import OpsDashboardConsumer

    monkeypatch.setattr(OpsDashboardConsumer, "recheck_seconds", 0.0)
    session = cookie(client, personas.ops)

    async def scenario():
        ws, connected, _ = await _connect(OPS_SOCKET, cookie=session)
        assert connected
        await database_sync_to_async(personas.ops.groups.clear)()
        await database_sync_to_async(run_transition)(run_id=run.pk, to="planning")
        frames = []
        while True:
            output = await ws.receive_output(timeout=10)
            if output["type"] == "websocket.close":
                await ws.disconnect()
                return frames, output
            frames.append(output)

    frames, closed = async_to_sync(scenario)()
    assert closed["code"] == 4403
    assert not any("status.changed" in f.get("text", "") for f in frames)


@EVERYWHERE
def test_logging_out_closes_the_ops_socket(client, personas):
    from channels.db import database_sync_to_async

    session = cookie(client, personas.ops)

    async def scenario():
        ws, connected, _ = await _connect(OPS_SOCKET, cookie=session)
        assert connected
        await database_sync_to_async(client.logout)()
        closed = await ws.receive_output(timeout=10)
        await ws.disconnect()
        return closed

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}
