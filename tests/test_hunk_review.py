"""Review at hunk level (issue 18, B7), in this process: an approver rejects some hunks of a
change on the review page, through the API or the service every door decides through; the
commit writes only the accepted hunks (exact bytes), the model is told which hunks were
rejected or modified, the record keeps the choice and the digest it binds to; bad choices
get a clear 400 and record nothing."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from approvals.core.fingerprint import accepted_digest
from approvals.core.hunks import hunks_select
from approvals.models import ApprovalDecision, ApprovalRequest
from runs.approval_outcomes import approval_decide
from runs.models import Run, ToolCall
from runs.services import run_create
from tests.conftest import SEEDED
from tests.fake_anthropic import message
from tests.helpers import drive

pytestmark = SEEDED

GUIDE = "".join(f"Line {n} of the guide.\n" for n in range(1, 21))
PATH = "docs/guide.md"
NOTES = "docs/notes.md"


def changed(text: str, changes: dict[int, str]) -> str:
    lines = text.splitlines(keepends=True)
    for n, new in changes.items():
        lines[n - 1] = new + "\n"
    return "".join(lines)


# Two changes far apart in the guide: two hunks, the second "@@ -14,7 +14,7 @@".
DRAFT = changed(GUIDE, {2: "Line two, reworded.", 17: "Line seventeen, reworded."})
HUNK_2 = f"hunk 2 of {PATH} (@@ -14,7 +14,7 @@) rejected by approver"


def tool(name: str, n: int, **arguments: str) -> dict:
    return {"type": "tool_use", "id": f"toolu_{name}_{n}", "name": name, "input": arguments}


@pytest.fixture
def guide(workspace):
    (workspace.root_path / "docs").mkdir(exist_ok=True)
    path = workspace.root_path / PATH
    path.write_bytes(GUIDE.encode())
    (workspace.root_path / NOTES).write_bytes(b"Notes\r\nkept as they are\r\n")
    return path


def submitted(personas, agent, workspace, request: str) -> tuple[Run, ApprovalRequest]:
    run = drive(
        run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request=request,
            dispatch=False,
        )
    )
    assert run.status == "waiting_for_approval", run.failure_reason
    return run, ApprovalRequest.objects.get(run=run, status="pending")


def committing_itself(api, personas, agent, workspace) -> tuple[Run, ApprovalRequest]:
    """The model drafts the guide with two changes and calls commitDraft itself: the
    policy asks about the call."""
    api.answers += [
        message([tool("createDraft", 1, path=PATH, content=DRAFT)], stop_reason="tool_use"),
        message([tool("commitDraft", 2, path=PATH)], stop_reason="tool_use"),
        message([{"type": "text", "text": "Committed."}]),
    ]
    return submitted(personas, agent, workspace, "Reword two lines of docs/guide.md")


def drafting_two_files(api, personas, agent, workspace) -> tuple[Run, ApprovalRequest]:
    """The model drafts the guide and the notes and ends: the run's commit is asked about."""
    notes = "Notes\r\nkept as they are\r\nand one more line\r\n"
    api.answers += [
        message(
            [
                tool("createDraft", 1, path=PATH, content=DRAFT),
                tool("createDraft", 2, path=NOTES, content=notes),
            ],
            stop_reason="tool_use",
        ),
        message([{"type": "text", "text": "Drafted."}]),
    ]
    return submitted(personas, agent, workspace, "Update docs/guide.md and docs/notes.md")


