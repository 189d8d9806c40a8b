"""Decide-from-anywhere links (issue 18 point 4, SPEC B14, A3–A5), driven in this process:
a signed link carries only the request's id, the decision, its digest, its expiry and a
nonce; it opens a confirmation page (a GET never decides), decides once on POST, and says
plainly why it cannot when it was used, expired, tampered with, or its request was decided
or changed. The email and the webhook carry a pair of them and never the diff."""

from __future__ import annotations

import datetime
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest
from django.core import mail, signing
from django.db import connections
from django.test import Client
from django.utils import timezone

from approvals.links import SALT, link_claim, link_read, link_token_make
from approvals.models import ApprovalDecision, ApprovalLinkUse, ApprovalRequest
from approvals.notifications import approval_email_send, approval_webhook_send
from harness_console.roles import APPROVER
from policies.models import Policy
from policies.permissions import policy_bump_version
from runs.approval_outcomes import approval_decide
from runs.services import run_create
from tests.conftest import SEEDED, make_user
from tests.helpers import BROKEN, FIX, FIXED, drive
from tests.test_approvals import waiting_commit, waiting_delete
from tests.webhook_sink import WebhookSink

pytestmark = SEEDED

DIFF_LINE = "See [the guide](getting-started.md)."  # only in the commit's diff


def link(approval: ApprovalRequest, decision: str = "approve") -> str:
    return f"/approvals/link/{link_token_make(approval=approval, decision=decision)}/"


def as_user(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def status_of(approval: ApprovalRequest) -> str:
    return ApprovalRequest.objects.get(pk=approval.pk).status


# --- the token -------------------------------------------------------------------------------
def test_a_token_reads_back_what_it_was_made_of_and_nothing_else(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    token = link_token_make(approval=approval, decision="reject")
    claim = link_claim(token)
    assert claim is not None
    assert (claim.approval_id, claim.decision, claim.digest) == (
        str(approval.pk),
        "reject",
        approval.digest,
    )
    assert claim.expires == int(approval.expires_at.timestamp())  # never outlives the request
    payload = signing.loads(token, salt=SALT)
    assert set(payload) == {"a", "d", "g", "e", "n"}
    readable = json.dumps(payload)
    for secret in (DIFF_LINE, "docs/configuration.md", FIX, approval.summary):
        assert secret not in readable and secret not in token
    assert link_read(token=token).state == "valid"
    # Each link is its own: two made for the same request differ.
    assert link_token_make(approval=approval, decision="reject") != token


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # the signature
        lambda t: t[:5] + ("A" if t[5] != "A" else "B") + t[6:],  # the payload
        lambda t: signing.dumps(signing.loads(t, salt=SALT), salt="another-salt"),
        lambda t: signing.dumps({**signing.loads(t, salt=SALT), "d": "x"}, salt=SALT),
        lambda t: "not-a-token",
    ],
)
def test_a_tampered_or_foreign_token_is_refused_with_400(personas, agent, workspace, docs, tamper):
    _, approval = waiting_commit(personas, agent, workspace)
    token = tamper(link_token_make(approval=approval, decision="approve"))
    assert link_read(token=token).state == "bad_signature"
    client = as_user(personas.approver)
    for response in (
        client.get(f"/approvals/link/{token}/"),
        client.post(f"/approvals/link/{token}/", {"comment": "ok"}),
    ):
        assert response.status_code == 400
        assert "altered" in response.content.decode()
    assert status_of(approval) == "pending" and not approval.decisions.exists()


