"""Policies reviewed like code, in Chromium on a real daphne (issue 18 point 5): a wording
edit previewed and saved keeps the version, and a request a real run is waiting on under
that version stays valid and is approved; a policy that needs a second admin takes an
edit only when another admin approves it from the approval queue, where it arrives
live. Two revisions compare, and the older one is restored as a new revision."""

from __future__ import annotations

import pytest
from django.test import Client
from playwright.sync_api import Page, expect

from approvals.fingerprint import changes_since_asked
from approvals.models import ApprovalRequest
from policies.models import Agent, Policy, PolicyRule
from runs.models import Run, ToolCall
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.fake_anthropic import message
from tests.helpers import login
from tests.stack import off_loop, wait_until

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


def drafting_run(stack, personas, agent: Agent, workspace) -> ApprovalRequest:
    """A run in the live worker whose model drafts docs/guide.md, which the policy's
    ``drafts`` rule asks about: the pending request it waits on, bound to the policy's
    version."""
    stack.fake_anthropic.answers += [
        message(
            [
                {
                    "type": "tool_use",
                    "id": "toolu_wording_draft",
                    "name": "createDraft",
                    "input": {"path": "docs/guide.md", "content": "# Guide\n\nReworded.\n"},
                }
            ],
            stop_reason="tool_use",
        ),
        message([{"type": "text", "text": "Drafted."}]),
    ]
    run = off_loop(
        run_create,
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Update docs/guide.md to reword one of its lines",
    )

    def asked() -> ApprovalRequest | None:
        return ApprovalRequest.objects.filter(run=run, status="pending").first()

    wait_until(lambda: off_loop(asked) is not None, timeout=30, what="the draft's request")
    return off_loop(asked)


@pytest.mark.usefixtures("seeded", "api_key")  # the worker has its own, for the fake model
def test_a_wording_edit_is_previewed_and_saved_without_invalidating_a_waiting_request(
    live_stack, page: Page, client, personas, agent, workspace, docs
):
    (docs / "guide.md").write_text("# Guide\n")
    policy = off_loop(make_policy, name="wording", guarded=False)
    off_loop(  # the run's commit is asked too, so the run ends its drive waiting
        PolicyRule.objects.create,
        policy=policy,
        order=20,
        key="commits",
        tool="commitDraft",
        decision="ask",
        reason="a person commits",
    )
    off_loop(lambda: Agent.objects.filter(pk=agent.pk).update(policy=policy))
    asked = drafting_run(live_stack, personas, agent, workspace)
    assert (asked.tool, asked.rule, asked.policy_version) == ("createDraft", "drafts", 1)

    login(page, live_stack, client, personas.admin)
    open_policy(page, live_stack, policy)
    page.fill("#id_rules-0-reason", "a person reads every draft")
    page.click("input[name=_simulate]")
    expect(page.locator("#simulation-pending")).to_contain_text(
        "This edit changes no decision: saving keeps version 1, so none of the 1 pending "
        "request bound to it is invalidated."
    )
    page.go_back()
    expect(page.locator("#id_rules-0-reason")).to_have_value("a person reads every draft")
    page.fill("#id_change_note", "clearer reason")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("stays at version 1")
    expect(page.locator(".field-history_link")).to_contain_text("1 revision")
    policy = off_loop(lambda: Policy.objects.get(pk=policy.pk))
    assert policy.version == 1
    assert off_loop(lambda: PolicyRule.objects.get(policy=policy, key="drafts").reason) == (
        "a person reads every draft"
    )

    # The request is as valid as before the save: pending, nothing changed since it was
    # asked, and its approver is offered the decision with no warning.
    fresh = off_loop(lambda: ApprovalRequest.objects.select_related("run__agent").get(pk=asked.pk))
    assert fresh.status == "pending"
    assert off_loop(changes_since_asked, approval=fresh) == []
    login(page, live_stack, client, personas.approver)
    page.goto(f"{live_stack.url}/approvals/{asked.pk}/")
    expect(page.locator("#decision-form")).to_be_visible()
    expect(page.locator("#review-changed")).to_have_count(0)
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("Approved")

    # The worker holds the approval against the version it was asked under, and it holds:
    # the draft is written, and the run goes on to ask about its commit.
    def commit_asked() -> bool:
        return ApprovalRequest.objects.filter(run_id=asked.run_id, kind="commit").exists()

    wait_until(lambda: off_loop(commit_asked), timeout=30, what="the run to ask to commit")
    assert off_loop(lambda: ApprovalRequest.objects.get(pk=asked.pk).status) == "approved"
    draft = off_loop(lambda: ToolCall.objects.get(run_id=asked.run_id, tool="createDraft").status)
    assert draft == "ok"
    assert not off_loop(
        lambda: ApprovalRequest.objects.filter(run_id=asked.run_id, status="invalidated").exists()
    )
    assert off_loop(lambda: Run.objects.get(pk=asked.run_id).status) == "waiting_for_approval"


