"""The small things of issue 18 point 6, in Chromium on a real daphne: the approval history
links each row's run and says what had been decided on an invalidated row; cancelling a
run asks first (htmx's ``hx-confirm``, the browser's confirm dialog), and a run cancelled
is shown as cancelled in the runs list."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from approvals.models import ApprovalRequest
from runs.models import Run
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.helpers import FIX, login
from tests.stack import off_loop, wait_until

pytestmark = [EVERYWHERE, pytest.mark.browser]

EDIT = "--- a/docs/guide.md\n+++ b/docs/guide.md\n@@ -1 +1 @@\n-Guide\n+Guide, by hand\n"


def waiting_run(personas, agent, workspace, request: str) -> Run:
    """A run that asked again and waits for approval: no worker takes it (a waiting run
    holds none), so its page and its history rows stay as made."""
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=request,
        dispatch=False,
    )
    Run.objects.filter(pk=run.pk).update(status="waiting_for_approval")
    return run


def invalidated(run: Run, n: int, *, decided_by=None, **fields) -> ApprovalRequest:
    return ApprovalRequest.objects.create(
        run=run,
        kind="commit",
        status="invalidated",
        tool="commitDraft",
        tool_use_id=f"commit:history-{n}",
        paths=["docs/guide.md"],
        summary=f"Commit 1 file(s): docs/guide.md ({n})",
        decided_by=decided_by,
        decided_at=timezone.now() if decided_by else None,
        **fields,
    )


def history_rows(personas, agent, workspace) -> dict[str, ApprovalRequest]:
    one = waiting_run(personas, agent, workspace, f"{FIX} (one)")
    two = waiting_run(personas, agent, workspace, f"{FIX} (two)")
    return {
        "edited": invalidated(
            one,
            1,
            decided_by=personas.approver,
            edited_diff=EDIT,
            status_reason="docs/guide.md changed since the request (another change was "
            "committed); this run's change, with the edit april-approver made when approving "
            "it, was rebased onto the file as it is now: docs/guide.md",
        ),
        "pending": invalidated(
            one, 2, status_reason="replaced by a newer request about docs/guide.md"
        ),
        "hunks": invalidated(
            two,
            3,
            decided_by=personas.approver,
            edited_diff=EDIT,
            rejected_hunks={"docs/guide.md": [2]},
            status_reason="docs/guide.md changed since the request",
        ),
    }


@pytest.mark.usefixtures("api_key")  # runs no worker takes
def test_the_history_links_each_run_and_says_what_was_decided_on_invalidated_rows(
    live_stack, page: Page, client, personas, agent, workspace
):
    rows = off_loop(history_rows, personas=personas, agent=agent, workspace=workspace)
    login(page, live_stack, client, personas.approver)
    page.goto(f"{live_stack.url}/approvals/history/?status=invalidated")
    expect(page.locator("#approval-history-summary")).to_have_text("3 requests.")

    def row(name: str):
        return page.locator(f'tr[data-approval="{rows[name].pk}"]')

    expect(row("edited").locator(".history-decided")).to_have_text(
        "approved with an edit, then invalidated by the harness before it ran"
    )
    expect(row("pending").locator(".history-decided")).to_have_text(
        "invalidated by the harness while pending: nobody decided it"
    )
    expect(row("hunks").locator(".history-decided")).to_have_text(
        "approved without hunk 2 of docs/guide.md, then invalidated by the harness before it ran"
    )
    expect(row("edited")).to_contain_text("april-approver")
    expect(row("pending")).to_contain_text("nobody")
    expect(row("pending")).to_contain_text("replaced by a newer request about docs/guide.md")

    # Each row links its own run, by its short id; the link opens that run's page.
    for name in rows:
        run_id = rows[name].run_id
        link = row(name).locator("a.history-run")
        expect(link).to_have_attribute("href", f"/runs/{run_id}/")
        expect(link).to_have_text(str(run_id)[:8])
    row("hunks").locator("a.history-run").click()
    expect(page).to_have_url(f"{live_stack.url}/runs/{rows['hunks'].run_id}/")
    expect(page.locator(f'#run-approvals [data-approval="{rows["hunks"].pk}"]')).to_contain_text(
        "Invalidated by the harness: docs/guide.md changed since the request"
    )


@pytest.mark.usefixtures("seeded")
def test_cancel_asks_first_and_the_cancelled_run_is_listed_as_cancelled(
    live_stack, page: Page, client, personas, agent, workspace, docs
):
    (docs / "old-faq.md").write_text("# Old FAQ\n")
    run = off_loop(
        run_create,
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Delete the old FAQ page",
    )
    wait_until(
        lambda: off_loop(lambda: Run.objects.get(pk=run.pk).waiting_for) == "answer",
        timeout=30,
        what="the intake to ask which file",
    )
    login(page, live_stack, client, personas.operator)
    page.goto(f"{live_stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-status")).to_have_text("waiting_for_answer")
    asked: list[str] = []

    # Dismissed: nothing is sent, the run waits on.
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.locator("#run-cancel").click()
    wait_until(lambda: len(asked) == 1, timeout=20, what="the confirm dialog")
    assert asked[0].startswith("Cancel this run? The worker stops at its next step")
    expect(page.locator("#run-cancel")).to_be_visible()
    fresh = off_loop(lambda: Run.objects.get(pk=run.pk))
    assert (fresh.status, fresh.cancel_requested_at) == ("waiting_for_answer", None)

    # Confirmed: the run is cancelled at once (it held no worker).
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.locator("#run-cancel").click()
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(page.locator("#run-cancel")).to_have_count(0)
    assert len(asked) == 2
    fresh = off_loop(lambda: Run.objects.get(pk=run.pk))
    assert (fresh.status, fresh.failure_kind) == ("failed", "cancelled")

    # The runs list shows it as cancelled, and its filters sort it so.
    def listed_row():
        return page.locator("tr", has=page.locator(f'a[href="/runs/{run.pk}/"]'))

    page.goto(f"{live_stack.url}/runs/")
    status = listed_row().locator(".status")
    expect(status).to_have_text("cancelled")
    expect(status).to_have_attribute("title", "failed: cancelled")
    page.goto(f"{live_stack.url}/runs/?status=cancelled")
    expect(listed_row()).to_have_count(1)
    page.goto(f"{live_stack.url}/runs/?status=failed")
    expect(listed_row()).to_have_count(0)
