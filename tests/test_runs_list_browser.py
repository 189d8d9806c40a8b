"""The runs list and a run's refusals in Chromium on the live stack (issue 19 point 1): a
person searches the list, pages older and back newer with the search kept, and reads on a
run's page what the harness refused."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from runs.run_pages import PAGE_SIZE
from tests.conftest import EVERYWHERE
from tests.helpers import console_errors, login
from tests.stack import off_loop
from tests.test_runs_list import make_runs, refused_call

pytestmark = [EVERYWHERE, pytest.mark.browser, pytest.mark.usefixtures("api_key")]


def test_a_search_pages_through_its_runs_and_back(
    live_stack, page: Page, client, personas, agent, workspace
):
    # Finished runs: the live stack's sweeper leaves them alone (a created run it would
    # send again, holding its row while the test's flush truncates the table).
    mine = {"personas": personas, "agent": agent, "workspace": workspace, "status": "completed"}
    off_loop(make_runs, **mine, n=PAGE_SIZE + 5, request="Check the index")
    off_loop(make_runs, **mine, n=3, request="Something else entirely")
    errors = console_errors(page)
    login(page, live_stack, client, personas.ops)
    page.goto(f"{live_stack.url}/runs/")
    expect(page.locator("#run-count")).to_have_attribute("data-total", str(PAGE_SIZE + 8))
    page.fill("#run-search", "index")
    page.press("#run-search", "Enter")
    count = page.locator("#run-count")
    expect(count).to_have_attribute("data-total", str(PAGE_SIZE + 5))
    expect(page).to_have_url(re.compile(r"[?&]q=index"))
    rows = page.locator("#run-table tbody tr[data-run]")
    expect(rows).to_have_count(PAGE_SIZE)
    expect(page.locator("#run-page-number")).to_have_text("page 1 of 2")
    page.get_by_role("link", name="older →").click()
    expect(rows).to_have_count(5)
    expect(page.locator("#run-page-number")).to_have_text("page 2 of 2")
    expect(page.locator("#run-search")).to_have_value("index")
    expect(page.locator("#run-table")).not_to_contain_text("Something else")
    page.get_by_role("link", name="← newer").click()
    expect(rows).to_have_count(PAGE_SIZE)
    expect(page.locator("#run-page-number")).to_have_text("page 1 of 2")
    assert errors == []


def test_a_search_is_sent_once_and_a_filter_once(
    live_stack, page: Page, client, personas, agent, workspace
):
    # Enter sent the search twice (the box's change, then the form's submit), and the
    # second answer's new address cancelled a page opened meanwhile. The box is left
    # before the next filter, and each request is counted up to the one that filter
    # sends, so a late one is among them whatever the timing.
    mine = {"personas": personas, "agent": agent, "workspace": workspace, "status": "completed"}
    off_loop(make_runs, **mine, n=2, request="Check the index")
    login(page, live_stack, client, personas.ops)
    page.goto(f"{live_stack.url}/runs/")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if "/runs/?" in r.url else None)
    page.fill("#run-search", "index")
    page.press("#run-search", "Enter")
    expect(page).to_have_url(re.compile(r"[?&]q=index"))
    page.locator("h1").click()  # the box loses focus
    page.select_option("select[name=status]", "failed")
    expect(page).to_have_url(re.compile(r"[?&]status=failed"))
    expect(page.locator("#run-count")).to_have_attribute("data-total", "0")
    assert [("q=index" in u, "status=failed" in u) for u in sent] == [(True, False), (True, True)]


def test_the_run_page_says_at_its_top_what_was_refused(
    live_stack, page: Page, client, personas, agent, workspace
):
    mine = {"personas": personas, "agent": agent, "workspace": workspace}
    (run,) = off_loop(make_runs, **mine, n=1, status="completed")
    reason = "deny: publish is outside this task's boundaries"
    off_loop(refused_call, run=run, tool="publish", reason=reason)
    errors = console_errors(page)
    login(page, live_stack, client, personas.ops)
    page.goto(f"{live_stack.url}/runs/")
    expect(page.locator(f'tr[data-run="{run.pk}"] .run-refused')).to_have_text("1 refused")
    page.locator(f'tr[data-run="{run.pk}"] .run-id').click()
    banner = page.locator("#run-refusals")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("1 action refused: publish — publish is outside this task")
    assert errors == []
