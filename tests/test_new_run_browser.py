"""The run pages in Chromium (issue 19): the request box shows its limit as you type,
counted as the server counts it; the answer reads as Markdown and nothing in it runs."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import EVERYWHERE
from tests.helpers import console_errors, login

pytestmark = [EVERYWHERE, pytest.mark.browser]


def test_the_request_box_counts_what_is_typed_against_its_limit(
    live_stack, page: Page, client, personas
):
    errors = console_errors(page)
    login(page, live_stack, client, personas.operator)
    page.goto(f"{live_stack.url}/runs/new/")
    count = page.locator("#request-count")
    expect(count).to_have_text("0 of 20,000 characters")
    page.fill("#run-form textarea[name=request]", "Fix the link 🙂")
    expect(count).to_have_text("14 of 20,000 characters")  # the emoji is one character
    page.fill("#run-form textarea[name=request]", "x" * 19_500)
    expect(count).to_have_text("19,500 of 20,000 characters")
    expect(count).to_have_class("muted error")
    assert errors == []


@pytest.mark.usefixtures("seeded", "api_key")
def test_the_answer_reads_as_markdown_with_its_source_a_click_away(
    live_stack, page: Page, client, personas, agent, workspace
):
    from tests.stack import off_loop
    from tests.test_cancelled_shown import MALICIOUS_ANSWER, finished_runs

    run = off_loop(finished_runs, personas=personas, agent=agent, workspace=workspace)["completed"]
    off_loop(
        lambda: run.model_calls.create(turn=1, model="claude-sonnet-4-6", text=MALICIOUS_ANSWER)
    )
    errors = console_errors(page)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    login(page, live_stack, client, personas.operator)
    page.goto(f"{live_stack.url}/runs/{run.pk}/")
    rendered = page.locator("#run-answer-rendered")
    expect(rendered.locator("h1")).to_have_text("Findings")
    expect(rendered.locator("table td").first).to_have_text("docs/guide.md")
    expect(rendered.locator("a[href^='javascript']")).to_have_count(0)
    expect(rendered.locator("img, script")).to_have_count(0)
    source = page.locator("#run-answer-source pre")
    expect(source).to_be_hidden()
    page.get_by_text("Source", exact=True).click()
    expect(source).to_contain_text("<script>alert(1)</script>")
    assert dialogs == [] and errors == []


@pytest.mark.usefixtures("seeded", "docs")
def test_a_page_signed_out_in_another_tab_says_so_and_disables_its_actions(
    live_stack, page: Page, client, personas, agent, workspace
):
    from runs.models import Run
    from tests.stack import off_loop, wait_until
    from tests.test_approvals_browser import submit

    run = submit(personas, agent, workspace)
    wait_until(
        lambda: off_loop(lambda: Run.objects.get(pk=run.pk).status) == "waiting_for_approval",
        timeout=30,
        what="the run to wait",
    )
    login(page, live_stack, client, personas.operator)
    page.goto(f"{live_stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-live-status")).to_have_text("live", timeout=10_000)
    cancel = page.locator("#run-cancel")
    expect(cancel).to_be_enabled()
    other = page.context.new_page()  # the same browser, another tab: signs out
    other.goto(f"{live_stack.url}/runs/")
    other.get_by_role("button", name="Log out").click()
    expect(page.locator("#signed-out")).to_contain_text("You are signed out", timeout=10_000)
    expect(cancel).to_be_disabled()
    assert off_loop(lambda: Run.objects.get(pk=run.pk).status) == "waiting_for_approval"
