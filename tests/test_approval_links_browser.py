"""Decide-from-anywhere links in a real browser on a real daphne, the run in a real Celery
worker (issue 18 point 4, SPEC B14): an approver opens the link from an email logged out,
logs in and lands on the confirmation page, confirms, the run completes, and the same link
opened again says it was used. An L3 delete's link still asks for the typed path. A link
past its deadline, and one for a request someone else decided, are refused with a page
that says which, and decide nothing."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from approvals.links import link_token_make
from approvals.models import ApprovalLinkUse, ApprovalRequest
from runs.approval_outcomes import approval_decide
from runs.models import Run
from runs.services import run_answer, run_create
from tests.conftest import EVERYWHERE, PASSWORD
from tests.helpers import FIXED, login
from tests.stack import off_loop, wait_until

pytestmark = [EVERYWHERE, pytest.mark.browser]


def submit(personas, agent, workspace, request: str) -> Run:
    """The operator submits a run; the live stack's worker takes it."""
    return off_loop(
        run_create, agent=agent, workspace=workspace, requester=personas.operator, request=request
    )


def pending(run: Run) -> ApprovalRequest:
    """The run's pending request once the worker asked it."""
    wait_until(
        lambda: off_loop(
            lambda: ApprovalRequest.objects.filter(run=run, status="pending").exists()
        ),
        timeout=30,
        what="the run to ask for approval",
    )
    return off_loop(lambda: ApprovalRequest.objects.get(run=run, status="pending"))


def link_url(stack, approval: ApprovalRequest, decision: str = "approve") -> str:
    """The link as the email carries it, on the live stack's address."""
    token = off_loop(link_token_make, approval=approval, decision=decision)
    return f"{stack.url}/approvals/link/{token}/"


def expect_run(page: Page, stack, run: Run, status: str) -> None:
    page.goto(f"{stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-status")).to_have_text(status, timeout=20_000)


@pytest.mark.usefixtures("seeded")
def test_an_approve_link_logs_in_confirms_decides_once_and_then_says_it_was_used(
    live_stack, page, personas, agent, workspace, docs
):
    run = submit(personas, agent, workspace, "Fix the broken link in docs/configuration.md")
    approval = pending(run)
    url = link_url(live_stack, approval)
    page.goto(url)  # from the email, logged out: the login page, then back
    page.get_by_label("Username").fill(personas.approver.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(url)
    expect(page.locator("#link-what")).to_contain_text("This link will approve")
    expect(page.locator("#link-review")).to_have_attribute("href", f"/approvals/{approval.pk}/")
    assert off_loop(lambda: ApprovalRequest.objects.get(pk=approval.pk).status) == "pending"

    page.get_by_label("Comment").fill("Approved from my phone")
    page.get_by_role("button", name="Approve").click()
    expect(page).to_have_url(f"{live_stack.url}/approvals/{approval.pk}/")
    expect(page.locator(".message")).to_contain_text("from the link")
    expect(page.locator("#approval-status")).to_have_text("approved")
    expect_run(page, live_stack, run, "completed")
    assert (docs / "configuration.md").read_text() == FIXED

    page.goto(url)  # the same link again
    expect(page.locator("#link-refusal")).to_contain_text("used already")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    page.locator("#link-review").click()
    expect(page.locator("#approval-outcome")).to_contain_text("Approved by april-approver")


@pytest.mark.usefixtures("seeded")
def test_an_l3_delete_link_needs_the_typed_path_in_the_browser(
    live_stack, page, client, personas, agent, workspace, docs
):
    (docs / "old-faq.md").write_text("# Old FAQ\n")
    run = submit(personas, agent, workspace, "Delete the old FAQ page")
    wait_until(
        lambda: off_loop(lambda: Run.objects.get(pk=run.pk).waiting_for) == "answer",
        timeout=30,
        what="the intake to ask which file",
    )
    off_loop(run_answer, run=run, user=personas.operator, answers={"path": "docs/old-faq.md"})
    approval = pending(run)
    login(page, live_stack, client, personas.approver)
    page.goto(link_url(live_stack, approval))
    confirm = page.get_by_label("Type docs/old-faq.md to confirm")
    confirm.fill("docs/old.md")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#error-confirm")).to_contain_text("Type the path exactly")
    assert (docs / "old-faq.md").exists()
    page.get_by_label("Type docs/old-faq.md to confirm").fill("docs/old-faq.md")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".message")).to_contain_text("Approved")
    expect_run(page, live_stack, run, "completed")
    assert not (docs / "old-faq.md").exists()


@pytest.mark.usefixtures("seeded")
def test_an_expired_link_and_a_link_someone_else_beat_are_refused_saying_which(
    live_stack, page, client, personas, agent, workspace, docs
):
    run = submit(personas, agent, workspace, "Fix the broken link in docs/configuration.md")
    approval = pending(run)
    # A link made with a deadline that has passed since (a link never outlives the
    # deadline it was made with), while the request itself still waits.
    approval.expires_at = timezone.now() - datetime.timedelta(minutes=1)
    expired = link_url(live_stack, approval)
    login(page, live_stack, client, personas.approver)
    response = page.goto(expired)
    assert response is not None and response.status == 410
    expect(page.locator("h1")).to_have_text("This link cannot decide")
    refusal = page.locator("#link-refusal")
    expect(refusal).to_contain_text("This link expired at")
    expect(refusal).to_contain_text("The request is still pending: decide it on its review page.")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    page.locator("#link-review").click()
    expect(page.locator("#decision-form")).to_be_visible()  # decided there, not by the link
    assert off_loop(lambda: ApprovalRequest.objects.get(pk=approval.pk).status) == "pending"

    # A fresh link, but another approver decides on the review page first.
    fresh = off_loop(lambda: ApprovalRequest.objects.get(pk=approval.pk))
    beaten = link_url(live_stack, fresh)
    off_loop(approval_decide, approval=fresh, user=personas.admin, decision="approve")
    response = page.goto(beaten)
    assert response is not None and response.status == 410
    expect(page.locator("#link-refusal")).to_have_text(
        "This request was approved already, by ada-admin."
    )
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    page.locator("#link-review").click()
    expect(page.locator("#approval-outcome")).to_contain_text("Approved by ada-admin")
    expect_run(page, live_stack, run, "completed")
    decided = off_loop(lambda: list(ApprovalRequest.objects.get(pk=approval.pk).decisions.all()))
    assert [(d.user_id, d.decision) for d in decided] == [(personas.admin.pk, "approve")]
    assert not off_loop(lambda: ApprovalLinkUse.objects.filter(approval_id=approval.pk).exists())
