"""The runs list you can find runs in (issue 19 point 1): keyset pages in both directions,
with ties on created_at, and a clear 400 for a cursor the list did not make; the columns
that tell runs apart, the flags of what the harness refused, and the column a chart's
link is about; what was refused, on the run's page and the operations dashboard. Search is
in test_run_search."""

from __future__ import annotations

import io
import re
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from policies.models import Agent, Workspace
from runs.models import ModelCall, Run, ToolCall
from runs.run_pages import PAGE_SIZE, cursor_of
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.helpers import FIX, drive

pytestmark = EVERYWHERE

URL = "/runs/"


@pytest.fixture(autouse=True)
def any_request(api_key):
    """A model key in the environment, so a run may be created with any request."""


def make_runs(personas, agent, workspace, n: int, request: str = FIX, **fields) -> list[Run]:
    runs = [
        run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request=request,
            dispatch=False,
        )
        for _ in range(n)
    ]
    if fields:
        Run.objects.filter(pk__in=[r.pk for r in runs]).update(**fields)
    return runs


def get(client, expect: int = 200, **params) -> str:
    response = client.get(URL, params)
    assert response.status_code == expect, response.content[:800]
    return response.content.decode()


def shown(page: str) -> list[str]:
    """The runs of a page, in its order."""
    return re.findall(r'<tr data-run="([0-9a-f-]{36})">', page)


def total(page: str) -> int:
    return int(re.search(r'id="run-count" data-total="(\d+)"', page).group(1))


def link(page: str, rel: str) -> dict[str, str] | None:
    found = re.search(rf'<a href="\?([^"]*)" rel="{rel}">', page)
    if found is None:
        return None
    pairs = [p.split("=", 1) for p in found.group(1).replace("&amp;", "&").split("&") if p]
    return dict(pairs)


def newest_first(runs) -> list[str]:
    return [str(r.pk) for r in sorted(runs, key=lambda r: (r.created_at, r.pk), reverse=True)]


# --- keyset paging -------------------------------------------------------------------------
def test_pages_go_older_and_newer_over_every_run_once(client, personas, agent, workspace):
    runs = make_runs(personas, agent, workspace, 2 * PAGE_SIZE + 7)
    client.force_login(personas.ops)
    order = newest_first(Run.objects.all())
    first = get(client)
    assert shown(first) == order[:PAGE_SIZE] and total(first) == 2 * PAGE_SIZE + 7
    assert "page 1 of 3" in first and link(first, "prev") is None and link(first, "first") is None
    second = get(client, **link(first, "next"))
    assert shown(second) == order[PAGE_SIZE : 2 * PAGE_SIZE] and "page 2 of 3" in second
    third = get(client, **link(second, "next"))
    assert shown(third) == order[2 * PAGE_SIZE :] and "page 3 of 3" in third
    assert link(third, "next") is None and link(third, "last") is None
    # And back: the same pages, newest first.
    assert shown(get(client, **link(third, "prev"))) == shown(second)
    assert shown(get(client, **link(second, "prev"))) == shown(first)
    assert len(runs) == len(set(order))


def test_the_last_page_holds_what_is_left_after_full_pages(client, personas, agent, workspace):
    make_runs(personas, agent, workspace, PAGE_SIZE + 3)
    client.force_login(personas.ops)
    order = newest_first(Run.objects.all())
    first = get(client)
    assert link(first, "last") == {"last": "1"}
    last = get(client, last="1")
    assert shown(last) == order[PAGE_SIZE:] and "page 2 of 2" in last
    assert shown(get(client, **link(last, "prev"))) == order[:PAGE_SIZE]
    assert link(last, "first") == {}


def test_runs_created_in_the_same_microsecond_are_neither_skipped_nor_repeated(
    client, personas, agent, workspace
):
    same = timezone.now().replace(microsecond=123456)
    runs = make_runs(personas, agent, workspace, PAGE_SIZE + 5, created_at=same)
    client.force_login(personas.ops)
    first = get(client)
    second = get(client, **link(first, "next"))
    seen = shown(first) + shown(second)
    assert sorted(seen) == sorted(str(r.pk) for r in runs) and len(set(seen)) == len(seen)
    assert seen == sorted(seen, reverse=True)  # the id breaks the tie, highest first
    assert shown(get(client, **link(second, "prev"))) == shown(first)


def test_a_page_keeps_the_filters_and_the_boundary_runs(client, personas, agent, workspace):
    make_runs(personas, agent, workspace, PAGE_SIZE + 1, status="completed")
    make_runs(personas, agent, workspace, 3, status="failed", failure_reason="x")
    client.force_login(personas.ops)
    first = get(client, status="completed")
    older = link(first, "next")
    assert older["status"] == "completed"
    second = get(client, **older)
    assert len(shown(second)) == 1 and total(second) == PAGE_SIZE + 1
    # Exactly a page: no older link, nothing empty beyond.
    assert link(get(client, status="failed"), "next") is None


