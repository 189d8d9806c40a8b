"""The runs list you can find runs in (issue 19 point 1): keyset pages in both directions,
with ties on created_at, and a clear 400 for a cursor the list did not make."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from runs.models import Run
from runs.run_pages import PAGE_SIZE, cursor_of
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.helpers import FIX

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
    monkeypatch.setattr("runs.run_pages.COUNT_CAP", 6)
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
