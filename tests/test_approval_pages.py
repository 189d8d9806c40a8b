"""The approval pages (issue 6, SPEC A1–A6): the queue, the review page and its decision
form, the history — through Django's test client, with runs driven in this process. The
browser, the live queue and the real worker are in test_approvals_browser."""

from __future__ import annotations

import datetime
import re
import uuid

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from approvals.models import ApprovalDecision, ApprovalRequest
from policies.models import Agent
from runs.models import Run
from runs.services import run_answer, run_create
from tests.conftest import SEEDED
from tests.helpers import BROKEN, FIX, drive, driven

pytestmark = SEEDED

DELETE = "Delete the old FAQ page"


@pytest.fixture
def docs(docs):
    """The shared docs/ folder and the old FAQ page, which DELETE asks to delete."""
    (docs / "old-faq.md").write_text("# Old FAQ\n")
    return docs


def waiting_approval(run: Run) -> ApprovalRequest:
    return ApprovalRequest.objects.get(run=run, status="pending")


def delete_approval(personas, agent, workspace) -> ApprovalRequest:
    """A deleteFile tool call that asks for a strong confirmation (type the path)."""
    run = driven(personas, agent, workspace, request=DELETE)
    run_answer(run=run, user=personas.operator, answers={"path": "docs/old-faq.md"})
    drive(run)
    approval = waiting_approval(run)
    assert approval.strong_confirmation and approval.tool == "deleteFile"
    return approval


def a_run(personas, agent, workspace, requester=None) -> Run:
    """A run that no worker takes: its approval requests are made up by the test."""
    return run_create(
        agent=agent,
        workspace=workspace,
        requester=requester or personas.operator,
        request=FIX,
        dispatch=False,
    )


def ask(run: Run, n: int = 0, **fields) -> ApprovalRequest:
    """A made-up request of ``run``. A run holds one pending commit (the database says so):
    a further pending commit is asked by a sibling run (same agent, workspace, requester)."""
    pending_commit = fields.get("kind", "commit") == "commit" and fields.get("status", "pending")
    if pending_commit == "pending" and run.approvals.filter(kind="commit", status="pending"):
        run = run_create(
            agent=run.agent,
            workspace=run.workspace,
            requester=run.requester,
            request=run.request,
            dispatch=False,
        )
    defaults = {
        "kind": "commit",
        "tool_use_id": f"commit:{n}:{uuid.uuid4().hex[:6]}",
        "summary": f"Request number {n}",
        "risk": "low",
        "digest": "d" * 64,
        "paths": ["docs/a.md"],
    }
    return ApprovalRequest.objects.create(run=run, **{**defaults, **fields})


def shown_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-approval="([0-9a-f-]+)"', html)


def page(client, name, *args, **params) -> str:
    response = client.get(reverse(name, args=args), params)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def decide(client, approval, **data):
    data.setdefault("digest", approval.digest)
    return client.post(reverse("approvals:decide", args=[approval.pk]), data)


# --- who may open what ----------------------------------------------------------------------
@pytest.mark.parametrize("who", ["operator", "ops", "outsider"])
def test_only_approvers_open_the_queue_the_review_the_decision_and_the_history(
    client, personas, agent, workspace, who
):
    approval = ask(a_run(personas, agent, workspace))
    client.force_login(getattr(personas, who))
    for url in (
        reverse("approvals:queue"),
        reverse("approvals:history"),
        reverse("approvals:review", args=[approval.pk]),
        reverse("approvals:count"),
    ):
        response = client.get(url)
        assert response.status_code == 403, url
        assert 'class="topbar"' in response.content.decode()  # refused inside the layout
    refused = decide(client, approval, decision="approve")
    assert refused.status_code == 403
    approval.refresh_from_db()
    assert approval.is_pending and not approval.decisions.exists()


