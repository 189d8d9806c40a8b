"""Full-text search of run requests (issue 19 point 3), on SQLite (FTS5, kept in sync by
triggers) and PostgreSQL (a GIN index over to_tsvector): every word must match, with every
other filter of the list and in the API; hostile queries are words or a clear 400, never a
500. The tests also stand guard over migration 0028's triggers: a later migration that
makes SQLite rebuild runs_run drops them, and the insert and update tests here fail."""

from __future__ import annotations

import pytest
from django.db import connection

from runs.models import Run
from runs.run_pages import PAGE_SIZE
from runs.run_search import search_words
from tests.conftest import EVERYWHERE
from tests.test_runs_list import URL, get, link, make_runs, refused_call, shown, total

pytestmark = EVERYWHERE


@pytest.fixture(autouse=True)
def any_request(api_key):
    """A model key in the environment, so a run may be created with any request."""


def test_the_words_of_a_query_are_all_it_keeps():
    assert search_words('fix "the" NEAR(link) *') == ["fix", "the", "near", "link"]
    assert search_words("Café 東京 ﬁx") == ["café", "東京", "ﬁx"]


def test_the_index_is_kept_by_triggers_on_sqlite(db):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite keeps its FTS5 index by triggers; PostgreSQL indexes the column")
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        names = {row[0] for row in cursor.fetchall()}
    assert {"runs_run_fts_insert", "runs_run_fts_update", "runs_run_fts_delete"} <= names


# --- the list's q --------------------------------------------------------------------------------
def test_search_finds_runs_by_the_words_of_their_request(client, personas, agent, workspace):
    (link_fix,) = make_runs(personas, agent, workspace, 1, request="Fix the broken link in docs")
    (summary,) = make_runs(personas, agent, workspace, 1, request="Summarize the release notes")
    make_runs(personas, agent, workspace, 1, request="Café crème für Ärzte 東京")
    client.force_login(personas.ops)
    assert shown(get(client, q="broken link")) == [str(link_fix.pk)]
    assert shown(get(client, q="LINK broken")) == [str(link_fix.pk)]  # any order, any case
    assert shown(get(client, q="summarized")) == [str(summary.pk)]  # stemmed
    assert shown(get(client, q="broken notes")) == []  # every word must match
    assert len(shown(get(client, q="crème"))) == 1
    page = get(client, q="broken link")
    assert 'name="q" id="run-search" value="broken link"' in page and total(page) == 1


def test_search_follows_a_changed_request(client, personas, agent, workspace):
    (run,) = make_runs(personas, agent, workspace, 1, request="Translate the changelog")
    client.force_login(personas.ops)
    Run.objects.filter(pk=run.pk).update(request="Rewrite the glossary")
    assert shown(get(client, q="changelog")) == []
    assert shown(get(client, q="glossary")) == [str(run.pk)]
    Run.objects.filter(pk=run.pk).update(status="completed")  # no change of words
    assert shown(get(client, q="glossary")) == [str(run.pk)]


def test_search_combines_with_every_other_filter(client, personas, agent, workspace):
    done = make_runs(personas, agent, workspace, 2, request="Publish the notes", status="completed")
    make_runs(personas, agent, workspace, 1, request="Publish the notes", status="failed")
    make_runs(personas, agent, workspace, 1, request="Other work", status="completed")
    refused_call(done[0], "publish")
    client.force_login(personas.ops)
    assert total(get(client, q="publish")) == 3
    assert sorted(shown(get(client, q="publish", status="completed"))) == sorted(
        str(r.pk) for r in done
    )
    assert shown(get(client, q="publish", status="completed", refused="1")) == [str(done[0].pk)]
    assert total(get(client, q="publish", agent="tester", requester="otto-operator")) == 3
    assert total(get(client, q="publish", tool="publish")) == 1  # a refused call is a call
    page = get(client, q="publish", status="completed")
    assert link(page, "next") is None


def test_search_pages_keep_the_query(client, personas, agent, workspace):
    make_runs(personas, agent, workspace, PAGE_SIZE + 2, request="Check the index")
    make_runs(personas, agent, workspace, 3, request="Something else")
    client.force_login(personas.ops)
    first = get(client, q="index")
    older = link(first, "next")
    assert older["q"] == "index" and total(first) == PAGE_SIZE + 2
    assert len(shown(get(client, **older))) == 2


HOSTILE = [
    '"',
    '""',
    "'",
    "*",
    "fix*",
    "NEAR",
    "NEAR(fix link)",
    "fix NEAR/2 link",
    "fix AND link",
    "fix OR",
    "NOT fix",
    "request: fix",
    "^fix",
    "fix -link",
    "(fix",
    "fix)",
    "{fix}",
    "fix & link | !docs",
    "fix <-> link",
    "fix:*",
    "\\",
    "%",
    "_",
    "fix_link",
    "😀 fix",
    "ﬁx",
    "\u200b",
    "x" * 499,
    "fix " * 20,
    "a1 2b ³",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_a_hostile_search_is_never_a_500(client, personas, agent, workspace, query):
    make_runs(personas, agent, workspace, 1, request="Fix the broken link (NEAR the top)")
    client.force_login(personas.ops)
    response = client.get(URL, {"q": query, "status": "created"})
    assert response.status_code in (200, 400), response.content[:400]
    if response.status_code == 400:
        assert 'id="run-list-error"' in response.content.decode()


@pytest.mark.parametrize(
    "query,message",
    [
        ("***", "q has no words to search for"),
        ("x" * 501, "q is too long"),
        ("w " * 21, "search for 20 at most"),
    ],
)
def test_a_search_with_nothing_to_look_for_says_why(client, personas, query, message):
    client.force_login(personas.ops)
    assert message in get(client, expect=400, q=query)


def test_the_api_searches_with_the_same_q(client, personas, agent, workspace):
    (run,) = make_runs(personas, agent, workspace, 1, request="Archive the old FAQ")
    make_runs(personas, agent, workspace, 1, request="Something else")
    client.force_login(personas.ops)
    answer = client.get("/api/runs/", {"q": "archive faq"})
    assert answer.status_code == 200, answer.content[:400]
    body = answer.json()
    rows = body["results"] if isinstance(body, dict) else body
    assert [r["id"] for r in rows] == [str(run.pk)]
    bad = client.get("/api/runs/", {"q": '"*"'})
    assert bad.status_code == 400 and "q" in bad.json()


def test_a_search_counts_to_a_lower_cap(client, personas, agent, workspace, monkeypatch):
    """A common word matches most runs, each a text search to count: a search's total
    stops sooner than the list's (no chart links to a search)."""
    monkeypatch.setattr("runs.views.SEARCH_COUNT_CAP", 2)
    make_runs(personas, agent, workspace, 3, request="Check the index")
    client.force_login(personas.ops)
    searched = get(client, q="index")
    assert "At least 2 runs" in searched and len(shown(searched)) == 3
    assert total(get(client)) == 3  # unsearched, the same runs are counted exactly