def api_as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# --- the model's own commitDraft: what it is told, what is written ---------------------------
def test_a_rejected_hunk_is_not_committed_and_the_model_is_told_which(
    personas, agent, workspace, guide, api
):
    run, approval = committing_itself(api, personas, agent, workspace)
    assert (approval.kind, approval.tool) == ("tool_call", "commitDraft")
    approval_decide(
        approval=approval,
        user=personas.approver,
        decision="approve",
        digest=approval.digest,
        rejected_hunks={PATH: [2]},
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert guide.read_bytes() == changed(GUIDE, {2: "Line two, reworded."}).encode()

    told = json.dumps(api.requests[-1]["body"]["messages"][-1]["content"])
    assert HUNK_2 in told
    assert "april-approver approved only part of your change" in told
    record = ToolCall.objects.get(run=run, tool="commitDraft", status="ok")
    assert [(h["hunk"], h["verdict"]) for h in record.output["hunks"]] == [
        (1, "accepted"),
        (2, "rejected by approver"),
    ]

    approval.refresh_from_db()
    subset = hunks_select(approval.diff, {PATH: [2]})
    assert approval.rejected_hunks == {PATH: [2]} and approval.edited_diff == subset
    bound = accepted_digest(approval.digest, subset, {PATH: [2]})
    assert approval.accepted_digest == bound != approval.digest
    decision = ApprovalDecision.objects.get(approval=approval)
    assert (decision.rejected_hunks, decision.accepted_digest) == ({PATH: [2]}, bound)
    assert decision.shown_digest == approval.digest
    decided = run.events.get(type="approval.decided")
    assert decided.payload["rejected_hunks"] == {PATH: [2]} and not decided.payload["edited"]


def test_an_edited_hunk_is_told_as_modified_by_approver_with_its_final_text(
    personas, agent, workspace, guide, api
):
    run, approval = committing_itself(api, personas, agent, workspace)
    edited = approval.diff.replace("+Line two, reworded.", "+Line two, by hand.")
    approval_decide(
        approval=approval, user=personas.approver, decision="approve", edited_diff=edited
    )
    assert drive(run).status == "completed"
    assert guide.read_bytes() == changed(DRAFT, {2: "Line two, by hand."}).encode()
    result = api.requests[-1]["body"]["messages"][-1]["content"]
    told = json.dumps(result)
    assert f"hunk 1 of {PATH} (@@ -1,5 +1,5 @@) modified by approver" in told
    assert "april-approver edited your change" in told
    hunks = json.loads(result[0]["content"])["hunks"]
    assert hunks[0]["final_text"] == (
        "Line 1 of the guide.\nLine two, by hand.\nLine 3 of the guide.\n"
        "Line 4 of the guide.\nLine 5 of the guide.\n"
    )
    assert hunks[1]["verdict"] == "accepted"


# --- the run's commit: several files, one left out whole -------------------------------------
def test_a_commit_writes_only_the_accepted_hunks_and_a_file_left_out_keeps_its_bytes(
    personas, agent, workspace, guide, api
):
    run, approval = drafting_two_files(api, personas, agent, workspace)
    assert approval.kind == "commit" and sorted(approval.paths) == [PATH, NOTES]
    notes = workspace.root_path / NOTES
    approval_decide(
        approval=approval,
        user=personas.approver,
        decision="approve",
        rejected_hunks={PATH: [1], NOTES: [1]},
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert guide.read_bytes() == changed(GUIDE, {17: "Line seventeen, reworded."}).encode()
    assert notes.read_bytes() == b"Notes\r\nkept as they are\r\n"
    records = {r.path: r for r in ToolCall.objects.filter(run=run, tool="commitDraft")}
    assert (
        f"hunk 1 of {NOTES} (@@ -1,2 +1,3 @@) rejected by approver"
        in (records[NOTES].output["approver_note"])
    )
    assert (
        f"hunk 1 of {PATH} (@@ -1,5 +1,5 @@) rejected by approver"
        in (records[PATH].output["approver_note"])
    )
    assert NOTES not in records[PATH].output["approver_note"]


def test_a_subset_whose_record_was_altered_no_longer_holds(personas, agent, workspace, guide, api):
    """The approval binds to the accepted set: a record changed after the decision (here,
    another hunk said rejected) is invalidated before anything is written."""
    run, approval = drafting_two_files(api, personas, agent, workspace)
    approval_decide(
        approval=approval, user=personas.approver, decision="approve", rejected_hunks={PATH: [2]}
    )
    ApprovalRequest.objects.filter(pk=approval.pk).update(rejected_hunks={PATH: [1]})
    api.answers.append(message([{"type": "text", "text": "Drafted."}]))
    drive(run)
    approval.refresh_from_db()
    assert approval.status == "invalidated"
    assert "differs from its record" in approval.status_reason
    assert guide.read_bytes() == GUIDE.encode()


def test_hunks_left_out_stay_out_when_the_change_is_rebased(personas, agent, workspace, guide, api):
    """Another run commits to the guide after the request was asked: the change is rebased
    without the rejected hunk, and the request asked again says so."""
    run, approval = drafting_two_files(api, personas, agent, workspace)
    guide.write_bytes(changed(GUIDE, {9: "Line nine, from another run."}).encode())
    approval_decide(
        approval=approval, user=personas.approver, decision="approve", rejected_hunks={PATH: [2]}
    )
    run = drive(run)
    approval.refresh_from_db()
    assert approval.status == "invalidated"
    assert "without the hunks april-approver rejected when approving it" in approval.status_reason
    again = ApprovalRequest.objects.get(run=run, status="pending")
    assert "Leaves out the hunks april-approver rejected" in again.reason
    assert "+Line two, reworded." in again.diff and "seventeen" not in again.diff
    approval_decide(approval=again, user=personas.approver, decision="approve")
    assert drive(run).status == "completed"
    assert guide.read_bytes() == (
        changed(GUIDE, {2: "Line two, reworded.", 9: "Line nine, from another run."}).encode()
    )


# --- what cannot be chosen, at the one door ---------------------------------------------------
def test_bad_hunk_choices_are_refused_and_record_nothing(personas, agent, workspace, guide, api):
    _, approval = drafting_two_files(api, personas, agent, workspace)

    def refused(match: str, **decision) -> None:
        with pytest.raises(ValidationError, match=match):
            approval_decide(approval=approval, user=personas.approver, **decision)

    approve = {"decision": "approve"}
    refused("docs/x.md is not a file of this change", **approve, rejected_hunks={"docs/x.md": [1]})
    refused(f"{PATH} has 2 hunks: there is no hunk 3", **approve, rejected_hunks={PATH: [3]})
    refused("You rejected every hunk", **approve, rejected_hunks={PATH: [1, 2], NOTES: [1]})
    refused(
        "Only an approval leaves hunks out",
        decision="reject",
        comment="no",
        rejected_hunks={PATH: [1]},
    )
    edit = approval.diff.replace("+Line two, reworded.", "+Line two, by hand.")
    refused(
        "Reject hunks or edit the patch, not both",
        **approve,
        edited_diff=edit,
        rejected_hunks={PATH: [2]},
    )
    refused("Give the rejected hunks as a file path", **approve, rejected_hunks={PATH: 2})
    approval.refresh_from_db()
    assert approval.status == "pending" and not approval.decisions.exists()


def test_a_strong_confirmation_is_still_typed_when_hunks_are_left_out(
    personas, agent, workspace, guide, api
):
    from policies.models import Policy, PolicyRule

    PolicyRule.objects.create(
        policy=Policy.objects.get(name="default"),
        order=0,
        key="guide-strong",
        tool="commitDraft",
        path=PATH,
        decision="ask_strong",
    )
    _, approval = drafting_two_files(api, personas, agent, workspace)
    assert approval.strong_confirmation and approval.confirm_expected == PATH
    choice = {"decision": "approve", "rejected_hunks": {PATH: [2]}}
    with pytest.raises(ValidationError, match="Type the path exactly"):
        approval_decide(approval=approval, user=personas.approver, **choice)
    approval_decide(approval=approval, user=personas.approver, confirm=PATH, **choice)
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.rejected_hunks == {PATH: [2]}


def test_one_approver_of_several_cannot_leave_hunks_out(personas, agent, workspace, guide, api):
    _, approval = drafting_two_files(api, personas, agent, workspace)
    ApprovalRequest.objects.filter(pk=approval.pk).update(required_approvals=2)
    approval.refresh_from_db()
    with pytest.raises(ValidationError, match="one approver cannot leave part of it out"):
        approval_decide(
            approval=approval,
            user=personas.approver,
            decision="approve",
            rejected_hunks={PATH: [2]},
        )


# --- the API ------------------------------------------------------------------------------------
def test_the_api_lists_the_hunks_and_approves_a_subset(personas, agent, workspace, guide, api):
    run, approval = drafting_two_files(api, personas, agent, workspace)
    client = api_as(personas.approver)
    url = f"/api/approvals/{approval.pk}/"
    shown = client.get(url).json()
    assert [(h["path"], h["hunk"], h["header"]) for h in shown["hunks"]] == [
        (PATH, 1, "@@ -1,5 +1,5 @@"),
        (PATH, 2, "@@ -14,7 +14,7 @@"),
        (NOTES, 1, "@@ -1,2 +1,3 @@"),
    ]
    body = {"decision": "approve", "digest": shown["digest"], "rejected_hunks": {PATH: [2]}}
    response = client.post(url + "decide/", body, format="json")
    assert response.status_code == 200, response.json()
    data = response.json()
    assert data["status"] == "approved" and data["rejected_hunks"] == {PATH: [2]}
    assert data["accepted_digest"] != data["digest"]
    assert data["decisions"][0]["rejected_hunks"] == {PATH: [2]}
    assert drive(run).status == "completed"
    assert guide.read_bytes() == changed(GUIDE, {2: "Line two, reworded."}).encode()


@pytest.mark.parametrize(
    ("choice", "field", "says"),
    [
        ({"docs/x.md": [1]}, "rejected_hunks", "docs/x.md is not a file of this change"),
        ({PATH: [5]}, "rejected_hunks", f"{PATH} has 2 hunks: there is no hunk 5."),
        ({PATH: [0]}, "rejected_hunks", "greater than or equal to 1"),
        ({PATH: ["two"]}, "rejected_hunks", "A valid integer is required"),
        ([2], "rejected_hunks", "Expected a dictionary"),
        ({PATH: [1, 2], NOTES: [1]}, "rejected_hunks", "You rejected every hunk"),
    ],
)
def test_the_api_refuses_a_bad_hunk_choice_with_a_400_naming_it(
    personas, agent, workspace, guide, api, choice, field, says
):
    _, approval = drafting_two_files(api, personas, agent, workspace)
    response = api_as(personas.approver).post(
        f"/api/approvals/{approval.pk}/decide/",
        {"decision": "approve", "rejected_hunks": choice},
        format="json",
    )
    assert response.status_code == 400
    assert says in json.dumps(response.json()[field])
    approval.refresh_from_db()
    assert approval.status == "pending" and not approval.decisions.exists()


def test_the_api_refuses_hunks_where_there_are_none_to_choose(personas, agent, workspace):
    (workspace.root_path / "docs").mkdir(exist_ok=True)
    (workspace.root_path / "docs" / "old-faq.md").write_text("# Old FAQ\n")
    from runs.services import run_answer

    run = drive(
        run_create(
            agent=agent,
            workspace=workspace,
            requester=personas.operator,
            request="Delete the old FAQ page",
            dispatch=False,
        )
    )
    drive(run_answer(run=run, user=personas.operator, answers={"path": "docs/old-faq.md"}))
    approval = ApprovalRequest.objects.get(run=run, status="pending")
    client = api_as(personas.approver)
    assert client.get(f"/api/approvals/{approval.pk}/").json()["hunks"] == []
    response = client.post(
        f"/api/approvals/{approval.pk}/decide/",
        {"decision": "approve", "confirm": "docs/old-faq.md", "rejected_hunks": {"x": [1]}},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["rejected_hunks"] == [
        "A deleteFile call has no patch to choose hunks of."
    ]


# --- the review page -----------------------------------------------------------------------------
def test_the_review_page_offers_each_hunk_and_records_the_choice(
    personas, agent, workspace, guide, api, client
):
    run, approval = drafting_two_files(api, personas, agent, workspace)
    client.force_login(personas.approver)
    review = reverse("approvals:review", args=[approval.pk])
    page = client.get(review).content.decode()
    for key in (f"{PATH}:1", f"{PATH}:2", f"{NOTES}:1"):
        assert f'name="rejected_hunk" value="{key}"' in page
        assert f'class="hunk-reject secondary" data-hunk="{key}"' in page
    assert "<kbd>j</kbd>/<kbd>k</kbd> next/previous hunk, <kbd>x</kbd> reject" in page

    response = client.post(
        reverse("approvals:decide", args=[approval.pk]),
        {"decision": "approve", "digest": approval.digest, "rejected_hunk": [f"{PATH}:2"]},
    )
    assert response.status_code == 302
    following = client.get(review)
    assert "without the 1 hunk you rejected; the model is told which" in (
        following.content.decode()
    )
    page = following.content.decode()
    assert f"left out of what is committed (the model is told so): hunk 2 of {PATH}." in page
    assert page.count(f'class="row-hunk hunk-rejected" data-hunk="{PATH}:2"') == 2  # both views
    assert "rejected by april-approver" in page and 'name="rejected_hunk"' not in page
    history = client.get(reverse("approvals:history")).content.decode()
    assert "1 hunk rejected" in history and f"approved without hunk 2 of {PATH}" in history
    client.force_login(personas.operator)
    run_page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert f"Approved by april-approver without hunk 2 of {PATH}: this is what the commit" in (
        run_page
    )


def test_the_page_comes_back_with_the_choice_and_the_reason_when_it_is_refused(
    personas, agent, workspace, guide, api, client
):
    _, approval = drafting_two_files(api, personas, agent, workspace)
    client.force_login(personas.approver)
    decide = reverse("approvals:decide", args=[approval.pk])
    every = [f"{PATH}:1", f"{PATH}:2", f"{NOTES}:1"]
    response = client.post(
        decide, {"decision": "approve", "digest": approval.digest, "rejected_hunk": every}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="error-rejected_hunks">You rejected every hunk: that is a rejection' in page
    assert all(f'value="{key}" checked' in page for key in every)
    unknown = client.post(
        decide, {"decision": "approve", "digest": approval.digest, "rejected_hunk": f"{PATH}:x"}
    )
    assert unknown.status_code == 400
    assert f"{PATH}: hunks are numbered from 1; &#x27;x&#x27; is not a hunk number." in (
        unknown.content.decode()
    )
    # A rejection sends no hunks: it rejects the whole change.
    rejected = client.post(
        decide,
        {"decision": "reject", "comment": "not now", "rejected_hunk": f"{PATH}:1"},
    )
    assert rejected.status_code == 302
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.rejected_hunks == {}


def test_a_change_of_one_hunk_offers_no_hunk_choice(personas, agent, workspace, docs, client):
    from tests.helpers import driven

    run = driven(personas, agent, workspace)
    approval = ApprovalRequest.objects.get(run=run, status="pending")
    client.force_login(personas.approver)
    page = client.get(reverse("approvals:review", args=[approval.pk])).content.decode()
    assert 'name="rejected_hunk"' not in page and "hunk-tools" not in page
    assert "next/previous hunk" not in page and "<kbd>p</kbd> previous" in page
