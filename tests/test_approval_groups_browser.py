"""A group of identical requests decided in one step in a real browser, the runs in a real
Celery worker (issue 18 point 3): two runs ask to commit the same fix; the approver
approves both from the queue with one comment, and both runs go on."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from approvals.models import ApprovalDecision, ApprovalRequest
from tests.conftest import EVERYWHERE
from tests.helpers import BROKEN, login
from tests.stack import off_loop, wait_until
from tests.test_approvals_browser import open_queue, run_status, submit

pytestmark = [EVERYWHERE, pytest.mark.browser]


def pending_of(run) -> int:
    return off_loop(lambda: ApprovalRequest.objects.filter(run=run, status="pending").count())


@pytest.mark.usefixtures("seeded")
def test_two_identical_requests_are_approved_from_the_queue_in_one_step(
    live_stack, page, client, personas, agent, workspace, docs
):
    runs = [submit(personas, agent, workspace) for _ in range(2)]
    for run in runs:
        wait_until(lambda run=run: pending_of(run) == 1, timeout=30, what="its request")
    login(page, live_stack, client, personas.approver)
    open_queue(page, live_stack)
    group = page.locator("#approval-groups form.approval-group")
    expect(group).to_have_count(1)
    expect(group).to_contain_text("2 identical requests")
    group.locator("input[name=comment]").fill("The same fix twice: fine.")
    # The live queue refreshes its table on any approval event: what was typed stays.
    page.evaluate(
        "htmx.ajax('GET', '/approvals/?fragment=1', {target: '#approval-queue', swap: 'innerHTML'})"
    )
    page.wait_for_load_state("networkidle")
    expect(group.locator("input[name=comment]")).to_have_value("The same fix twice: fine.")
    group.get_by_role("button", name="Approve all 2").click()
    expect(page.locator(".message").first).to_contain_text("Approved 2 of 2 identical requests")
    for run in runs:
        wait_until(lambda run=run: run_status(run) == "completed", timeout=30, what="the run")
    assert (docs / "configuration.md").read_text() == BROKEN.replace("startd", "started")
    votes = off_loop(
        lambda: list(
            ApprovalDecision.objects.filter(approval__run__in=runs).values_list(
                "comment", flat=True
            )
        )
    )
    assert votes == ["The same fix twice: fine."] * 2