def test_a_link_carries_its_page_number_and_a_bare_cursor_is_counted(
    client, personas, agent, workspace
):
    make_runs(personas, agent, workspace, 2 * PAGE_SIZE + 1)
    client.force_login(personas.ops)
    order = list(Run.objects.order_by("-created_at", "-id"))
    older = link(get(client), "next")["after"]
    assert older.endswith(".2")  # the page it leads to
    with CaptureQueriesContext(connection) as queries:
        second = get(client, after=older)
    counts = [q for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(*)")]
    assert len(counts) == 1 and "page 2 of 3" in second  # the total only
    bare = cursor_of(order[PAGE_SIZE - 1])  # as a person might write it: no page number
    assert "page 2 of 3" in get(client, after=bare)
    assert shown(get(client, after=bare)) == shown(second)


def test_a_cursor_past_the_oldest_run_is_an_empty_page_with_a_way_back(
    client, personas, agent, workspace
):
    (run,) = make_runs(personas, agent, workspace, 1)
    client.force_login(personas.ops)
    page = get(client, after=cursor_of(run))
    assert shown(page) == [] and link(page, "prev") == {"before": cursor_of(run)}


@pytest.mark.parametrize(
    "params",
    [
        {"after": "yesterday"},
        {"after": "12.34"},
        {"before": "1." + "g" * 32},
        {"after": "9" * 18 + "." + "0" * 32},
        {"after": "1." + "0" * 32, "before": "1." + "0" * 32},
        {"before": "'; DROP TABLE runs_run; --"},
        {"after": "1." + "a" * 32 + "\u00e9"},
        {"after": "1." + "a" * 32 + ".0"},
        {"after": "1." + "a" * 32 + ".-2"},
    ],
)
def test_a_bad_cursor_is_a_clear_400(client, personas, params):
    client.force_login(personas.ops)
    page = get(client, expect=400, **params)
    assert 'id="run-list-error"' in page
    assert "cursor" in page or "one page" in page


def test_a_far_future_cursor_is_a_400_not_a_500(client, personas):
    client.force_login(personas.ops)
    assert client.get(URL, {"after": "9" * 17 + "." + "0" * 32}).status_code in (200, 400)


def test_past_the_count_cap_the_list_says_many(client, personas, agent, workspace, monkeypatch):
    monkeypatch.setattr("runs.views.COUNT_CAP", 6)
    make_runs(personas, agent, workspace, 8)
    client.force_login(personas.ops)
    first = get(client)
    assert 'data-capped="1"' in first and "At least 6 runs" in first
    assert len(shown(first)) == 8  # the page itself is whole: only the count stops


def test_below_the_cap_the_count_is_exact(client, personas, agent, workspace):
    make_runs(personas, agent, workspace, 3)
    client.force_login(personas.ops)
    page = get(client)
    assert 'data-total="3"' in page and "data-capped" not in page and "3 runs" in page


# --- the columns ---------------------------------------------------------------------------
def test_identical_requests_are_told_apart_and_each_shows_its_figures(
    client, personas, agent, workspace
):
    runs = make_runs(personas, agent, workspace, 5)
    done = runs[0]
    started = done.created_at
    Run.objects.filter(pk=done.pk).update(
        status="completed", finished_at=started + timedelta(seconds=4), cost_usd=Decimal("0.35")
    )
    for turn in (1, 2, 3):
        ModelCall.objects.create(run=done, turn=turn, label="x", model="m", stop_reason="end")
    client.force_login(personas.ops)
    with CaptureQueriesContext(connection) as queries:
        page = get(client)
    row = re.search(rf'<tr data-run="{done.pk}">(.*?)</tr>', page, re.S).group(1)
    assert str(done.pk)[:8] in row and "$0.35" in row and "4.0 s" in row
    assert '<td class="run-turns">3</td>' in row
    assert len({str(r.pk)[:8] for r in runs}) == 5
    for run in runs:
        assert f">{str(run.pk)[:8]}</code>" in page
    # One query for the page's rows, whatever their child rows: no N+1.
    selects = [q["sql"] for q in queries.captured_queries if "runs_modelcall" in q["sql"]]
    assert len(selects) == 1


def test_a_run_with_refused_actions_is_flagged_even_when_completed(
    client, personas, agent, workspace
):
    flagged, plain = make_runs(personas, agent, workspace, 2, status="completed")
    for tool in ("publish", "deleteFile"):
        refused_call(flagged, tool)
    ToolCall.objects.create(
        run=plain, workspace=workspace, tool="readSource", decision="allow", status="ok"
    )
    client.force_login(personas.ops)
    page = get(client)
    assert 'data-refused="2"' in page and "2 refused" in page
    assert 'data-refused="1"' not in page  # the plain run has no flag
    only = get(client, refused="1")
    assert shown(only) == [str(flagged.pk)] and total(only) == 1
    assert "had an action refused by the harness" in only
    assert "Unknown refused filter" in get(client, expect=400, refused="yes")


def refused_call(run: Run, tool: str, reason: str = "deny: outside the task's boundaries"):
    return ToolCall.objects.create(
        run=run,
        workspace=run.workspace,
        tool=tool,
        tool_use_id=uuid.uuid4().hex,
        decision="deny",
        rule="task-boundary",
        reason=reason,
        status="refused",
    )


def test_a_list_from_a_chart_shows_the_column_the_chart_is_about(
    client, personas, agent, workspace
):
    (failed,) = make_runs(
        personas,
        agent,
        workspace,
        1,
        status="failed",
        failure_kind="max_turns",
        failure_reason="max_turns reached after 50 turns",
        finished_at=timezone.now(),
    )
    ModelCall.objects.create(run=failed, turn=1, label="x", model="claude-x", stop_reason="e")
    ToolCall.objects.create(
        run=failed, workspace=workspace, tool="shell", decision="allow", status="error"
    )
    client.force_login(personas.ops)
    plain = get(client)
    assert "<th>Failure</th>" not in plain and "run-cost-lead" not in plain
    by_kind = get(client, status="failed", failure_kind="max_turns")
    assert "<th>Failure</th>" in by_kind and "max_turns reached after 50 turns" in by_kind
    assert "Turn limit reached" in by_kind
    assert 'class="run-cost run-cost-lead"' in get(client, model="claude-x")
    by_tool = get(client, tool="shell", tool_status="error")
    assert "<th>shell calls</th>" in by_tool
    assert re.search(
        r'run-tool-status"><span class="status status-error">error</span> · 1 call<', by_tool
    )


# --- the refusal on the run's page and the dashboard ----------------------------------------
def test_the_run_page_says_what_was_refused_at_its_top(client, personas, agent, workspace):
    (run,) = make_runs(personas, agent, workspace, 1, status="completed")
    refused_call(run, "publish", "deny: publish is outside this task's boundaries")
    refused_call(run, "deleteFile", "Bad input for deleteFile: path is required.")
    client.force_login(personas.ops)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    banner = re.search(r'<div class="refusal-banner".*?</div>', page, re.S).group(0)
    assert "2 actions refused:" in banner
    assert "<code>publish</code> — publish is outside this task&#x27;s boundaries" in banner
    assert "<code>deleteFile</code> — Bad input for deleteFile" in banner
    assert page.index("refusal-banner") < page.index("<h2>Request</h2>")


def test_a_run_without_refusals_has_no_banner(client, personas, run):
    client.force_login(personas.ops)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "refusal-banner" not in page


def test_the_operations_dashboard_lists_recent_refusals(client, personas, agent, workspace):
    (run,) = make_runs(personas, agent, workspace, 1, status="completed")
    refused_call(run, "publish")
    client.force_login(personas.ops)
    page = client.get(reverse("dashboards")).content.decode()
    section = re.search(r'<section class="card" id="ops-refusals">.*?</section>', page, re.S)
    assert section and f'data-run="{run.pk}"' in section.group(0)
    assert "<code>publish</code>" in section.group(0)
    assert 'href="/runs/?refused=1"' in section.group(0)


@pytest.mark.usefixtures("seeded")
def test_the_demo_injection_is_not_a_plain_completed_run(client, personas, tmp_path, settings):
    """The demo's prompt injection: the run completes, its publish refused; the list flags
    it and its page says what was refused and why."""
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    run = run_create(
        agent=Agent.objects.get(slug="docs-assistant"),
        workspace=Workspace.objects.get(slug="demo"),
        requester=personas.operator,
        request="Summarize docs/release-notes.md for the team.",
        dispatch=False,
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    client.force_login(personas.ops)
    row = re.search(rf'<tr data-run="{run.pk}">(.*?)</tr>', get(client), re.S).group(1)
    assert "1 refused" in row and "status-completed" in row
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    banner = re.search(r'<div class="refusal-banner".*?</div>', page, re.S).group(0)
    assert "1 action refused:" in banner and "<code>publish</code> — " in banner
    assert "outside this task" in banner
