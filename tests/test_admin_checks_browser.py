"""The admin's checks in Chromium (issue 19, point 5): a signed-in user of another role who
opens an admin page gets the console's "Not allowed" page, not Django's admin login; an
admin who types a model name nobody prices is told so under the field, with the nearest
priced names, and nothing is saved; the model box offers the priced names as a datalist."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from policies.models import Agent
from tests.conftest import EVERYWHERE
from tests.helpers import login

pytestmark = [EVERYWHERE, pytest.mark.browser]

ADMIN_PAGES = ("/admin/", "/admin/policies/agent/", "/admin/runs/modelprice/")


@pytest.mark.parametrize("who", ["approver", "operator", "ops", "outsider"])
def test_a_signed_in_non_admin_gets_the_console_s_403_page_not_the_admin_login(
    live_stack, page: Page, client, personas, who
):
    login(page, live_stack, client, getattr(personas, who))
    for path in ADMIN_PAGES:
        response = page.goto(f"{live_stack.url}{path}")
        assert response is not None and response.status == 403, path
        expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
        expect(page.locator("main")).to_contain_text("The admin pages are for the admin role")
        expect(page.locator("input[type=password]")).to_have_count(0)  # no login form
        expect(page.get_by_role("link", name="Back to your start page")).to_be_visible()
    page.context.clear_cookies()  # signed out: the admin's own login form, as ever
    page.goto(f"{live_stack.url}/admin/")
    expect(page.locator("input[type=password]")).to_have_count(1)


@pytest.mark.usefixtures("seeded")
def test_a_typo_in_an_agent_s_model_is_refused_with_the_nearest_priced_names(
    live_stack, page: Page, client, personas, agent
):
    assert agent.model == "claude-sonnet-4-6"
    login(page, live_stack, client, personas.admin)
    page.goto(f"{live_stack.url}/admin/policies/agent/{agent.pk}/change/")
    box = page.locator("#id_model")
    offered = box.evaluate("(input) => Array.from(input.list.options).map((o) => o.value)")
    assert {"claude-sonnet-4", "claude-sonnet-4-6", "claude-haiku-4-5"} <= set(offered)

    box.fill("claude-sonet-4-6")
    page.locator("input[name=_save]").click()
    error = page.locator(".field-model .errorlist")
    expect(error).to_contain_text("No price in the price table matches 'claude-sonet-4-6'")
    expect(error).to_contain_text("Did you mean claude-sonnet-4-6, claude-sonnet-4")
    expect(error).to_contain_text("checked against the price table only")
    expect(page.locator("#id_model")).to_have_value("claude-sonet-4-6")  # kept to correct
    agent.refresh_from_db()
    assert agent.model == "claude-sonnet-4-6"  # nothing saved

    page.locator("#id_model").fill("claude-haiku-4-5")
    page.locator("input[name=_save]").click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert Agent.objects.get(pk=agent.pk).model == "claude-haiku-4-5"
