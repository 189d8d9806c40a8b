"""Review at hunk level in a real browser on a real daphne, the run in a real Celery worker
(issue 18 point 2, B7): the approver moves to the second hunk with j, rejects it with x and
approves with a; the commit writes the first hunk only, byte for byte, and the model's next
message names the hunk that was rejected."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Locator, Page, expect

from approvals.models import ApprovalRequest
from runs.models import Run
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.fake_anthropic import message
from tests.helpers import console_errors, login
from tests.stack import off_loop, wait_until
from tests.test_hunk_review import DRAFT, GUIDE, HUNK_2, PATH, changed, tool

pytestmark = [EVERYWHERE, pytest.mark.browser]


def button(page: Page, verb: str, hunk: int) -> Locator:
    """The Accept or Reject button on a hunk of the diff on screen (the inline view)."""
    return page.locator("#diff-inline").get_by_role(
        "button", name=f"{verb} hunk {hunk} of {PATH}", exact=True
    )


@pytest.mark.usefixtures("seeded", "api_key")  # the worker has its own, for the fake model
def test_a_hunk_rejected_by_key_is_not_committed_and_the_model_is_told(
    live_stack, page, client, personas, agent, workspace, docs
):
    guide = docs / "guide.md"
    guide.write_bytes(GUIDE.encode())
    model = live_stack.fake_anthropic
    model.answers += [
        message([tool("createDraft", 1, path=PATH, content=DRAFT)], stop_reason="tool_use"),
        message([tool("commitDraft", 2, path=PATH)], stop_reason="tool_use"),
        message([{"type": "text", "text": "Committed."}]),
    ]
    run = off_loop(
        run_create,
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Reword two lines of docs/guide.md",
    )

    def asked() -> ApprovalRequest | None:
        return ApprovalRequest.objects.filter(run=run, status="pending").first()

    wait_until(lambda: off_loop(asked) is not None, timeout=30, what="the commitDraft request")
    approval = off_loop(asked)
    login(page, live_stack, client, personas.approver)
    errors = console_errors(page)
    page.goto(f"{live_stack.url}/approvals/{approval.pk}/")
    expect(page.locator("#decision-form")).to_be_visible()
    page.wait_for_load_state()
    expect(page.locator(".shortcut-hint")).to_contain_text("j/k next/previous hunk, x reject")
    summary = page.locator("#hunk-summary")
    expect(summary).to_have_text("2 of 2 hunks accepted.")

    second = page.locator(f'#diff-inline tr.row-hunk[data-hunk="{PATH}:2"]')
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(second).to_have_class("row-hunk hunk-focus")
    page.keyboard.press("x")
    expect(second).to_have_class("row-hunk hunk-focus hunk-rejected")
    expect(button(page, "Reject", 2)).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_role("checkbox", name=f"reject hunk 2 of {PATH}")).to_be_checked()
    expect(summary).to_have_text("1 of 2 hunks accepted; the 1 rejected is left out.")
    # The button on the first hunk: rejecting it too would reject everything, which the
    # page refuses to send as an approval.
    button(page, "Reject", 1).click()
    page.keyboard.press("a")
    expect(summary).to_contain_text("Every hunk is rejected: that is a rejection")
    expect(page.locator("#comment")).to_be_focused()
    page.keyboard.press("Escape")
    button(page, "Accept", 1).click()
    expect(page.locator("#approve")).to_have_text("Approve without 1 hunk")

    page.keyboard.press("a")
    expect(page.locator(".message")).to_contain_text("without the 1 hunk you rejected")
    wait_until(
        lambda: off_loop(lambda: Run.objects.get(pk=run.pk).status) == "completed",
        timeout=30,
        what="the run to commit and finish",
    )
    assert guide.read_bytes() == changed(GUIDE, {2: "Line two, reworded."}).encode()
    told = json.dumps(model.requests[-1]["body"]["messages"][-1]["content"])
    assert HUNK_2 in told

    page.goto(f"{live_stack.url}/approvals/{approval.pk}/")
    expect(page.locator("#hunks-rejected")).to_contain_text(f"hunk 2 of {PATH}")
    expect(second).to_contain_text("rejected by april-approver")
    assert errors == []
