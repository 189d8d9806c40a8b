"""A commit that changes nothing is never approved (issue 18 point 1: a re-asked request
with no content was offered Approve): the review page, the run page and a link offer no
Approve for a commit whose diff shows no change; the decision refuses it on every door
(the page, the API, a link); and an approver's edit that leaves every file as it is, or
an editor emptied before approving, is refused as well. Nothing is recorded."""

from __future__ import annotations

import hashlib

from django.urls import reverse
from rest_framework.test import APIClient

from approvals.core.patch import shows_a_change
from approvals.links import link_token_make
from approvals.models import ApprovalDecision, ApprovalRequest
from runs.services import run_create
from tests.conftest import SEEDED
from tests.helpers import BROKEN, FIX, driven

pytestmark = SEEDED

NOTHING = "This request changes no file: approving it would commit nothing."


def empty_commit(personas, agent, workspace, docs, **fields) -> ApprovalRequest:
    """A pending commit of docs/configuration.md whose diff shows no change, however it
    came to be asked (the harness itself drops such drafts before asking)."""
    run = run_create(
        agent=agent, workspace=workspace, requester=personas.operator, request=FIX, dispatch=False
    )
    draft = workspace.drafts_path / str(run.pk) / "docs" / "configuration.md"
    draft.parent.mkdir(parents=True)
    draft.write_text(BROKEN)  # the draft reads as its file: nothing has moved since
    defaults = {
        "kind": "commit",
        "tool": "commitDraft",
        "tool_use_id": "commit:nothing",
        "summary": "Commit 1 file(s): docs/configuration.md",
        "paths": ["docs/configuration.md"],
        "diff": "",
        "digest": "e" * 64,
        "policy_version": 1,
        "file_hashes": {"docs/configuration.md": hashlib.sha256(BROKEN.encode()).hexdigest()},
    }
    return ApprovalRequest.objects.create(run=run, **{**defaults, **fields})


def api_as(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def test_what_shows_a_change():
    assert not shows_a_change("")
    assert not shows_a_change("--- a/x.md\n+++ b/x.md\n")
    assert shows_a_change("--- a/x.md\n+++ b/x.md\n@@ -1 +1 @@\n-a\n+b\n")
    assert shows_a_change("Binary file x.png: 3 bytes before, 4 bytes after.\n")


def test_no_door_approves_a_commit_that_changes_nothing(client, personas, agent, workspace, docs):
    approval = empty_commit(personas, agent, workspace, docs)
    assert approval.approve_refusal.startswith(NOTHING)
    client.force_login(personas.approver)

    review = client.get(reverse("approvals:review", args=[approval.pk])).content.decode()
    assert 'id="approve-refused"' in review and NOTHING in review
    assert 'id="approve"' not in review and 'id="reject"' in review  # reject stays
    run_page = client.get(reverse("runs:detail", args=[approval.run_id])).content.decode()
    assert NOTHING in run_page and 'value="approve"' not in run_page

    posted = client.post(
        reverse("approvals:decide", args=[approval.pk]),
        {"decision": "approve", "digest": approval.digest},
    )
    assert posted.status_code == 400 and NOTHING in posted.content.decode()
    api = api_as(personas.approver).post(
        f"/api/approvals/{approval.pk}/decide/",
        {"decision": "approve", "digest": approval.digest},
        format="json",
    )
    assert api.status_code == 400 and NOTHING in str(api.json()["decision"])
    token = link_token_make(approval=approval, decision="approve")
    link = client.get(reverse("approvals:link", args=[token]))
    assert link.status_code == 409 and NOTHING in link.content.decode()
    assert 'value="approve"' not in link.content.decode()
    refusal = client.post(reverse("approvals:link", args=[token]), {"comment": "sure"})
    assert refusal.status_code == 409
    reject_link = link_token_make(approval=approval, decision="reject")
    assert client.get(reverse("approvals:link", args=[reject_link])).status_code == 200

    approval.refresh_from_db()
    assert approval.status == "pending"
    assert not ApprovalDecision.objects.filter(approval=approval).exists()


def test_a_commit_that_creates_an_empty_file_can_be_approved(personas, agent, workspace, docs):
    """Its diff has no line, yet it is a change: the file does not exist yet."""
    approval = empty_commit(
        personas, agent, workspace, docs, paths=["docs/empty.md"], file_hashes={}
    )
    assert approval.approve_refusal == ""


def test_an_edit_that_leaves_every_file_as_it_is_is_refused(
    client, personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    approval = ApprovalRequest.objects.get(run=run, status="pending")
    assert approval.approve_refusal == ""
    # The approver's edit puts the file's own line back where the model changed it.
    undone = approval.diff.replace(
        "+See [the guide](getting-started.md).", "+See [the guide](getting-startd.md)."
    )
    assert undone != approval.diff
    client.force_login(personas.approver)
    page = client.post(
        reverse("approvals:decide", args=[approval.pk]),
        {"decision": "approve", "digest": approval.digest, "edited_diff": undone},
    )
    assert page.status_code == 400
    assert "The edited patch changes nothing" in page.content.decode()
    api = api_as(personas.approver).post(
        f"/api/approvals/{approval.pk}/decide/",
        {"decision": "approve", "digest": approval.digest, "edited_diff": undone},
        format="json",
    )
    assert api.status_code == 400
    assert "The edited patch changes nothing" in str(api.json()["edited_diff"])

    # The editor open and emptied: no change meant, not the proposed one.
    emptied = client.post(
        reverse("approvals:decide", args=[approval.pk]),
        {"decision": "approve", "digest": approval.digest, "edited_diff": ""},
    )
    assert emptied.status_code == 400
    html = emptied.content.decode()
    assert 'id="error-edited_diff"' in html and "The edited patch is empty" in html

    approval.refresh_from_db()
    assert approval.status == "pending"
    assert not ApprovalDecision.objects.filter(approval=approval).exists()
    assert (docs / "configuration.md").read_text() == BROKEN