# --- confirming, then deciding once ----------------------------------------------------------
def test_any_number_of_gets_never_decide(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    url, client = link(approval), as_user(personas.approver)
    for _ in range(5):
        page = client.get(url)
        assert page.status_code == 200
        body = page.content.decode()
        assert "This link will <strong>approve</strong>" in body
        assert 'name="csrfmiddlewaretoken"' in body and 'method="post"' in body
        assert f'href="/approvals/{approval.pk}/"' in body  # the full review page
        assert 'name="confirm"' not in body  # a commit needs no typed path
    assert page["Cache-Control"].startswith("max-age=0") or "no-cache" in page["Cache-Control"]
    assert status_of(approval) == "pending" and not approval.decisions.exists()
    assert not ApprovalLinkUse.objects.exists()


def test_a_link_decides_once_and_is_refused_the_second_time(personas, agent, workspace, docs):
    run, approval = waiting_commit(personas, agent, workspace)
    url, client = link(approval), as_user(personas.approver)
    done = client.post(url, {"comment": "looks right"})
    assert done.status_code == 302 and done["Location"] == f"/approvals/{approval.pk}/"
    review = client.get(done["Location"])
    assert "from the link" in review.content.decode()
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decided_by == personas.approver
    decision = ApprovalDecision.objects.get(approval=approval)
    assert decision.shown_digest == approval.digest and decision.comment == "looks right"
    assert drive(run).status == "completed"
    assert (docs / "configuration.md").read_text() == FIXED
    for again in (client.get(url), client.post(url, {"comment": "again"})):
        assert again.status_code == 410
        text = again.content.decode()
        assert "used already, by april-approver" in text and "Nothing was decided" in text
    assert ApprovalDecision.objects.filter(approval=approval).count() == 1
    assert ApprovalLinkUse.objects.filter(approval=approval).count() == 1
    assert run.events.filter(type="approval.decided").count() == 1


def test_a_reject_link_needs_a_reason_and_fails_the_run_with_it(personas, agent, workspace, docs):
    run, approval = waiting_commit(personas, agent, workspace)
    url, client = link(approval, "reject"), as_user(personas.approver)
    page = client.get(url)
    assert "This link will <strong>reject</strong>" in page.content.decode()
    missing = client.post(url, {"comment": "  "})
    assert missing.status_code == 400 and "Say why you reject it" in missing.content.decode()
    assert status_of(approval) == "pending" and not ApprovalLinkUse.objects.exists()
    assert client.post(url, {"comment": "not this way"}).status_code == 302
    run.refresh_from_db()
    assert status_of(approval) == "rejected"
    assert run.status == "failed" and "not this way" in run.failure_reason
    assert (docs / "configuration.md").read_text() == BROKEN


def test_concurrent_uses_of_one_link_decide_once(personas, agent, workspace, docs):
    """The webhook's link reaches a whole channel: six approvers click it at once."""
    run, approval = waiting_commit(personas, agent, workspace)
    url = link(approval)
    approvers = [make_user(f"link-approver-{i}", APPROVER) for i in range(6)]
    clients = [as_user(user) for user in approvers]
    start = threading.Barrier(len(clients))

    def use(i: int) -> int:
        try:
            start.wait()
            return clients[i].post(url, {"comment": f"yes, says {i}"}).status_code
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        codes = list(pool.map(use, range(len(clients))))
    assert sorted(codes) == [302] + [410] * (len(clients) - 1)
    assert status_of(approval) == "approved"
    assert ApprovalDecision.objects.filter(approval=approval).count() == 1
    assert ApprovalLinkUse.objects.filter(approval=approval).count() == 1
    assert run.events.filter(type="approval.decided").count() == 1


# --- refusals --------------------------------------------------------------------------------
def test_a_link_past_its_request_deadline_is_refused_and_decides_nothing(
    personas, agent, workspace, docs
):
    _, approval = waiting_commit(personas, agent, workspace)
    url, client = link(approval), as_user(personas.approver)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    for response in (client.get(url), client.post(url, {"comment": "late"})):
        assert response.status_code == 410 and "expired" in response.content.decode()
    assert not approval.decisions.exists() and not ApprovalLinkUse.objects.exists()


def test_a_link_never_outlives_the_deadline_it_was_made_with(personas, agent, workspace, docs):
    """A deadline moved later (as an admin could) does not lengthen a link already sent."""
    _, approval = waiting_commit(personas, agent, workspace)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - datetime.timedelta(minutes=5)
    )
    approval.refresh_from_db()
    url = link(approval)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() + datetime.timedelta(hours=1)
    )
    response = as_user(personas.approver).post(url, {"comment": "late"})
    assert response.status_code == 410 and "This link expired at" in response.content.decode()
    assert "The request is still pending: decide it on its review page." in (
        response.content.decode()
    )
    assert status_of(approval) == "pending" and not approval.decisions.exists()