def test_an_anonymous_visitor_is_sent_to_log_in(client, personas, agent, workspace):
    approval = ask(a_run(personas, agent, workspace))
    for url in (
        reverse("approvals:queue"),
        reverse("approvals:history"),
        reverse("approvals:review", args=[approval.pk]),
        reverse("approvals:count"),
    ):
        response = client.get(url)
        assert response.status_code == 302 and "login" in response["Location"]
    assert decide(client, approval, decision="approve").status_code == 302
    assert ApprovalRequest.objects.get(pk=approval.pk).is_pending


def test_an_unknown_request_is_not_found_for_an_approver(client, personas):
    client.force_login(personas.approver)
    assert client.get(reverse("approvals:review", args=[uuid.uuid4()])).status_code == 404
    assert client.get("/approvals/not-a-uuid/").status_code == 404


# --- the queue ------------------------------------------------------------------------------
def test_the_queue_shows_pending_requests_and_leaves_own_runs_to_others(
    client, personas, agent, workspace
):
    theirs = ask(a_run(personas, agent, workspace), 1, summary="Commit docs/a.md")
    mine = ask(a_run(personas, agent, workspace, requester=personas.admin), 2)
    ask(theirs.run, 3, status="approved", summary="Already decided")
    client.force_login(personas.admin)
    html = page(client, "approvals:queue")
    assert shown_ids(html) == [str(theirs.pk)]
    assert "Commit docs/a.md" in html and "Already decided" not in html
    assert "1 on your own run is left to other approvers" in html
    assert reverse("approvals:review", args=[theirs.pk]) in html
    assert reverse("runs:detail", args=[theirs.run_id]) in html
    assert "otto-operator" in html and "Tester" in html
    client.force_login(personas.approver)
    assert set(shown_ids(page(client, "approvals:queue"))) == {str(theirs.pk), str(mine.pk)}


def test_the_navigation_counts_what_waits_for_the_approver(client, personas, agent, workspace):
    run = a_run(personas, agent, workspace)
    ask(run, 1)
    ask(run, 2)
    ask(run, 3, status="rejected")
    client.force_login(personas.approver)
    html = page(client, "runs:list")
    assert re.search(r'<span id="nav-approvals-count" class="badge"[^>]*>2</span>', html)
    client.force_login(personas.operator)  # the requester, and no approver: no count
    assert "nav-approvals-count" not in page(client, "runs:list")


def test_the_queue_filters_by_risk_kind_and_agent(client, personas, agent, workspace):
    run = a_run(personas, agent, workspace)
    low = ask(run, 1, risk="low")
    high = ask(run, 2, risk="high", kind="tool_call", tool="deleteFile")
    other_agent = Agent.objects.create(slug="other", name="Other agent", identity="x")
    elsewhere = a_run(personas, agent, workspace)
    Run.objects.filter(pk=elsewhere.pk).update(agent=other_agent)
    theirs = ask(elsewhere, 3, risk="medium")
    client.force_login(personas.approver)
    assert shown_ids(page(client, "approvals:queue", risk="high")) == [str(high.pk)]
    assert shown_ids(page(client, "approvals:queue", kind="commit")) == [
        str(low.pk),
        str(theirs.pk),
    ]
    assert shown_ids(page(client, "approvals:queue", agent="other")) == [str(theirs.pk)]
    filtered = page(client, "approvals:queue", risk="low", kind="tool_call")
    assert shown_ids(filtered) == [] and "No pending request matches these filters" in filtered


def test_the_queue_sorts_oldest_newest_by_risk_and_by_expiry(client, personas, agent, workspace):
    run = a_run(personas, agent, workspace)
    now = timezone.now()
    first = ask(run, 1, risk="low", expires_at=now + datetime.timedelta(hours=3))
    second = ask(run, 2, risk="high", expires_at=now + datetime.timedelta(hours=1))
    third = ask(run, 3, risk="medium", expires_at=now + datetime.timedelta(hours=2))
    for n, approval in enumerate((first, second, third)):
        ApprovalRequest.objects.filter(pk=approval.pk).update(
            requested_at=now - datetime.timedelta(minutes=30 - n)
        )
    client.force_login(personas.approver)
    order = {
        "oldest": [first, second, third],
        "newest": [third, second, first],
        "risk": [second, third, first],
        "expiry": [second, third, first],
    }
    for sort, expected in order.items():
        html = page(client, "approvals:queue", sort=sort)
        assert shown_ids(html) == [str(a.pk) for a in expected], sort
    assert shown_ids(page(client, "approvals:queue")) == [str(a.pk) for a in order["oldest"]]


