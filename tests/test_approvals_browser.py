"""The approval pages in a real browser on a real daphne, runs in a real Celery worker
(issue 6, SPEC A1–A3, L2): the queue updates live, the review page switches views and takes
keys, and a decision there resumes the run."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from approvals.models import ApprovalRequest
from runs.approval_outcomes import approval_decide
from runs.models import Run
from runs.services import run_answer, run_create
from tests.conftest import EVERYWHERE
from tests.helpers import BROKEN, FIX, login
from tests.stack import off_loop, wait_until

pytestmark = [EVERYWHERE, pytest.mark.browser]

DELETE = "Delete the old FAQ page"


@pytest.fixture
def docs(docs):
    """The shared docs/ folder and the old FAQ page, which DELETE asks to delete."""
    (docs / "old-faq.md").write_text("# Old FAQ\n")
    return docs


def submit(personas, agent, workspace, request: str = FIX) -> Run:
    """The operator submits a run; the live stack's worker takes it."""
    return off_loop(
        run_create,
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=request,
    )


def open_queue(page: Page, stack) -> None:
    page.goto(f"{stack.url}/approvals/")
    expect(page.locator("#approvals-live-status")).to_have_text("live", timeout=10_000)


def review_from_queue(page: Page, text: str) -> None:
    """Wait for the request to arrive in the open queue, then open it."""
    row = page.locator("#approval-queue tr[data-approval]", has_text=text)
    expect(row).to_have_count(1, timeout=20_000)
    row.get_by_role("link", name=text).click()
    expect(page.locator("#decision-form")).to_be_visible()
    page.wait_for_load_state()  # the page's script is in: keys and buttons are wired


def run_status(run: Run) -> str:
    return off_loop(lambda: Run.objects.get(pk=run.pk).status)


def open_run_page(page: Page, stack, run: Run, status: str) -> None:
    page.goto(f"{stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-status")).to_have_text(status, timeout=20_000)


@pytest.mark.usefixtures("seeded")
def test_a_request_arrives_in_the_open_queue_and_is_approved_with_a_key(
    live_stack, page, client, personas, agent, workspace, docs
):
    login(page, live_stack, client, personas.approver)
    open_queue(page, live_stack)
    expect(page.locator("#nav-approvals-count")).to_have_text("0")
    run = submit(personas, agent, workspace)
    rows = page.locator("#approval-queue tr[data-approval]")
    expect(rows).to_have_count(1, timeout=20_000)
    expect(page.locator("#nav-approvals-count")).to_have_text("1")
    risk = page.locator("#approval-filters select[name=risk]")
    risk.select_option("high")  # the filters swap the table in place
    expect(rows).to_have_count(0)
    expect(page).to_have_url(re.compile(r"/approvals/\?risk=high&"))
    risk.select_option("")
    review_from_queue(page, "docs/configuration.md")

    inline, side = page.locator("#diff-inline"), page.locator("#diff-side")
    expect(inline).to_contain_text("See [the guide](getting-started.md).")
    page.get_by_role("button", name="Side by side").click()
    expect(side).to_be_visible()
    expect(inline).to_be_hidden()
    expect(side.locator("tr.row-change")).to_have_count(1)
    page.reload()  # the choice is remembered
    expect(page.locator("#diff-side")).to_be_visible()
    page.get_by_role("button", name="Inline").click()
    expect(page.locator("#diff-inline")).to_be_visible()
    expect(page.locator("#diff-side")).to_be_hidden()

    page.keyboard.press("a")
    expect(page).to_have_url(f"{live_stack.url}/approvals/")
    expect(page.locator(".message")).to_contain_text("Approved “Commit 1 file(s)")
    expect(page.locator("#approval-queue tr[data-approval]")).to_have_count(0)
    expect(page.locator("#nav-approvals-count")).to_have_text("0")
    open_run_page(page, live_stack, run, "completed")
    assert (docs / "configuration.md").read_text() == BROKEN.replace("startd", "started")


@pytest.mark.usefixtures("seeded")
def test_a_rejection_with_a_reason_fails_the_run_with_it(
    live_stack, page, client, personas, agent, workspace, docs
):
    login(page, live_stack, client, personas.approver)
    open_queue(page, live_stack)
    run = submit(personas, agent, workspace)
    review_from_queue(page, "docs/configuration.md")
    queue = page.context.new_page()  # a second tab keeps the queue open
    open_queue(queue, live_stack)
    rows = queue.locator("#approval-queue tr[data-approval]")
    expect(rows).to_have_count(1)
    page.bring_to_front()
    page.get_by_role("button", name="Reject").click()  # no reason yet: the page asks
    expect(page.locator("#comment-hint")).to_be_visible()
    expect(page.locator("#comment")).to_be_focused()
    page.locator("#comment").fill("The link should point to the new guide")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator(".message")).to_contain_text("Rejected")
    expect(rows).to_have_count(0)  # the decided request left the other tab without a reload
    expect(queue.locator("#nav-approvals-count")).to_have_text("0")
    open_run_page(page, live_stack, run, "failed")
    expect(page.locator("#run-failure")).to_contain_text("The link should point to the new guide")
    assert (docs / "configuration.md").read_text() == BROKEN