def test_a_guarded_policy_changes_only_when_a_second_admin_approves(
    live_stack, page: Page, client, personas, admin_user
):
    policy = off_loop(make_policy, name="guarded", guarded=True)
    # The second admin watches the approval queue: the proposal arrives there live.
    second = page.context.browser.new_context()
    other = second.new_page()
    login(other, live_stack, Client(), personas.admin)
    other.goto(f"{live_stack.url}/approvals/")
    expect(other.locator("#approvals-live-status")).to_have_text("live")
    expect(other.locator("#policy-changes")).to_have_count(0)
    expect(other.locator("#nav-approvals-count")).to_have_text("0")

    login(page, live_stack, client, admin_user)
    open_policy(page, live_stack, policy)
    page.select_option("#id_rules-0-decision", "allow")
    page.fill("#id_change_note", "drafts need nobody")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("your edit is proposed, not applied")
    expect(page.locator("#policy-change-diff")).to_contain_text("→ allow — look")
    expect(page.locator("#policy-change-own")).to_be_visible()
    unchanged_yet(policy)

    row = other.locator("#policy-changes tr[data-policy-change]")
    expect(row).to_have_count(1)  # without a reload
    expect(row).to_contain_text("drafts need nobody")
    expect(other.locator("#nav-approvals-count")).to_have_text("1")
    row.get_by_role("link", name="guarded").click()
    expect(other.get_by_role("button", name="Approve: put it in force")).to_be_visible()
    unchanged_yet(policy)  # the second admin has it open: still nothing in force
    other.get_by_role("button", name="Approve: put it in force").click()
    expect(other.locator(".messagelist")).to_contain_text("approved: it is in force")
    second.close()
    rule = off_loop(lambda: PolicyRule.objects.get(policy=policy, key="drafts"))
    assert rule.decision == "allow"
    assert off_loop(lambda: Policy.objects.get(pk=policy.pk).version) == 2


def unchanged_yet(policy: Policy) -> None:
    """The proposal is not in force: the rule decides as before, the version is the same."""
    rule = off_loop(lambda: PolicyRule.objects.get(policy=policy, key="drafts"))
    assert (rule.decision, rule.reason) == ("ask", "look")
    assert off_loop(lambda: Policy.objects.get(pk=policy.pk).version) == 1


def test_two_revisions_are_compared_and_the_older_restored_in_the_browser(
    live_stack, page: Page, client, personas
):
    from policies.models import PolicyRevision
    from policies.policy_revisions import revision_record

    policy = off_loop(make_policy, name="revisions", guarded=False)
    first = off_loop(revision_record, policy=policy, author=personas.admin, note="created")
    login(page, live_stack, client, personas.admin)
    open_policy(page, live_stack, policy)
    page.select_option("#id_rules-0-decision", "allow")
    page.fill("#id_change_note", "drafts need nobody")
    page.click("input[name=_continue]")
    expect(page.locator(".field-history_link")).to_contain_text("2 revisions")
    second = off_loop(lambda: PolicyRevision.objects.get(policy=policy, number=2))
    assert (second.decision_version, second.note) == (2, "drafts need nobody")

    # Compare the edit with the revision before it.
    page.goto(f"{live_stack.url}/admin/policies/policyrevision/{second.pk}/change/")
    page.get_by_role("link", name="Compare with another revision").click()
    page.select_option("select[name=against]", str(first.pk))
    page.get_by_role("button", name="Compare").click()
    diff = page.locator("#revision-diff")
    expect(diff).to_contain_text("--- revision 1")
    expect(diff).to_contain_text("+++ revision 2")
    expect(diff).to_contain_text("-rule 10 drafts: createDraft (any path) → ask — look")
    expect(diff).to_contain_text("+rule 10 drafts: createDraft (any path) → allow — look")

    # Restore the first: shown against the policy as it is, then written as a new revision.
    page.goto(f"{live_stack.url}/admin/policies/policyrevision/{first.pk}/change/")
    page.get_by_role("link", name="Restore this revision…").click()
    expect(page.locator("#revision-diff")).to_contain_text(
        "+rule 10 drafts: createDraft (any path) → ask — look"
    )
    assert off_loop(lambda: PolicyRule.objects.get(policy=policy, key="drafts").decision) == (
        "allow"
    )  # nothing restored by looking
    page.get_by_role("button", name="Restore revision 1").click()
    expect(page.locator(".messagelist")).to_contain_text(
        "Revision 1 of revisions restored as revision 3 (decision version 3)."
    )
    assert off_loop(lambda: PolicyRule.objects.get(policy=policy, key="drafts").decision) == "ask"
    assert off_loop(lambda: Policy.objects.get(pk=policy.pk).version) == 3
    restored = off_loop(lambda: PolicyRevision.objects.get(policy=policy, number=3))
    assert (restored.restored_from_id, restored.author_id) == (first.pk, personas.admin.pk)
    assert restored.snapshot["rules"] == first.snapshot["rules"]
    assert off_loop(lambda: PolicyRevision.objects.filter(policy=policy).count()) == 3
