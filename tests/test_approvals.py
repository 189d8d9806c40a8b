"""Approvals (issue 6, SPEC A3–A6, P4, R8), driven in this process: separation of duties,
atomic decisions under 50 concurrent approvers, binding to the exact action, expiry and
reminders, M of N, edits, notifications, the immutable audit trail, rollback bytes."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.models import ApprovalDecision, ApprovalRequest, ImmutableRecord
from approvals.notifications import approval_email_send, approval_webhook_send
from approvals.outcomes import AlreadyDecided
from approvals.tasks import reminders_send
from harness_console.roles import APPROVER
from policies.models import Policy
from policies.permissions import policy_bump_version
from runs.approval_outcomes import approval_decide, approvals_expire_due
from runs.models import Message, Run, ToolCall
from runs.services import run_create
from tests.conftest import SEEDED, make_user
from tests.helpers import BROKEN, FIX, FIXED, drive, driven
from tests.webhook_sink import WebhookSink

pytestmark = SEEDED


def waiting_commit(personas, agent, workspace) -> tuple[Run, ApprovalRequest]:
    run = driven(personas, agent, workspace)
    assert run.status == "waiting_for_approval", run.failure_reason
    return run, ApprovalRequest.objects.get(run=run, status="pending")


def waiting_delete(personas, agent, workspace) -> tuple[Run, ApprovalRequest]:
    (workspace.root_path / "docs").mkdir(exist_ok=True)
    (workspace.root_path / "docs" / "old-faq.md").write_text("# Old FAQ\n")
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Delete the old FAQ page",
        dispatch=False,
    )
    from runs.services import run_answer

    drive(run)
    run = drive(run_answer(run=run, user=personas.operator, answers={"path": "docs/old-faq.md"}))
    assert run.status == "waiting_for_approval", run.failure_reason
    return run, ApprovalRequest.objects.get(run=run, status="pending")


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# --- separation of duties (A4) ---------------------------------------------------------------
def test_a_requester_never_approves_their_own_run_in_the_service_or_the_api(
    personas, agent, workspace, docs
):
    # The admin holds every permission, approving included: still not on their own run.
    run = drive(
        run_create(
            agent=agent, workspace=workspace, requester=personas.admin, request=FIX, dispatch=False
        )
    )
    approval = ApprovalRequest.objects.get(run=run)
    with pytest.raises(PermissionDenied, match="own run"):
        approval_decide(approval=approval, user=personas.admin, decision="approve")
    response = api(personas.admin).post(
        f"/api/approvals/{approval.pk}/decide/", {"decision": "approve"}, format="json"
    )
    assert response.status_code == 403 and "own run" in response.json()["detail"]
    approval.refresh_from_db()
    assert approval.status == "pending" and not approval.decisions.exists()


@pytest.mark.parametrize("who", ["operator", "ops", "outsider"])
def test_only_approvers_list_or_decide(personas, agent, workspace, docs, who):
    _, approval = waiting_commit(personas, agent, workspace)
    user = getattr(personas, who)
    client = api(user)
    assert client.get("/api/approvals/").status_code == 403
    assert client.get(f"/api/approvals/{approval.pk}/").status_code == 403
    decided = client.post(
        f"/api/approvals/{approval.pk}/decide/", {"decision": "approve"}, format="json"
    )
    assert decided.status_code == 403
    with pytest.raises(PermissionDenied):
        approval_decide(approval=approval, user=user, decision="approve")
    assert APIClient().get("/api/approvals/").status_code == 401
    approval.refresh_from_db()
    assert approval.status == "pending"


# --- atomic decisions (A3) -------------------------------------------------------------------
def test_fifty_concurrent_decisions_on_one_request_one_wins_the_rest_get_409(
    personas, agent, workspace, docs
):
    _, approval = waiting_commit(personas, agent, workspace)
    approvers = [make_user(f"approver-{i}", APPROVER) for i in range(50)]
    start = threading.Barrier(50)

    def decide(i: int) -> int:
        try:
            client = api(approvers[i])
            start.wait()
            body = (
                {"decision": "approve", "digest": approval.digest}
                if i % 2
                else {"decision": "reject", "comment": f"no, says {i}", "digest": approval.digest}
            )
            return client.post(
                f"/api/approvals/{approval.pk}/decide/", body, format="json"
            ).status_code
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=50) as pool:
        codes = list(pool.map(decide, range(50)))
    assert sorted(codes) == [200] + [409] * 49
    approval.refresh_from_db()
    assert approval.status in ("approved", "rejected")
    assert ApprovalDecision.objects.filter(approval=approval).count() == 1
    decision = ApprovalDecision.objects.get(approval=approval)
    assert decision.user == approval.decided_by and decision.shown_digest == approval.digest
    assert approval.run.events.filter(type="approval.decided").count() == 1


# --- binding ---------------------------------------------------------------------------------
def test_a_file_changed_between_request_and_approval_invalidates_it_and_asks_again(
    personas, agent, workspace, docs
):
    run, approval = waiting_commit(personas, agent, workspace)
    assert approval.file_hashes == {
        "docs/configuration.md": hashlib.sha256(BROKEN.encode()).hexdigest()
    }
    assert len(approval.digest) == 64 and approval.policy_version is not None
    # A colleague's line away from the run's change: the draft is rebased onto it (an
    # adjacent one would conflict and go back to the model: tests/test_rebase.py).
    meanwhile = "Added by a colleague.\n\n" + BROKEN
    (docs / "configuration.md").write_text(meanwhile)
    approval_decide(approval=approval, user=personas.approver, decision="approve")
    run = drive(run)
    approval.refresh_from_db()
    assert approval.status == "invalidated"
    assert "docs/configuration.md changed since the request" in approval.status_reason
    assert (docs / "configuration.md").read_text() == meanwhile  # nothing committed
    assert not ToolCall.objects.filter(run=run, tool="commitDraft").exists()
    # Asked again, showing the diff against the file as it is now.
    assert run.status == "waiting_for_approval", run.failure_reason
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert again.pk != approval.pk and "+Added by a colleague." not in again.diff
    assert (
        again.file_hashes["docs/configuration.md"] == hashlib.sha256(meanwhile.encode()).hexdigest()
    )
    assert "approval.invalidated" in run.events.values_list("type", flat=True)
    approval_decide(approval=again, user=personas.approver, decision="approve")
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert (docs / "configuration.md").read_text() == "Added by a colleague.\n\n" + FIXED


def test_a_policy_edit_after_approval_invalidates_a_tool_call_approval(personas, agent, workspace):
    run, approval = waiting_delete(personas, agent, workspace)
    approval_decide(
        approval=approval, user=personas.approver, decision="approve", confirm="docs/old-faq.md"
    )
    policy_bump_version(policy=Policy.objects.get(name="default"))
    run = drive(run)
    approval.refresh_from_db()
    assert approval.status == "invalidated"
    assert "the policy changed" in approval.status_reason
    assert (workspace.root_path / "docs" / "old-faq.md").exists()
    assert run.status == "waiting_for_approval"
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert again.tool_use_id == approval.tool_use_id and again.policy_version > (
        approval.policy_version or 0
    )
    approval_decide(
        approval=again, user=personas.approver, decision="approve", confirm="docs/old-faq.md"
    )
    assert drive(run).status == "completed"
    assert not (workspace.root_path / "docs" / "old-faq.md").exists()


def test_a_page_showing_another_digest_cannot_decide(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    with pytest.raises(ValidationError, match="reload"):
        approval_decide(
            approval=approval, user=personas.approver, decision="approve", digest="0" * 64
        )
    response = api(personas.approver).post(
        f"/api/approvals/{approval.pk}/decide/",
        {"decision": "approve", "digest": "not hex"},
        format="json",
    )
    assert response.status_code == 400 and "digest" in response.json()
    approval.refresh_from_db()
    assert approval.status == "pending"


# --- expiry and reminders (A5) ---------------------------------------------------------------
def test_an_overdue_request_expires_and_its_run_fails_with_approval_expired(
    personas, agent, workspace, docs
):
    run, approval = waiting_commit(personas, agent, workspace)
    policy = Policy.objects.get(name="default")
    deadline = approval.requested_at + datetime.timedelta(minutes=policy.approval_expiry_minutes)
    assert abs(approval.expires_at - deadline) < datetime.timedelta(seconds=1)
    assert approvals_expire_due() == 0  # not yet
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert approvals_expire_due() == 1
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == "expired" and approval.decided_by is None
    assert run.status == "failed" and run.failure_reason.startswith("approval expired")
    assert "rejected" not in run.failure_reason
    assert not run.steps.filter(status="running").exists()
    body = api(personas.approver).get(f"/api/approvals/{approval.pk}/").json()
    assert body["status"] == "expired" and body["status_reason"].startswith("approval expired")
    # A decision after expiry is refused, and nothing is recorded for it.
    with pytest.raises(AlreadyDecided, match="expired"):
        approval_decide(approval=approval, user=personas.approver, decision="approve")
    assert not approval.decisions.exists()
    assert approvals_expire_due() == 0


def test_a_reminder_goes_out_once_before_expiry(personas, agent, workspace, docs, settings):
    settings.HARNESS_APPROVAL_NOTIFY_RISK = "low"
    personas.approver.email = "april@example.com"
    personas.approver.save()
    _, approval = waiting_commit(personas, agent, workspace)
    assert approval.remind_at is not None and approval.remind_at < approval.expires_at
    mail.outbox.clear()
    assert reminders_send() == 0
    ApprovalRequest.objects.filter(pk=approval.pk).update(remind_at=timezone.now())
    assert reminders_send() == 1
    assert reminders_send() == 0
    approval.refresh_from_db()
    assert approval.reminded_at is not None


# --- M of N (A4) -----------------------------------------------------------------------------
def test_an_l3_action_needs_two_distinct_approvers_when_the_policy_says_so(
    personas, agent, workspace
):
    Policy.objects.filter(name="default").update(l3_approvals_required=2)
    run, approval = waiting_delete(personas, agent, workspace)
    assert approval.required_approvals == 2
    approval = approval_decide(
        approval=approval, user=personas.approver, decision="approve", confirm="docs/old-faq.md"
    ).approval
    assert approval.status == "pending"
    run.refresh_from_db()
    assert run.status == "waiting_for_approval"
    with pytest.raises(AlreadyDecided, match="1 more approver"):
        approval_decide(
            approval=approval,
            user=personas.approver,
            decision="approve",
            confirm="docs/old-faq.md",
        )
    assert (workspace.root_path / "docs" / "old-faq.md").exists()
    # An edit by one of several approvers is refused: it would bypass the others.
    second = make_user("bob-approver", APPROVER)
    approval = approval_decide(
        approval=approval, user=second, decision="approve", confirm="docs/old-faq.md"
    ).approval
    assert approval.status == "approved" and approval.decided_by == second
    assert list(approval.decisions.values_list("user__username", flat=True)) == [
        "april-approver",
        "bob-approver",
    ]
    assert drive(run).status == "completed"
    assert not (workspace.root_path / "docs" / "old-faq.md").exists()


def test_an_l2_action_still_needs_one_approver(personas, agent, workspace, docs):
    Policy.objects.filter(name="default").update(l3_approvals_required=3)
    _, approval = waiting_commit(personas, agent, workspace)
    assert approval.required_approvals == 1


# --- edit, then approve (A3) -----------------------------------------------------------------
def test_an_edited_patch_is_validated_then_committed_instead(personas, agent, workspace, docs):
    run, approval = waiting_commit(personas, agent, workspace)
    edited = approval.diff.replace(
        "+See [the guide](getting-started.md).",
        "+See [the getting started guide](getting-started.md).",
    )
    assert edited != approval.diff
    broken = approval.diff.replace(" # Configuration", " # Konfiguration")
    with pytest.raises(ValidationError, match="does not apply"):
        approval_decide(
            approval=approval, user=personas.approver, decision="approve", edited_diff=broken
        )
    with pytest.raises(ValidationError, match="Only an approval"):
        approval_decide(
            approval=approval,
            user=personas.approver,
            decision="reject",
            comment="no",
            edited_diff=edited,
        )
    approval.refresh_from_db()
    assert approval.status == "pending" and not approval.decisions.exists()
    approval_decide(
        approval=approval,
        user=personas.approver,
        decision="approve",
        edited_diff=edited.replace("\n", "\r\n"),  # as a browser's textarea sends it
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert (docs / "configuration.md").read_text() == (
        "# Configuration\n\nSee [the getting started guide](getting-started.md).\n"
    )
    commit = ToolCall.objects.get(run=run, tool="commitDraft")
    assert commit.output["modified_by_approver"] == "april-approver"
    decision = ApprovalDecision.objects.get(approval=approval)
    assert decision.edited_diff == edited


def test_an_edited_commit_draft_call_runs_the_edit_and_tells_the_model(
    personas, agent, workspace, docs
):
    """The model calls commitDraft itself; the policy asks; the approver edits the patch:
    the edit is what lands, and the tool result the model reads says so."""
    run = drive(
        run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request="Fix the broken link in docs/configuration.md and commit it yourself",
            dispatch=False,
        )
    )
    assert run.status == "waiting_for_approval", run.failure_reason
    approval = ApprovalRequest.objects.get(run=run, status="pending")
    assert (approval.kind, approval.tool) == ("tool_call", "commitDraft")
    edited = approval.diff.replace("(getting-started.md)", "(getting-started.md#install)")
    approval_decide(
        approval=approval, user=personas.approver, decision="approve", edited_diff=edited
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert (docs / "configuration.md").read_text() == (
        "# Configuration\n\nSee [the guide](getting-started.md#install).\n"
    )
    result = Message.objects.get(run=run, tool_use_id="toolu_commit_c", kind="tool_result")
    told = json.dumps(result.content)
    assert "modified_by_approver" in told and "april-approver edited your change" in told
    assert "getting-started.md#install" in told


def test_a_tool_without_a_patch_cannot_be_edited(personas, agent, workspace):
    _, approval = waiting_delete(personas, agent, workspace)
    with pytest.raises(ValidationError, match="no patch to edit"):
        approval_decide(
            approval=approval,
            user=personas.approver,
            decision="approve",
            confirm="docs/old-faq.md",
            edited_diff="--- a/docs/old-faq.md\n+++ b/docs/old-faq.md\n@@ -1 +1 @@\n-x\n+y\n",
        )


# --- audit (A6) ------------------------------------------------------------------------------
def test_decisions_cannot_be_changed_or_deleted(personas, agent, workspace, docs, client):
    _, approval = waiting_commit(personas, agent, workspace)
    approval_decide(approval=approval, user=personas.approver, decision="approve")
    decision = ApprovalDecision.objects.get(approval=approval)
    decision.comment = "rewritten"
    with pytest.raises(ImmutableRecord):
        decision.save()
    with pytest.raises(ImmutableRecord):
        decision.delete()
    with pytest.raises(ImmutableRecord):
        ApprovalDecision.objects.filter(pk=decision.pk).update(comment="rewritten")
    with pytest.raises(ImmutableRecord):
        ApprovalDecision.objects.all().delete()
    # The API has no way to write an approval but deciding it.
    client_api = api(personas.admin)
    url = f"/api/approvals/{approval.pk}/"
    for method in ("put", "patch", "delete"):
        assert (
            getattr(client_api, method)(url, {"status": "rejected"}, format="json").status_code
            == 405
        )
    # The admin shows it and changes nothing.
    client.force_login(personas.admin)
    change = f"/admin/approvals/approvalrequest/{approval.pk}/change/"
    assert client.get(change).status_code == 200
    assert client.post(change, {"status": "rejected", "comment": "x"}).status_code == 403
    delete = f"/admin/approvals/approvalrequest/{approval.pk}/delete/"
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert client.get("/admin/approvals/approvaldecision/add/").status_code == 403
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.comment == ""
    assert ApprovalDecision.objects.get(pk=decision.pk).comment == ""


# --- notifications ---------------------------------------------------------------------------
@pytest.fixture
def webhook():
    sink = WebhookSink()
    yield sink.url, sink.posts
    sink.close()


def test_approvers_get_an_email_and_the_webhook_a_signed_json_body(
    personas, agent, workspace, settings, webhook
):
    url, received = webhook
    settings.HARNESS_APPROVAL_NOTIFY_RISK = "medium"
    settings.HARNESS_APPROVAL_WEBHOOK_URL = url
    settings.HARNESS_APPROVAL_WEBHOOK_SECRET = "hook-secret"
    personas.approver.email = "april@example.com"
    personas.approver.save()
    personas.operator.email = "otto@example.com"  # the requester: not told to approve
    personas.operator.save()
    personas.ops.email = "olga@example.com"  # not an approver
    personas.ops.save()
    _, approval = waiting_delete(personas, agent, workspace)  # deleting: high risk
    assert approval.risk in ("medium", "high")
    mail.outbox.clear()
    assert approval_email_send(approval_id=approval.pk, event="requested") == 1
    (message,) = mail.outbox
    assert message.to == ["april@example.com"]
    assert "Approval needed" in message.subject and f"/approvals/{approval.pk}/" in message.body
    assert approval_webhook_send(approval_id=approval.pk, event="requested")
    headers, body = received[-1]["headers"], received[-1]["raw"]
    payload = json.loads(body)
    assert payload["event"] == "approval.requested"
    assert payload["approval"]["id"] == str(approval.pk)
    assert payload["run"]["requester"] == "otto-operator"
    assert "diff" not in payload["approval"]
    assert "request" not in payload["run"]  # the requester's own words stay in the console
    stamp = headers["X-Harness-Timestamp"]
    expected = hmac.new(b"hook-secret", stamp.encode() + b"." + body, hashlib.sha256)
    assert headers["X-Harness-Signature"] == f"sha256={expected.hexdigest()}"
    # Below the threshold: neither.
    settings.HARNESS_APPROVAL_NOTIFY_RISK = "high"
    ApprovalRequest.objects.filter(pk=approval.pk).update(risk="low")
    mail.outbox.clear()
    assert approval_email_send(approval_id=approval.pk, event="requested") == 0
    assert not approval_webhook_send(approval_id=approval.pk, event="requested")
    assert mail.outbox == []


def test_a_failing_webhook_raises_for_the_task_to_retry(personas, agent, workspace, settings):
    from approvals.notifications import WebhookFailed

    settings.HARNESS_APPROVAL_NOTIFY_RISK = "low"
    settings.HARNESS_APPROVAL_WEBHOOK_URL = "http://127.0.0.1:9/nothing-listens-here"
    _, approval = waiting_delete(personas, agent, workspace)
    with pytest.raises(WebhookFailed):
        approval_webhook_send(approval_id=approval.pk, event="requested")


# --- rollback from the console (R8) ----------------------------------------------------------
def test_rollback_restores_exact_bytes_and_refuses_when_a_file_changed_since(
    personas, agent, workspace, docs
):
    original = b"# Configuration\r\n\r\nSee [the guide](getting-startd.md).\r\nno newline at end"
    (docs / "configuration.md").write_bytes(original)
    run, approval = waiting_commit(personas, agent, workspace)
    approval_decide(approval=approval, user=personas.approver, decision="approve")
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    committed = (docs / "configuration.md").read_bytes()
    assert committed != original
    # Someone edits the file after the run: rolling back would lose their change.
    (docs / "configuration.md").write_bytes(committed + b"\nA later edit.\n")
    refused = api(personas.approver).post(f"/api/runs/{run.pk}/rollback/")
    assert refused.status_code == 409
    assert "docs/configuration.md" in refused.json()["detail"]
    assert (docs / "configuration.md").read_bytes() == committed + b"\nA later edit.\n"
    run.refresh_from_db()
    assert run.status == "completed"
    # Put their edit back out, and the rollback restores the very bytes of before.
    (docs / "configuration.md").write_bytes(committed)
    assert api(personas.operator).post(f"/api/runs/{run.pk}/rollback/").status_code == 403
    done = api(personas.approver).post(f"/api/runs/{run.pk}/rollback/")
    assert done.status_code == 200 and done.json()["status"] == "rolled_back"
    assert (docs / "configuration.md").read_bytes() == original


def test_a_decision_after_the_deadline_is_refused_even_before_the_sweep(
    personas, agent, workspace, docs
):
    run, approval = waiting_commit(personas, agent, workspace)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    approval.refresh_from_db()
    with pytest.raises(AlreadyDecided, match="expired"):
        approval_decide(approval=approval, user=personas.approver, decision="approve")
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == "expired" and not approval.decisions.exists()
    assert run.status == "failed" and run.failure_reason.startswith("approval expired")


def test_a_decision_that_waited_for_the_lock_past_the_deadline_is_refused(
    personas, agent, workspace, docs
):
    """Found: decisions recorded up to 23 ms late. The deadline is judged under the lock
    that records the decision, not before waiting for it."""
    run = driven(personas, agent, workspace)
    approval = ApprovalRequest.objects.get(run=run, status="pending")
    deadline = timezone.now() + datetime.timedelta(seconds=0.5)
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=deadline)
    approval.refresh_from_db()
    locked, release, outcome = threading.Event(), threading.Event(), {}

    def hold_the_run() -> None:
        try:
            with transaction.atomic():  # the run's row (PostgreSQL), the write lock (SQLite)
                Run.objects.select_for_update().filter(pk=run.pk).update(event_seq=F("event_seq"))
                locked.set()
                release.wait(10)
        finally:
            connections.close_all()

    def decide() -> None:
        try:
            approval_decide(approval=approval, user=personas.approver, decision="approve")
            outcome["decided"] = True
        except AlreadyDecided as error:
            outcome["refused"] = str(error)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_run)
    holder.start()
    assert locked.wait(10)
    decider = threading.Thread(target=decide)
    decider.start()
    while timezone.now() <= deadline + datetime.timedelta(seconds=0.2):
        threading.Event().wait(0.05)
    release.set()
    holder.join(10)
    decider.join(30)
    assert "expired" in outcome.get("refused", ""), outcome
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == "expired" and not approval.decisions.exists()
    assert run.status == "failed" and run.failure_reason.startswith("approval expired")


def test_the_shown_digest_is_recorded_only_when_the_page_sent_one(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    approval_decide(approval=approval, user=personas.approver, decision="approve")
    assert ApprovalDecision.objects.get(approval=approval).shown_digest == ""


def test_remember_is_refused_where_a_grant_would_reach_further_than_the_approver(
    personas, agent, workspace
):
    Policy.objects.filter(name="default").update(l3_approvals_required=2)
    _, approval = waiting_delete(personas, agent, workspace)
    with pytest.raises(ValidationError, match="several approvers"):
        approval_decide(
            approval=approval,
            user=personas.approver,
            decision="approve",
            confirm="docs/old-faq.md",
            remember=True,
        )
    assert not approval.decisions.exists()
    # A call with no path (a shell command) would be allowed whatever its arguments.
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        paths=[], required_approvals=1, tool="dangerous", confirm_text="rm -rf docs"
    )
    approval.refresh_from_db()
    with pytest.raises(ValidationError, match="every dangerous call"):
        approval_decide(
            approval=approval,
            user=personas.approver,
            decision="approve",
            confirm="rm -rf docs",
            remember=True,
        )
    with pytest.raises(ValidationError, match=r"Type it exactly \(rm -rf docs\)"):
        approval_decide(approval=approval, user=personas.approver, decision="approve")


def test_an_invalidated_approval_takes_its_remembered_grant_with_it(personas, agent, workspace):
    run, approval = waiting_delete(personas, agent, workspace)
    approval_decide(
        approval=approval,
        user=personas.approver,
        decision="approve",
        confirm="docs/old-faq.md",
        remember=True,
    )
    approval.refresh_from_db()
    grant = approval.grant
    assert grant is not None and grant.revoked_at is None
    (workspace.root_path / "docs" / "old-faq.md").write_text("# Old FAQ, edited since\n")
    run = drive(run)
    approval.refresh_from_db()
    grant.refresh_from_db()
    assert approval.status == "invalidated" and grant.revoked_at is not None
    # Asked again: the grant did not let the delete through unasked.
    assert run.status == "waiting_for_approval"
    assert (workspace.root_path / "docs" / "old-faq.md").exists()
    assert ApprovalRequest.objects.filter(run=run, status="pending").count() == 1


def test_an_edit_must_keep_every_file_and_delete_none(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    deleting = (
        "--- a/docs/configuration.md\n+++ /dev/null\n@@ -1,3 +0,0 @@\n"
        "-# Configuration\n-\n-See [the guide](getting-startd.md).\n"
    )
    with pytest.raises(ValidationError, match="cannot delete"):
        approval_decide(
            approval=approval, user=personas.approver, decision="approve", edited_diff=deleting
        )
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        paths=["docs/configuration.md", "docs/getting-started.md"]
    )
    approval.refresh_from_db()
    edited = approval.diff.replace("(getting-started.md)", "(getting-started.md#top)")
    with pytest.raises(ValidationError, match=r"leaves out docs/getting-started\.md"):
        approval_decide(
            approval=approval, user=personas.approver, decision="approve", edited_diff=edited
        )
    assert not approval.decisions.exists()


def test_an_edit_of_a_file_that_is_not_utf8_is_refused(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    (docs / "configuration.md").write_bytes(b"# Configuration\xff\n")
    edited = approval.diff.replace("(getting-started.md)", "(getting-started.md#top)")
    with pytest.raises(ValidationError, match="not UTF-8"):
        approval_decide(
            approval=approval, user=personas.approver, decision="approve", edited_diff=edited
        )


def test_a_commit_the_policy_strongly_confirms_asks_to_type_the_path(
    personas, agent, workspace, docs
):
    from policies.models import PolicyRule

    PolicyRule.objects.create(
        policy=Policy.objects.get(name="default"),
        order=0,
        key="config-strong",
        tool="commitDraft",
        path="docs/configuration.md",
        decision="ask_strong",
    )
    _, approval = waiting_commit(personas, agent, workspace)
    assert approval.kind == "commit" and approval.strong_confirmation
    assert approval.confirm_expected == "docs/configuration.md"
    with pytest.raises(ValidationError, match="Type the path exactly"):
        approval_decide(approval=approval, user=personas.approver, decision="approve")
    approval_decide(
        approval=approval,
        user=personas.approver,
        decision="approve",
        confirm="docs/configuration.md",
    )