def test_a_link_to_a_request_decided_on_its_review_page_says_so(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    url = link(approval, "reject")
    colleague = make_user("colleague-approver", APPROVER)
    approval_decide(approval=approval, user=colleague, decision="approve")
    client = as_user(personas.approver)
    for response in (client.get(url), client.post(url, {"comment": "no"})):
        assert response.status_code == 410
        assert "approved already, by colleague-approver" in response.content.decode()
    assert status_of(approval) == "approved" and approval.decisions.count() == 1


def test_a_link_to_a_request_whose_file_changed_is_refused_saying_what(
    personas, agent, workspace, docs
):
    _, approval = waiting_commit(personas, agent, workspace)
    url, client = link(approval), as_user(personas.approver)
    (docs / "configuration.md").write_text("Added by a colleague.\n\n" + BROKEN)
    for response in (client.get(url), client.post(url, {"comment": "ok"})):
        assert response.status_code == 410
        assert "docs/configuration.md changed since the request" in response.content.decode()
    assert status_of(approval) == "pending" and not approval.decisions.exists()


def test_a_link_is_refused_once_the_policy_changed_or_the_request_was_asked_again(
    personas, agent, workspace
):
    _, approval = waiting_delete(personas, agent, workspace)
    url, client = link(approval), as_user(personas.approver)
    policy_bump_version(policy=Policy.objects.get(name="default"))
    response = client.post(url, {"confirm": "docs/old-faq.md"})
    assert response.status_code == 410 and "the policy changed" in response.content.decode()
    assert status_of(approval) == "pending" and not approval.decisions.exists()
    # A link whose digest is not the request's (a forged or stale claim) is refused too.
    claim = signing.loads(link_token_make(approval=approval, decision="approve"), salt=SALT)
    forged = signing.dumps({**claim, "g": "0" * 64}, salt=SALT)
    assert link_read(token=forged).state == "changed"
    # Invalidated and asked again: the old link says so.
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        status="invalidated", status_reason="the policy changed"
    )
    refused = client.get(url)
    assert refused.status_code == 410 and "it was asked again" in refused.content.decode()
    assert (workspace.root_path / "docs" / "old-faq.md").exists()


def test_the_requester_of_the_run_is_refused_even_as_an_admin(personas, agent, workspace, docs):
    run = drive(
        run_create(
            agent=agent, workspace=workspace, requester=personas.admin, request=FIX, dispatch=False
        )
    )
    approval = ApprovalRequest.objects.get(run=run, status="pending")
    url, client = link(approval), as_user(personas.admin)
    for response in (client.get(url), client.post(url, {"comment": "mine"})):
        assert response.status_code == 403 and "your own run" in response.content.decode()
    assert status_of(approval) == "pending" and not ApprovalLinkUse.objects.exists()


@pytest.mark.parametrize("who", ["operator", "ops", "outsider"])
def test_only_approvers_open_a_link(personas, agent, workspace, docs, who):
    _, approval = waiting_commit(personas, agent, workspace)
    url, client = link(approval), as_user(getattr(personas, who))
    assert client.get(url).status_code == 403
    assert client.post(url, {"comment": "x"}).status_code == 403
    assert status_of(approval) == "pending"


