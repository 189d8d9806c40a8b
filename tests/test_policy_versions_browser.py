"""Policies reviewed like code, in Chromium on a real daphne (issue 18 point 5): a wording
edit previewed and saved keeps the version; a policy that needs a second admin takes an
edit only when another admin approves it from the approval queue."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from policies.models import Policy, PolicyRule
from tests.conftest import EVERYWHERE
from tests.helpers import login
from tests.stack import off_loop

pytestmark = [EVERYWHERE, pytest.mark.browser]


def make_policy(name: str, guarded: bool) -> Policy:
    policy = Policy.objects.create(name=name, ceiling="L3", changes_need_second_admin=guarded)
    PolicyRule.objects.create(
        policy=policy, order=10, key="drafts", tool="createDraft", decision="ask", reason="look"
    )
    return policy


def open_policy(page: Page, stack, policy: Policy) -> None:
    page.goto(f"{stack.url}/admin/policies/policy/{policy.pk}/change/")
    expect(page.locator("#id_rules-0-reason")).to_have_value("look")


def test_a_wording_edit_is_previewed_and_saved_without_a_new_version(
    live_stack, page: Page, client, personas
):
    policy = off_loop(make_policy, name="wording", guarded=False)
    login(page, live_stack, client, personas.admin)
    open_policy(page, live_stack, policy)
    page.fill("#id_rules-0-reason", "a person reads every draft")
    page.click("input[name=_simulate]")
    expect(page.locator("#simulation-pending")).to_contain_text(
        "This edit changes no decision: saving keeps version 1"
    )
    page.go_back()
    expect(page.locator("#id_rules-0-reason")).to_have_value("a person reads every draft")
    page.fill("#id_change_note", "clearer reason")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("stays at version 1")
    expect(page.locator(".field-history_link")).to_contain_text("1 revision")
    policy = off_loop(lambda: Policy.objects.get(pk=policy.pk))
    assert policy.version == 1


def test_a_guarded_policy_changes_only_when_a_second_admin_approves(
    live_stack, page: Page, client, personas, admin_user
):
    policy = off_loop(make_policy, name="guarded", guarded=True)
    login(page, live_stack, client, admin_user)
    open_policy(page, live_stack, policy)
    page.select_option("#id_rules-0-decision", "allow")
    page.fill("#id_change_note", "drafts need nobody")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("your edit is proposed, not applied")
    expect(page.locator("#policy-change-diff")).to_contain_text("→ allow — look")
    expect(page.locator("#policy-change-own")).to_be_visible()

    second = page.context.browser.new_context()
    other = second.new_page()
    login(other, live_stack, client, personas.admin)
    other.goto(f"{live_stack.url}/approvals/")
    row = other.locator("#policy-changes tr[data-policy-change]")
    expect(row).to_have_count(1)
    row.get_by_role("link", name="guarded").click()
    other.get_by_role("button", name="Approve: put it in force").click()
    expect(other.locator(".messagelist")).to_contain_text("approved: it is in force")
    second.close()
    rule = off_loop(lambda: PolicyRule.objects.get(policy=policy, key="drafts"))
    assert rule.decision == "allow"
    assert off_loop(lambda: Policy.objects.get(pk=policy.pk).version) == 2