@pytest.mark.parametrize(
    ("params", "notice"),
    [
        ({"risk": "apocalyptic"}, "Unknown risk filter value “apocalyptic”: ignored."),
        ({"kind": "<b>x</b>"}, "Unknown kind filter value “&lt;b&gt;x&lt;/b&gt;”: ignored."),
        ({"agent": "nobody"}, "Unknown agent filter value “nobody”: ignored."),
        ({"sort": "random"}, "Unknown sort filter value “random”: ignored."),
    ],
)
def test_an_unknown_filter_value_is_ignored_with_a_notice(
    client, personas, agent, workspace, params, notice
):
    approval = ask(a_run(personas, agent, workspace))
    client.force_login(personas.approver)
    html = page(client, "approvals:queue", **params)
    assert notice in html
    assert shown_ids(html) == [str(approval.pk)]


def test_the_fragment_is_only_the_table_and_the_navigation_count(
    client, personas, agent, workspace
):
    approval = ask(a_run(personas, agent, workspace))
    client.force_login(personas.approver)
    for response in (
        client.get(reverse("approvals:queue"), {"fragment": "1"}),
        client.get(reverse("approvals:queue"), HTTP_HX_REQUEST="true"),
    ):
        html = response.content.decode()
        assert response.status_code == 200
        assert "<html" not in html and 'class="topbar"' not in html
        assert shown_ids(html) == [str(approval.pk)]
        assert re.search(r'id="nav-approvals-count"[^>]*hx-swap-oob="true"[^>]*>1</span>', html)
    full = page(client, "approvals:queue")
    assert full.count('id="nav-approvals-count"') == 1 and "hx-swap-oob" not in full
    assert 'id="approvals-live-status"' in full and "js/approvals.js" in full


def test_the_queue_shows_at_most_50_rows_in_a_few_queries(
    client, personas, agent, workspace, django_assert_max_num_queries
):
    run = a_run(personas, agent, workspace)
    ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            run=run, kind="tool_call", tool_use_id=f"t{i}", tool="x", summary=f"n{i}", risk="low"
        )
        for i in range(55)  # tool calls: one run may hold many, while only one commit
    )
    client.force_login(personas.approver)
    client.get(reverse("approvals:queue"), {"fragment": "1"})  # session and user cached
    with django_assert_max_num_queries(7):
        html = client.get(reverse("approvals:queue"), {"fragment": "1"}).content.decode()
    assert len(shown_ids(html)) == 50
    assert "55 pending requests" in html and "5 more not shown" in html


