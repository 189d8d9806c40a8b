"""Two runs on one file, decided in a real browser on a real daphne, the runs in a real
Celery worker (issue 18 point 1): the first is approved and committed; the second, edited
and approved by its approver on the page, is rebased with the edit and asked again, and
once approved commits once, with the exact bytes of both changes and the edit. A second
change that does not merge goes back to the model, and the run page says so; after the
other run is rolled back, the request is current again."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from approvals.models import ApprovalRequest
from runs.models import Run, ToolCall
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.fake_anthropic import message
from tests.helpers import login
from tests.stack import off_loop, wait_until
from tests.test_rebase import GUIDE, changed

pytestmark = [EVERYWHERE, pytest.mark.browser]

REQUEST = "Update docs/guide.md to reword one of its lines"


def waiting(live_stack, personas, agent, workspace, text: str, n: int) -> ApprovalRequest:
    """A run whose model drafts docs/guide.md as ``text``, submitted to the live worker and
    left waiting for its commit's approval (one run at a time: the fake model's answers
    are taken in order)."""
    live_stack.fake_anthropic.answers += [
        message(
            [
                {
                    "type": "tool_use",
                    "id": f"toolu_guide_{n}",
                    "name": "createDraft",
                    "input": {"path": "docs/guide.md", "content": text},
                }
            ],
            stop_reason="tool_use",
        ),
        message([{"type": "text", "text": "Drafted."}]),
    ]
    run = off_loop(
        run_create, agent=agent, workspace=workspace, requester=personas.operator, request=REQUEST
    )
    return pending_for(run)


def pending_for(run: Run) -> ApprovalRequest:
    def asked() -> ApprovalRequest | None:
        return ApprovalRequest.objects.filter(run=run, status="pending").first()

    wait_until(lambda: off_loop(asked) is not None, timeout=30, what="the commit request")
    return off_loop(asked)


def review(page: Page, stack, approval: ApprovalRequest) -> None:
    page.goto(f"{stack.url}/approvals/{approval.pk}/")
    expect(page.locator("#decision-form")).to_be_visible()
    page.wait_for_load_state()


def status_of(run_id) -> str:
    return off_loop(lambda: Run.objects.get(pk=run_id).status)


@pytest.mark.usefixtures("seeded", "api_key")  # the worker has its own, for the fake model
def test_an_edit_approved_on_a_file_another_run_changed_is_rebased_kept_and_committed_once(
    live_stack, page, client, personas, agent, workspace, docs
):
    guide = docs / "guide.md"
    guide.write_text(GUIDE)
    first = waiting(live_stack, personas, agent, workspace, changed(GUIDE, 2, "Line two, new."), 1)
    second = waiting(
        live_stack, personas, agent, workspace, changed(GUIDE, 8, "Line eight, new."), 2
    )
    login(page, live_stack, client, personas.approver)

    review(page, live_stack, first)
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("Approved")
    wait_until(lambda: status_of(first.run_id) == "completed", timeout=30, what="the first run")
    assert guide.read_text() == changed(GUIDE, 2, "Line two, new.")

    # The second request's page says the file moved, and what an approval now does.
    review(page, live_stack, second)
    notice = page.locator("#review-changed")
    expect(notice).to_contain_text("docs/guide.md changed since the request")
    expect(notice).to_contain_text("rebases this change, with an edit you make")
    page.get_by_role("button", name="Edit the patch").click()
    editor = page.locator("#edited_diff")
    patch = editor.input_value()
    assert "+Line eight, new." in patch
    editor.fill(patch.replace("+Line eight, new.", "+Line eight, new, and by hand."))
    page.get_by_role("button", name="Approve").click()
    message_text = page.locator(".message")
    expect(message_text).to_contain_text("with your edit")
    expect(message_text).to_contain_text("asks again with your edit rebased onto it")

    # Asked again, once: the fresh diff holds the edit, and says whose it is.
    again = pending_for(Run(pk=second.run_id))
    assert again.pk != second.pk
    review(page, live_stack, again)
    expect(page.locator("#approval-rule")).to_contain_text(
        "Rebased onto the file as it is now: docs/guide.md (line 2 came from it). Includes "
        "the edit april-approver made when approving the earlier request."
    )
    expect(page.locator("#diff-inline")).to_contain_text("Line eight, new, and by hand.")
    expect(page.locator("#review-changed")).to_have_count(0)  # nothing moved since this one
    page.get_by_role("button", name="Approve").click()
    wait_until(lambda: status_of(second.run_id) == "completed", timeout=30, what="the second run")

    assert guide.read_bytes() == (
        changed(changed(GUIDE, 2, "Line two, new."), 8, "Line eight, new, and by hand.").encode()
    )
    commits = off_loop(
        lambda: ToolCall.objects.filter(
            run_id=second.run_id, tool="commitDraft", status="ok"
        ).count()
    )
    assert commits == 1
    page.goto(f"{live_stack.url}/runs/{second.run_id}/")
    expect(page.locator("p.approval-invalidated")).to_contain_text(
        "Invalidated by the harness: docs/guide.md changed since the request"
    )
    expect(page.locator(".approval-edited").first).to_contain_text(
        "the request was invalidated before anything was written"
    )


def model_turns(run_id) -> int:
    return off_loop(lambda: Run.objects.get(pk=run_id).model_calls.count())


@pytest.mark.usefixtures("seeded", "api_key")
def test_a_change_that_does_not_merge_goes_back_to_the_model_and_the_run_page_says_so(
    live_stack, page, client, personas, agent, workspace, docs
):
    guide = docs / "guide.md"
    guide.write_text(GUIDE)
    first = waiting(live_stack, personas, agent, workspace, changed(GUIDE, 5, "Five, first."), 1)
    second = waiting(live_stack, personas, agent, workspace, changed(GUIDE, 5, "Five, second."), 2)
    login(page, live_stack, client, personas.approver)
    review(page, live_stack, first)
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("Approved")
    wait_until(lambda: status_of(first.run_id) == "completed", timeout=30, what="the first run")

    # The model's one more turn: it drafts its change again on top of the file as it is.
    turns = model_turns(second.run_id)
    live_stack.fake_anthropic.answers += [
        message(
            [
                {
                    "type": "tool_use",
                    "id": "toolu_guide_again",
                    "name": "createDraft",
                    "input": {
                        "path": "docs/guide.md",
                        "content": changed(GUIDE, 5, "Five, first, then second."),
                    },
                }
            ],
            stop_reason="tool_use",
        ),
        message([{"type": "text", "text": "Drafted again."}]),
    ]
    asked_before = len(live_stack.fake_anthropic.requests)
    review(page, live_stack, second)
    expect(page.locator("#review-changed")).to_contain_text(
        "if the two changes do not merge, the run goes back to the model with the conflict"
    )
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("Approved")

    again = pending_for(Run(pk=second.run_id))
    assert again.pk != second.pk
    assert model_turns(second.run_id) == turns + 2  # one more turn: its draft, then done
    told = live_stack.fake_anthropic.requests[asked_before]["body"]["messages"][-1]
    assert "Your change to docs/guide.md could not be committed" in str(told["content"])
    assert guide.read_text() == changed(GUIDE, 5, "Five, first.")  # nothing of the clash

    page.goto(f"{live_stack.url}/runs/{second.run_id}/")
    expect(page.locator(f'[data-approval="{second.pk}"] p.approval-invalidated')).to_contain_text(
        "this run's change does not merge with it: both changed line 5"
    )
    expect(page.locator('li[data-type="status.changed"] .back-to-model')).to_have_count(1)
    expect(page.locator(f'[data-approval="{again.pk}"] pre.diff')).to_contain_text(
        "+Five, first, then second."
    )
    expect(page.locator(f'[data-approval="{again.pk}"] .status')).to_have_text("pending")


@pytest.mark.usefixtures("seeded", "api_key")
def test_after_the_other_run_is_rolled_back_the_request_is_current_again_in_the_browser(
    live_stack, page, client, personas, agent, workspace, docs
):
    guide = docs / "guide.md"
    guide.write_text(GUIDE)
    first = waiting(live_stack, personas, agent, workspace, changed(GUIDE, 2, "Two, new."), 1)
    second = waiting(live_stack, personas, agent, workspace, changed(GUIDE, 8, "Eight, new."), 2)
    login(page, live_stack, client, personas.approver)
    review(page, live_stack, first)
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("Approved")
    wait_until(lambda: status_of(first.run_id) == "completed", timeout=30, what="the first run")
    review(page, live_stack, second)
    expect(page.locator("#review-changed")).to_contain_text(
        "docs/guide.md changed since the request"
    )

    # Roll the first run back from its page, confirming the browser's dialog.
    page.goto(f"{live_stack.url}/runs/{first.run_id}/")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.locator("#run-rollback").click()
    expect(page.locator("#run-status")).to_have_text("rolled_back")
    assert asked == ["Restore every file this run changed to its bytes from before the run?"]
    assert guide.read_bytes() == GUIDE.encode()

    review(page, live_stack, second)
    expect(page.locator("#review-changed")).to_have_count(0)
    expect(page.locator("#decision-form")).to_be_visible()
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("Approved")
    wait_until(lambda: status_of(second.run_id) == "completed", timeout=30, what="the second run")
    assert guide.read_bytes() == changed(GUIDE, 8, "Eight, new.").encode()
    asks = off_loop(lambda: list(ApprovalRequest.objects.filter(run_id=second.run_id)))
    assert [(a.pk, a.status) for a in asks] == [(second.pk, "approved")]  # no rebase, no re-ask