@pytest.mark.usefixtures("seeded")
def test_an_edited_patch_is_what_gets_committed(
    live_stack, page, client, personas, agent, workspace, docs
):
    login(page, live_stack, client, personas.approver)
    open_queue(page, live_stack)
    run = submit(personas, agent, workspace)
    review_from_queue(page, "docs/configuration.md")
    editor = page.locator("#edited_diff")
    expect(editor).to_be_hidden()
    page.get_by_role("button", name="Edit the patch").click()
    expect(editor).to_be_visible()
    expect(editor).to_be_focused()
    patch = editor.input_value()
    line = "+See [the guide](getting-started.md)."
    assert line in patch
    editor.fill(patch.replace(line, "+See [the getting started guide](getting-started.md)."))
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("with your edit")
    open_run_page(page, live_stack, run, "completed")
    assert (docs / "configuration.md").read_text() == (
        "# Configuration\n\nSee [the getting started guide](getting-started.md).\n"
    )


@pytest.mark.usefixtures("seeded")
def test_a_wrong_strong_confirmation_is_refused_then_the_right_one_approves(
    live_stack, page, client, personas, agent, workspace, docs
):
    run = submit(personas, agent, workspace, DELETE)
    wait_until(
        lambda: off_loop(lambda: Run.objects.get(pk=run.pk).waiting_for) == "answer",
        timeout=30,
        what="the intake to ask which file",
    )
    off_loop(run_answer, run=run, user=personas.operator, answers={"path": "docs/old-faq.md"})
    login(page, live_stack, client, personas.approver)
    open_queue(page, live_stack)
    review_from_queue(page, "deleteFile docs/old-faq.md")

    page.keyboard.press("a")  # a key never skips the confirmation: it goes to the box
    confirm = page.get_by_label("Type docs/old-faq.md to confirm")
    expect(confirm).to_be_focused()
    confirm.fill("docs/old.md")
    confirm.press("Enter")
    expect(page.locator("#error-confirm")).to_contain_text("Type the path exactly")
    expect(page.locator("#approval-status")).to_have_text("pending")
    assert off_loop(lambda: ApprovalRequest.objects.get(run=run).status) == "pending"
    assert (docs / "old-faq.md").exists()

    page.get_by_label("Type docs/old-faq.md to confirm").fill("docs/old-faq.md")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("Approved")
    open_run_page(page, live_stack, run, "completed")
    assert not (docs / "old-faq.md").exists()
    assert run_status(run) == "completed"


@pytest.mark.usefixtures("seeded")
def test_the_navigation_count_follows_on_any_page_of_an_approver(
    live_stack, page, client, personas, agent, workspace, docs
):
    login(page, live_stack, client, personas.approver)
    page.goto(f"{live_stack.url}/runs/")
    badge = page.locator("#nav-approvals-count")
    expect(badge).to_have_text("0")
    run = submit(personas, agent, workspace)
    expect(badge).to_have_text("1", timeout=20_000)  # no reload: the runs list stays put
    approval = off_loop(lambda: ApprovalRequest.objects.get(run=run))
    off_loop(
        approval_decide,
        approval=approval,
        user=personas.admin,
        decision="reject",
        comment="not now",
    )
    expect(badge).to_have_text("0", timeout=20_000)


def _decided(personas, agent, workspace, requests: list[dict]) -> None:
    """The operator's run, handed to no worker, with these decided requests."""
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=FIX,
        dispatch=False,
    )
    for i, fields in enumerate(requests):
        ApprovalRequest.objects.create(run=run, tool_use_id=f"h{i}", summary=f"h{i}", **fields)


def test_the_history_filters_follow_the_address_after_back(
    live_stack, page, client, personas, agent, workspace
):
    requests = [
        {"kind": "commit", "status": "approved"},
        {"kind": "tool_call", "status": "rejected"},
    ]
    off_loop(_decided, personas=personas, agent=agent, workspace=workspace, requests=requests)
    login(page, live_stack, client, personas.approver)
    page.goto(f"{live_stack.url}/approvals/history/")
    rows = page.locator("#approval-history tr[data-approval]")
    expect(rows).to_have_count(2)
    kind, status = page.locator("select[name=kind]"), page.locator("select[name=status]")
    kind.select_option("commit")
    expect(page).to_have_url(re.compile(r"kind=commit"))
    expect(rows).to_have_count(1)
    status.select_option("rejected")
    expect(page).to_have_url(re.compile(r"status=rejected"))
    expect(rows).to_have_count(0)
    page.go_back()
    expect(page).to_have_url(re.compile(r"kind=commit(?!.*status=rejected)"))
    expect(kind).to_have_value("commit")
    expect(status).to_have_value("")


def test_the_history_s_decided_by_box_sends_once(
    live_stack, page, client, personas, agent, workspace
):
    # As the runs list's search (tests/test_runs_list_browser.py): Enter in a filter's
    # text box sends it once (the box's change and the form's own submit sent it twice).
    mine = {"kind": "commit", "status": "approved", "decided_by": personas.approver}
    off_loop(_decided, personas=personas, agent=agent, workspace=workspace, requests=[mine])
    login(page, live_stack, client, personas.approver)
    page.goto(f"{live_stack.url}/approvals/history/")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if "/approvals/history/?" in r.url else None)
    who = personas.approver.username
    page.fill("input[name=decided_by]", who)
    page.press("input[name=decided_by]", "Enter")
    expect(page).to_have_url(re.compile(rf"decided_by={who}"))
    page.locator("h1").click()  # the box loses focus
    page.locator("select[name=kind]").select_option("tool_call")
    expect(page).to_have_url(re.compile(r"kind=tool_call"))
    expect(page.locator("#approval-history tr[data-approval]")).to_have_count(0)
    assert [(f"decided_by={who}" in u, "kind=tool_call" in u) for u in sent] == [
        (True, False),
        (True, True),
    ]