# --- the review page ------------------------------------------------------------------------
def test_the_review_page_shows_the_diff_inline_and_side_by_side_highlighted(
    client, personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    approval = waiting_approval(run)
    client.force_login(personas.approver)
    html = page(client, "approvals:review", approval.pk)
    for text in (
        approval.summary,
        'id="diff-inline"',
        'id="diff-side" class="diff-view" hidden',
        'class="row-add"',
        'class="row-del"',
        'class="row-change"',  # the side-by-side pairs the removed and the added line
        "getting-started.md",
        ".hl ",  # the highlighter's stylesheet
        'name="digest" value="' + approval.digest + '"',
        reverse("runs:detail", args=[run.pk]),
        "otto-operator",
        approval.rule,
        'id="edit-toggle"',  # a commit one person decides may be edited
        "<kbd>a</kbd>",
    ):
        assert text in html, text
    assert 'name="confirm"' not in html and 'name="remember"' not in html


def test_the_review_page_escapes_the_diff_and_highlights_code(client, personas, agent, workspace):
    diff = (
        "--- a/app/page.py\n+++ b/app/page.py\n@@ -1,2 +1,2 @@\n def page():\n"
        '-    return "<b>old</b>"\n+    return "<script>alert(1)</script>"\n'
    )
    approval = ask(a_run(personas, agent, workspace), diff=diff, paths=["app/page.py"])
    client.force_login(personas.approver)
    html = page(client, "approvals:review", approval.pk)
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html
    assert '<span class="k">def</span>' in html  # Pygments' class for a Python keyword
    assert "Python" in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3  # inline, side, editor


def test_the_review_page_shows_the_tool_call_the_rule_and_the_runs_risk_factors(
    client, personas, agent, workspace, docs
):
    approval = delete_approval(personas, agent, workspace)
    sibling = ask(approval.run, 9, summary="Another question of the same run")
    client.force_login(personas.approver)
    html = page(client, "approvals:review", approval.pk)
    factors = approval.run.task["risk"]["factors"]
    assert factors, approval.run.task["risk"]
    for text in (
        "deleteFile",
        "&quot;path&quot;: &quot;docs/old-faq.md&quot;",
        approval.rule,
        approval.reason,
        *(f["feature"] for f in factors),
        "Type <code>docs/old-faq.md</code> to confirm",
        'name="remember"',
        "Another question of the same run",
        reverse("approvals:review", args=[sibling.pk]),
    ):
        assert text in html, text
    assert 'id="edit-toggle"' not in html  # a deletion has no patch to edit


def test_the_requester_sees_no_form_and_cannot_decide(client, personas, agent, workspace, docs):
    run = driven(personas, agent, workspace, user=personas.admin)
    approval = waiting_approval(run)
    client.force_login(personas.admin)
    html = page(client, "approvals:review", approval.pk)
    assert "You cannot approve your own run" in html
    assert 'id="decision-form"' not in html and 'value="approve"' not in html
    assert decide(client, approval, decision="approve").status_code == 403
    assert waiting_approval(run).pk == approval.pk and not approval.decisions.exists()


def test_a_decided_request_is_a_read_only_record(client, personas, agent, workspace):
    run = a_run(personas, agent, workspace)
    approval = ask(run, status="expired", status_reason="approval expired: nobody in 24 h")
    client.force_login(personas.approver)
    html = page(client, "approvals:review", approval.pk)
    assert 'id="decision-form"' not in html
    assert "Expired" in html and "nobody decided it" in html and "nobody in 24 h" in html
    assert "rejected" not in html.lower().split('id="approval-decide"')[1].split("</section>")[0]
    response = decide(client, approval, decision="approve")
    assert response.status_code == 409
    assert "already expired" in response.content.decode()


# --- deciding -------------------------------------------------------------------------------
def test_approving_resumes_the_run_and_goes_on_to_the_queue(
    client, personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    approval = waiting_approval(run)
    client.force_login(personas.approver)
    response = decide(client, approval, decision="approve", comment="Looks right")
    assert response.status_code == 302 and response["Location"] == reverse("approvals:queue")
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        f"Approved “{approval.summary}”."
    ]
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == personas.approver
    assert approval.comment == "Looks right"
    drive(run)
    assert run.status == "completed", run.failure_reason
    assert "getting-started.md" in (docs / "configuration.md").read_text()
    record = page(client, "approvals:review", approval.pk)
    assert "Approved by april-approver" in record and "Looks right" in record


def test_after_a_decision_the_next_pending_request_opens(client, personas, agent, workspace):
    run = a_run(personas, agent, workspace)
    first, second = ask(run, 1), ask(run, 2)
    client.force_login(personas.approver)
    html = page(client, "approvals:review", first.pk)
    assert f'data-next-url="{reverse("approvals:review", args=[second.pk])}"' in html
    response = decide(client, first, decision="reject", comment="Not this one")
    assert response["Location"] == reverse("approvals:review", args=[second.pk])
    assert "Rejected “Request number 1”." in page(client, "approvals:review", second.pk)


def test_a_rejection_without_a_reason_is_refused_and_nothing_is_recorded(
    client, personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    approval = waiting_approval(run)
    client.force_login(personas.approver)
    response = decide(client, approval, decision="reject", comment="   ")
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="error-comment"' in html and "Say why you reject it" in html
    assert 'id="decision-form"' in html  # the form is back, to try again
    assert waiting_approval(run).pk == approval.pk
    assert not ApprovalDecision.objects.filter(approval=approval).exists()


def test_a_rejection_with_a_reason_fails_the_run_with_it(client, personas, agent, workspace, docs):
    run = driven(personas, agent, workspace)
    approval = waiting_approval(run)
    client.force_login(personas.approver)
    response = decide(client, approval, decision="reject", comment="Wrong page entirely")
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "failed" and "Wrong page entirely" in run.failure_reason
    assert (docs / "configuration.md").read_text() == BROKEN


def test_a_decision_on_a_page_older_than_the_request_is_refused(client, personas, agent, workspace):
    approval = ask(a_run(personas, agent, workspace))
    client.force_login(personas.approver)
    response = decide(client, approval, decision="approve", digest="0" * 64)
    assert response.status_code == 400
    assert "not the one your page showed" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=approval.pk).is_pending


@pytest.mark.parametrize("decision", ["", "maybe"])
def test_a_decision_that_is_neither_approve_nor_reject_is_refused(
    client, personas, agent, workspace, decision
):
    approval = ask(a_run(personas, agent, workspace))
    client.force_login(personas.approver)
    response = decide(client, approval, decision=decision)
    assert response.status_code == 400 and "Choose approve or reject" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=approval.pk).is_pending