def test_a_link_opened_logged_out_goes_to_the_login_and_back(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    url = link(approval)
    for response in (Client().get(url), Client().post(url)):
        assert response.status_code == 302
        target = urlsplit(response["Location"])
        assert target.path == "/login/" and "next=" in target.query
    assert status_of(approval) == "pending"


def test_a_link_posted_without_the_csrf_token_decides_nothing(personas, agent, workspace, docs):
    _, approval = waiting_commit(personas, agent, workspace)
    client = Client(enforce_csrf_checks=True)
    client.force_login(personas.approver)
    assert client.post(link(approval), {"comment": "x"}).status_code == 403
    assert status_of(approval) == "pending"


def test_an_l3_delete_link_still_needs_the_typed_path(personas, agent, workspace):
    run, approval = waiting_delete(personas, agent, workspace)
    assert approval.strong_confirmation
    url, client = link(approval), as_user(personas.approver)
    page = client.get(url).content.decode()
    assert 'name="confirm"' in page and "<code>docs/old-faq.md</code>" in page
    for typed in ("", "docs/other.md"):
        wrong = client.post(url, {"confirm": typed})
        assert wrong.status_code == 400 and "Type the path exactly" in wrong.content.decode()
    assert status_of(approval) == "pending" and not ApprovalLinkUse.objects.exists()
    assert client.post(url, {"confirm": "docs/old-faq.md"}).status_code == 302
    assert status_of(approval) == "approved"
    assert drive(run).status == "completed"
    assert not (workspace.root_path / "docs" / "old-faq.md").exists()
    # Its reject link asks for a reason, not the path.
    assert 'name="confirm"' not in client.get(link(approval, "reject")).content.decode()


# --- the email and the webhook ---------------------------------------------------------------
@pytest.fixture
def webhook():
    sink = WebhookSink()
    yield sink.url, sink.posts
    sink.close()


def test_the_email_and_the_webhook_carry_both_links_and_never_the_diff(
    personas, agent, workspace, docs, settings, webhook
):
    url, received = webhook
    settings.HARNESS_APPROVAL_NOTIFY_RISK = "low"
    settings.HARNESS_APPROVAL_WEBHOOK_URL = url
    settings.HARNESS_BASE_URL = "https://console.example.org"
    personas.approver.email = "april@example.com"
    personas.approver.save()
    bob = make_user("bob-approver", APPROVER)
    bob.email = "bob@example.com"
    bob.save()
    _, approval = waiting_commit(personas, agent, workspace)
    assert DIFF_LINE in approval.diff
    mail.outbox.clear()
    assert approval_email_send(approval_id=approval.pk, event="requested") == 2
    links = []
    for message in mail.outbox:
        assert DIFF_LINE not in message.body and FIX not in message.body
        lines = message.body.splitlines()
        approve = [line for line in lines if line.startswith("Approve: ")]
        reject = [line for line in lines if line.startswith("Reject: ")]
        assert len(approve) == len(reject) == 1
        links += [approve[0].removeprefix("Approve: "), reject[0].removeprefix("Reject: ")]
    assert len(set(links)) == 4  # each approver's own pair: one's use leaves the other's
    assert all(u.startswith("https://console.example.org/approvals/link/") for u in links)
    assert approval_webhook_send(approval_id=approval.pk, event="requested")
    raw = received[-1]["raw"].decode()
    assert DIFF_LINE not in raw and FIX not in raw
    body = json.loads(raw)["approval"]
    assert body["url"].endswith(f"/approvals/{approval.pk}/")
    hooked = {decision: body[f"{decision}_url"] for decision in ("approve", "reject")}
    for decision, absolute in hooked.items():
        token = urlsplit(absolute).path.removeprefix("/approvals/link/").rstrip("/")
        claim = link_claim(token)
        assert claim is not None and claim.decision == decision
        assert claim.approval_id == str(approval.pk) and claim.digest == approval.digest
    # The email's approve link works once, from the console.
    client = as_user(personas.approver)
    assert client.post(urlsplit(links[0]).path, {"comment": "from my phone"}).status_code == 302
    assert status_of(approval) == "approved"


def test_an_email_past_the_deadline_gets_no_links(personas, agent, workspace, docs, settings):
    settings.HARNESS_APPROVAL_NOTIFY_RISK = "low"
    personas.approver.email = "april@example.com"
    personas.approver.save()
    _, approval = waiting_commit(personas, agent, workspace)
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    mail.outbox.clear()
    assert approval_email_send(approval_id=approval.pk, event="reminder") == 1
    (message,) = mail.outbox
    assert "/approvals/link/" not in message.body and "Approve:" not in message.body
    assert f"/approvals/{approval.pk}/" in message.body  # the review link stays