def test_a_wrong_strong_confirmation_is_refused_and_the_right_one_approves(
    client, personas, agent, workspace, docs
):
    approval = delete_approval(personas, agent, workspace)
    client.force_login(personas.approver)
    response = decide(client, approval, decision="approve", confirm="docs/old.md", comment="ok")
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="error-confirm"' in html and "Type the path exactly (docs/old-faq.md)" in html
    assert 'value="docs/old.md"' in html and ">\nok</textarea>" in html  # kept as typed
    assert ApprovalRequest.objects.get(pk=approval.pk).is_pending
    assert (docs / "old-faq.md").exists()
    response = decide(client, approval, decision="approve", confirm="docs/old-faq.md")
    assert response.status_code == 302
    drive(approval.run_id)
    assert not (docs / "old-faq.md").exists()


def test_an_edit_that_does_not_apply_is_refused_and_kept(client, personas, agent, workspace, docs):
    run = driven(personas, agent, workspace)
    approval = waiting_approval(run)
    broken = approval.diff.replace(" # Configuration", " # Settings")
    assert broken != approval.diff
    client.force_login(personas.approver)
    response = decide(client, approval, decision="approve", edited_diff=broken)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="error-edited_diff"' in html and "does not apply" in html
    assert " # Settings" in html and 'id="edit-patch" hidden' not in html  # still open
    assert waiting_approval(run).pk == approval.pk
    garbage = decide(client, approval, decision="approve", edited_diff="not a patch at all")
    assert garbage.status_code == 400 and "cannot be read" in garbage.content.decode()


def test_an_edit_that_applies_is_approved_recorded_and_committed(
    client, personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    approval = waiting_approval(run)
    edited = approval.diff.replace("+See [the guide](getting-started.md).", "+See the guide.")
    assert edited != approval.diff
    client.force_login(personas.approver)
    response = decide(
        client, approval, decision="approve", edited_diff=edited.replace("\n", "\r\n")
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.edited_diff == edited
    assert ApprovalDecision.objects.get(approval=approval).edited_diff == edited
    drive(run)
    assert run.status == "completed", run.failure_reason
    assert (docs / "configuration.md").read_text() == "# Configuration\n\nSee the guide.\n"
    review = page(client, "approvals:review", approval.pk)
    assert "The change as approved, edited by april-approver" in review
    assert 'id="proposed-change"' in review
    # Wherever the decision shows, the edit is what it shows: the run page, the history.
    run_page = page(client, "runs:detail", run.pk)
    assert "Approved with an edit by april-approver" in run_page
    assert "+See the guide." in run_page
    assert "badge-edited" in page(client, "approvals:history")


def test_an_unchanged_editor_is_an_ordinary_approval(client, personas, agent, workspace, docs):
    run = driven(personas, agent, workspace)
    approval = waiting_approval(run)
    client.force_login(personas.approver)
    decide(client, approval, decision="approve", edited_diff=approval.diff)
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.edited_diff == ""


def test_several_approvers_vote_and_the_page_counts_them(client, personas, agent, workspace):
    approval = ask(a_run(personas, agent, workspace), required_approvals=2)
    client.force_login(personas.approver)
    response = decide(client, approval, decision="approve")
    assert response.status_code == 302
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "Your approval of “Request number 0” is recorded: 1 of 2 approvals."
    ]
    html = page(client, "approvals:review", approval.pk)
    assert "1 of 2 approvals" in html and "You approved this already" in html
    assert 'id="decision-form"' not in html and 'id="edit-toggle"' not in html
    again = decide(client, approval, decision="approve")
    assert again.status_code == 409 and "You approved this already" in again.content.decode()
    client.force_login(personas.admin)
    assert decide(client, approval, decision="approve").status_code == 302
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decisions.count() == 2


def test_the_run_page_links_each_pending_request_to_its_review(client, personas, agent, workspace):
    run = a_run(personas, agent, workspace)
    pending = ask(run, 1)
    decided = ask(run, 2, status="approved")
    client.force_login(personas.approver)
    html = page(client, "runs:detail", run.pk)
    assert reverse("approvals:review", args=[pending.pk]) in html
    assert reverse("approvals:review", args=[decided.pk]) not in html
    client.force_login(personas.ops)
    assert "approvals/" not in page(client, "runs:panel", run.pk)


# --- the history ----------------------------------------------------------------------------
def test_the_history_lists_decided_requests_newest_first(client, personas, agent, workspace):
    run = a_run(personas, agent, workspace)
    now = timezone.now()
    expired = ask(run, 1, status="expired", status_reason="approval expired: no decision")
    rejected = ask(
        run,
        2,
        status="rejected",
        decided_by=personas.approver,
        comment="Wrong file",
        decided_at=now,
    )
    pending = ask(run, 3)
    ApprovalRequest.objects.filter(pk=expired.pk).update(
        requested_at=now - datetime.timedelta(days=3)
    )
    client.force_login(personas.approver)
    html = page(client, "approvals:history")
    assert shown_ids(html) == [str(rejected.pk), str(expired.pk)]
    assert str(pending.pk) not in html
    assert "Wrong file" in html and "approval expired: no decision" in html
    assert re.search(rf'data-approval="{expired.pk}" data-status="expired"', html)
    only_expired = page(client, "approvals:history", status="expired")
    assert shown_ids(only_expired) == [str(expired.pk)]
    assert ">expired</span>" in only_expired and ">rejected</span>" not in only_expired
    assert shown_ids(page(client, "approvals:history", decided_by="april-approver")) == [
        str(rejected.pk)
    ]
    assert shown_ids(page(client, "approvals:history", decided_by="APRIL")) == [str(rejected.pk)]
    assert shown_ids(page(client, "approvals:history", kind="tool_call")) == []
    assert shown_ids(page(client, "approvals:history", agent="tester")) == [
        str(rejected.pk),
        str(expired.pk),
    ]
    today = timezone.localdate().isoformat()
    assert shown_ids(page(client, "approvals:history", date_from=today)) == [str(rejected.pk)]
    assert shown_ids(page(client, "approvals:history", date_to=today)) == [
        str(rejected.pk),
        str(expired.pk),
    ]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"date_from": "2024-13-45"}, "From: Enter a valid date."),
        ({"date_to": "yesterday"}, "To: Enter a valid date."),
        ({"date_from": "2025-02-02", "date_to": "2025-02-01"}, "before the “from” date"),
        ({"status": "lost"}, "Status: Select a valid choice."),
        ({"decided_by": "x" * 200}, "Decided by: Ensure this value has at most 150"),
        ({"agent": "nope"}, "Agent: No agent &#x27;nope&#x27;."),
    ],
)
def test_a_bad_history_filter_gets_a_clear_message(
    client, personas, agent, workspace, params, message
):
    decided = ask(a_run(personas, agent, workspace), status="approved")
    client.force_login(personas.approver)
    response = client.get(reverse("approvals:history"), params)
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html and 'role="alert"' in html
    assert shown_ids(html) == [str(decided.pk)]  # the other filters still apply


def test_the_history_pages_fifty_at_a_time(
    client, personas, agent, workspace, django_assert_max_num_queries
):
    run = a_run(personas, agent, workspace)
    ApprovalRequest.objects.bulk_create(
        ApprovalRequest(run=run, kind="commit", tool_use_id=f"h{i}", status="cancelled")
        for i in range(60)
    )
    client.force_login(personas.admin)
    page(client, "approvals:history")  # session and user cached
    # No query per row; an admin's navigation counts pending policy changes too (one query).
    with django_assert_max_num_queries(10):
        first = page(client, "approvals:history", status="cancelled")
    assert len(shown_ids(first)) == 50 and "page 1 of 2" in first
    assert "?page=2&amp;status=cancelled" in first
    second = page(client, "approvals:history", status="cancelled", page="2")
    assert len(shown_ids(second)) == 10
    assert len(shown_ids(page(client, "approvals:history", page="junk"))) == 50


def test_a_bad_filter_in_the_live_history_comes_back_as_a_fragment_with_its_message(
    client, personas, agent, workspace
):
    client.force_login(personas.approver)
    response = client.get(
        reverse("approvals:history"),
        {"date_from": "2025-02-02", "date_to": "2025-02-01"},
        HTTP_HX_REQUEST="true",
    )
    html = response.content.decode()
    assert response.status_code == 200  # htmx swaps only a success: the message must show
    assert "<html" not in html and "before the “from” date" in html


def test_a_reader_of_approvals_sees_the_record_but_cannot_decide(
    client, personas, agent, workspace
):
    from django.contrib.auth.models import Permission

    approval = ask(a_run(personas, agent, workspace))
    reader = personas.outsider
    reader.user_permissions.add(Permission.objects.get(codename="view_approvalrequest"))
    client.force_login(reader)
    assert client.get(reverse("approvals:queue")).status_code == 403
    assert client.get(reverse("approvals:history")).status_code == 200
    html = page(client, "approvals:review", approval.pk)
    assert "Only approvers decide" in html and 'id="decision-form"' not in html
    assert decide(client, approval, decision="approve").status_code == 403
    assert ApprovalRequest.objects.get(pk=approval.pk).is_pending


def test_a_binary_change_is_described_and_cannot_be_edited(client, personas, agent, workspace):
    diff = "Binary file img/logo.png: 10 bytes before, 12 bytes after.\n"
    approval = ask(a_run(personas, agent, workspace), diff=diff, paths=["img/logo.png"])
    client.force_login(personas.approver)
    html = page(client, "approvals:review", approval.pk)
    assert "img/logo.png" in html and "binary" in html
    assert 'id="edit-toggle"' not in html and 'id="decision-form"' in html


def test_a_huge_diff_shows_its_beginning_and_says_so(client, personas, agent, workspace):
    body = "".join(f"+line {i}\n" for i in range(6000))
    diff = f"--- /dev/null\n+++ b/docs/big.md\n@@ -0,0 +1,6000 @@\n{body}"
    approval = ask(a_run(personas, agent, workspace), diff=diff, paths=["docs/big.md"])
    client.force_login(personas.approver)
    html = page(client, "approvals:review", approval.pk)
    assert 'id="diff-cut"' in html and "6003 lines" in html
    assert "line 4990" in html and "line 5999" not in html.split('id="edited_diff"')[0]


def test_the_review_page_says_when_the_file_changed_since_the_request(
    client, personas, agent, workspace, docs
):
    approval = waiting_approval(driven(personas, agent, workspace))
    client.force_login(personas.approver)
    assert 'id="review-changed"' not in page(client, "approvals:review", approval.pk)
    (docs / "configuration.md").write_text(BROKEN + "\nEdited by someone else.\n")
    html = page(client, "approvals:review", approval.pk)
    assert 'id="review-changed"' in html
    assert "docs/configuration.md changed since the request" in html


def test_the_count_alone_and_the_live_script_only_for_approvers(client, personas, agent, workspace):
    ask(a_run(personas, agent, workspace))
    ask(a_run(personas, agent, workspace, requester=personas.approver), n=1)  # their own
    client.force_login(personas.approver)
    body = client.get(reverse("approvals:count")).content.decode()
    assert re.search(r'<span id="nav-approvals-count"[^>]*>1</span>', body)
    assert "approvals.js" in page(client, "runs:list")
    client.force_login(personas.operator)
    assert "approvals.js" not in page(client, "runs:list")


def test_a_reload_of_the_decide_address_goes_back_to_the_review(client, personas, agent, workspace):
    approval = ask(a_run(personas, agent, workspace))
    client.force_login(personas.approver)
    response = client.get(reverse("approvals:decide", args=[approval.pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("approvals:review", args=[approval.pk])
    client.force_login(personas.operator)
    assert client.get(reverse("approvals:decide", args=[approval.pk])).status_code == 403


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/phish",
        "//evil.example/",
        "javascript:alert(1)",
        "",
        "\\evil",
        "/\\evil.example",
        "/runs/\r\nSet-Cookie: x=1",
    ],
)
def test_a_decision_goes_back_only_to_a_page_of_this_site(
    client, personas, agent, workspace, target
):
    approval = ask(a_run(personas, agent, workspace))
    client.force_login(personas.approver)
    response = decide(client, approval, decision="reject", comment="no", next=target)
    assert response.status_code == 302
    assert response["Location"] == reverse("approvals:queue")  # never the given target
    approval.refresh_from_db()
    assert approval.status == "rejected"


# --- small things (issue 18 point 6) -------------------------------------------------------
def test_the_history_links_each_run_and_says_what_was_decided_on_invalidated_rows(
    client, personas, agent, workspace
):
    run = a_run(personas, agent, workspace)
    decided = ask(run, 1, status="invalidated", decided_by=personas.approver)
    decided.decided_at = timezone.now()
    decided.save(update_fields=["decided_at"])
    ask(a_run(personas, agent, workspace), 2, status="invalidated")
    client.force_login(personas.approver)
    html = page(client, "approvals:history")
    assert f'href="{reverse("runs:detail", args=[run.pk])}"' in html
    assert "approved, then invalidated by the harness before it ran" in html
    assert "invalidated by the harness while pending: nobody decided it" in html


def test_an_approver_on_a_waiting_run_sees_no_empty_actions_card(
    client, personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    assert run.status == "waiting_for_approval"
    client.force_login(personas.approver)
    approver_page = page(client, "runs:detail", run.pk)
    assert 'id="run-actions"' not in approver_page
    client.force_login(personas.operator)  # who may cancel, and is asked to confirm
    operator_page = page(client, "runs:detail", run.pk)
    assert 'id="run-cancel"' in operator_page
    assert 'hx-confirm="Cancel this run?' in operator_page


def test_the_pending_badge_ends_its_link_with_no_trailing_space(client, personas):
    client.force_login(personas.approver)
    html = page(client, "runs:list")
    link = re.search(r'<a href="/approvals/"[^>]*>(.*?)</a>', html, re.S)
    assert link is not None and link.group(1).endswith("</span>")
    assert re.match(r"Approvals<span ", link.group(1))  # nothing underlined beside the badge
