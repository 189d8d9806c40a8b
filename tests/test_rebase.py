"""Several runs changing one file (issue 18, A2, A3, B1): the second run's draft, and its
approver's edit, are rebased onto the file the first one committed and asked again with
the fresh diff; a change that does not merge goes back to the model; nothing says an edit
was applied when it was not."""

from __future__ import annotations

import pytest
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from approvals.core.fingerprint import content_hash
from approvals.core.rebase import Conflicted, Merged, base_of, lines_text, merge
from approvals.models import ApprovalRequest
from policies.core.diffs import file_diff
from runs.approval_outcomes import approval_decide
from runs.models import ToolCall
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.fake_anthropic import message
from tests.helpers import drive

GUIDE = "".join(f"Line {n} of the guide.\n" for n in range(1, 11))


def changed(text: str, line: int, new: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[line - 1] = new + "\n"
    return "".join(lines)


# --- the merge, pure -------------------------------------------------------------------------
lines = st.lists(st.sampled_from(["a", "b", "c", "d", ""]), max_size=25)


@given(lines, lines, st.booleans())
def test_the_base_is_the_draft_with_its_diff_undone_exactly(old, new, final_newline):
    base = "\n".join(old) + ("\n" if final_newline and old else "")
    draft = "\n".join(new) + ("\n" if new else "")
    diff = file_diff(base.encode(), draft.encode(), "x.md")
    found = base_of(draft, diff, "x.md", content_hash(base.encode()))
    if base.splitlines() != draft.splitlines():  # a diff with hunks: the base is found
        assert found == base
    else:
        assert found is None


def test_a_base_that_does_not_hash_as_recorded_is_no_base():
    draft = changed(GUIDE, 2, "Line two, reworded.")
    diff = file_diff(GUIDE.encode(), draft.encode(), "g.md")
    assert base_of(draft, diff, "g.md", content_hash(GUIDE.encode())) == GUIDE
    assert base_of(draft, diff, "g.md", content_hash(b"something else")) is None
    assert base_of(draft + "tampered\n", diff, "g.md", content_hash(GUIDE.encode())) is None


def test_changes_to_other_lines_merge_and_the_same_line_conflicts():
    ours, theirs = changed(GUIDE, 8, "Line eight, ours."), changed(GUIDE, 2, "Line two, theirs.")
    result = merge(GUIDE, ours, theirs)
    assert isinstance(result, Merged) and result.theirs == [(2, 2)]
    assert result.text == changed(changed(GUIDE, 2, "Line two, theirs."), 8, "Line eight, ours.")
    clash = merge(GUIDE, changed(GUIDE, 5, "Five, ours."), changed(GUIDE, 5, "Five, theirs."))
    assert isinstance(clash, Conflicted) and clash.regions == [(5, 5)]
    assert lines_text([(5, 5)]) == "line 5" and lines_text([(2, 4), (9, 9)]) == "lines 2–4, 9"


# --- two runs on one file --------------------------------------------------------------------
def drafting(api, text: str, n: int) -> None:
    """The model drafts docs/guide.md as ``text``, then says it is done."""
    api.answers += [
        message(
            [
                {
                    "type": "tool_use",
                    "id": f"toolu_draft_{n}",
                    "name": "createDraft",
                    "input": {"path": "docs/guide.md", "content": text},
                }
            ],
            stop_reason="tool_use",
        ),
        message([{"type": "text", "text": "Drafted."}]),
    ]


def waiting_run(api, personas, agent, workspace, text: str, n: int):
    drafting(api, text, n)
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Update docs/guide.md to reword one of its lines",
        dispatch=False,
    )
    run = drive(run)
    assert run.status == "waiting_for_approval", run.failure_reason
    return run, ApprovalRequest.objects.get(run=run, status="pending")


@pytest.fixture
def guide(workspace):
    (workspace.root_path / "docs").mkdir(exist_ok=True)
    path = workspace.root_path / "docs" / "guide.md"
    path.write_text(GUIDE)
    return path


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_the_second_run_is_rebased_with_its_approver_s_edit_and_committed_once(
    personas, agent, workspace, guide, api, client
):
    first, first_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 2, "Line two, reworded."), 1
    )
    second, second_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 8, "Line eight, reworded."), 2
    )
    approval_decide(approval=first_ask, user=personas.approver, decision="approve")
    assert drive(first).status == "completed"
    assert guide.read_text() == changed(GUIDE, 2, "Line two, reworded.")

    # The approver edits the second change on the review page (against the file as it is now).
    edited = second_ask.diff.replace("+Line eight, reworded.", "+Line eight, reworded by hand.")
    approval_decide(
        approval=second_ask, user=personas.approver, decision="approve", edited_diff=edited
    )
    second = drive(second)
    second_ask.refresh_from_db()
    assert second_ask.status == "invalidated"
    assert second_ask.status_reason.startswith(
        "docs/guide.md changed since the request (another change was committed); this run's "
        "change, with the edit april-approver made when approving it, was rebased onto the "
        "file as it is now: docs/guide.md (line 2 came from it)"
    )
    # Asked again, once, with the fresh diff: the edit is kept, the first run's line is not
    # undone, and the request says it is a rebase with whose edit.
    again = ApprovalRequest.objects.get(run=second, status="pending")
    assert second.status == "waiting_for_approval"
    assert again.reason.startswith(
        "Rebased onto the file as it is now: docs/guide.md (line 2 came from it). Includes "
        "the edit april-approver made when approving the earlier request."
    )
    assert "+Line eight, reworded by hand." in again.diff
    assert "Line two" not in again.diff.replace(" Line two, reworded.", "")  # only context
    assert not [ln for ln in again.diff.splitlines() if ln.startswith("-Line 2")]

    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[second.pk])).content.decode()
    assert "Invalidated by the harness: docs/guide.md changed since the request" in page
    assert "the request was invalidated before anything was written" in page
    assert "this is what was committed" not in page

    approval_decide(approval=again, user=personas.approver, decision="approve")
    assert drive(second).status == "completed"
    assert (
        guide.read_bytes()
        == (
            changed(changed(GUIDE, 2, "Line two, reworded."), 8, "Line eight, reworded by hand.")
        ).encode()
    )
    assert ToolCall.objects.filter(run=second, tool="commitDraft", status="ok").count() == 1
    assert ApprovalRequest.objects.filter(run=second, status="pending").count() == 0


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_change_that_does_not_merge_goes_back_to_the_model_with_the_conflict(
    personas, agent, workspace, guide, api
):
    first, first_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 5, "Line five, the first way."), 1
    )
    second, second_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 5, "Line five, the second way."), 2
    )
    approval_decide(approval=first_ask, user=personas.approver, decision="approve")
    assert drive(first).status == "completed"
    approval_decide(approval=second_ask, user=personas.approver, decision="approve")
    # The model's next turn: it drafts its change again on top of the file as it is now.
    asked_before = len(api.requests)
    drafting(api, changed(GUIDE, 5, "Line five, the first way, and the second."), 3)
    second = drive(second)
    second_ask.refresh_from_db()
    assert second_ask.status == "invalidated"
    assert "does not merge with it: both changed line 5" in second_ask.status_reason
    told = api.requests[asked_before]["body"]["messages"][-1]
    assert told["role"] == "user"
    text = str(told["content"])
    assert "Your change to docs/guide.md could not be committed" in text
    assert "both changed line 5" in text and "make your change again" in text
    # Nothing of the conflicting draft was written; the new draft is asked about, once.
    assert guide.read_text() == changed(GUIDE, 5, "Line five, the first way.")
    assert second.status == "waiting_for_approval"
    again = ApprovalRequest.objects.get(run=second, status="pending")
    assert "+Line five, the first way, and the second." in again.diff
    assert "-Line five, the first way." in again.diff


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_change_the_file_already_holds_is_not_asked_about_again(
    personas, agent, workspace, guide, api
):
    same = changed(GUIDE, 3, "Line three, as both runs wrote it.")
    first, first_ask = waiting_run(api, personas, agent, workspace, same, 1)
    second, second_ask = waiting_run(api, personas, agent, workspace, same, 2)
    approval_decide(approval=first_ask, user=personas.approver, decision="approve")
    assert drive(first).status == "completed"
    approval_decide(approval=second_ask, user=personas.approver, decision="approve")
    second = drive(second)
    second_ask.refresh_from_db()
    assert "it already holds this change: nothing is left to commit" in second_ask.status_reason
    assert second.status == "completed"
    assert not ApprovalRequest.objects.filter(run=second, status="pending").exists()
    assert not ToolCall.objects.filter(run=second, tool="commitDraft").exists()
    assert guide.read_text() == same


# --- one pending request per run and file; no request without content ------------------------
@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_draft_that_reads_as_its_file_is_never_asked_about(
    personas, agent, workspace, guide, api
):
    """The model drafts the file exactly as it is: nothing to commit, nobody asked."""
    drafting(api, GUIDE, 1)
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="Update docs/guide.md to reword one of its lines",
        dispatch=False,
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    assert not ApprovalRequest.objects.filter(run=run).exists()
    assert not ToolCall.objects.filter(run=run, tool="commitDraft").exists()
    unchanged = run.events.get(type="drafts.unchanged")
    assert unchanged.payload["paths"] == ["docs/guide.md"]
    assert guide.read_text() == GUIDE


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_asking_again_replaces_the_pending_request_for_the_same_file(
    personas, agent, workspace, guide, api
):
    """However the harness comes to ask again about a file while a request for it is
    pending, the older one is invalidated, saying so: one pending request per run and file,
    and the database holds a run to one pending commit."""
    from django.db import IntegrityError, transaction

    from approvals.fingerprint import fingerprint_recorded
    from runs.approval_outcomes import approval_ask

    run, first = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 2, "Line two, reworded."), 1
    )
    with transaction.atomic():
        again = approval_ask(
            run=run,
            fingerprint=fingerprint_recorded(first),
            paths=first.paths,
            tool_use_id="commit:asked-again",
            summary=first.summary,
            rule=first.rule,
            reason=first.reason,
            strong_confirmation=False,
        )
    first.refresh_from_db()
    assert first.status == "invalidated"
    assert first.status_reason == "replaced by a newer request about docs/guide.md"
    assert list(ApprovalRequest.objects.filter(run=run, status="pending")) == [again]
    assert run.events.filter(type="approval.invalidated", payload__approval=str(first.pk)).exists()
    with pytest.raises(IntegrityError), transaction.atomic():
        ApprovalRequest.objects.create(
            run=run, kind="commit", tool_use_id="commit:around-the-harness", tool="commitDraft"
        )


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_after_the_other_run_is_rolled_back_the_request_is_current_again(
    personas, agent, workspace, guide, api, client
):
    """Run A commits to the file B's request was asked about; A is rolled back, restoring
    the file's bytes: B's request is as current as when it was asked, says so, and
    approved it commits once, without a rebase."""
    from approvals.fingerprint import changes_since_asked
    from runs.services import run_rollback

    first, first_ask = waiting_run(api, personas, agent, workspace, changed(GUIDE, 2, "Two."), 1)
    second, second_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 8, "Eight."), 2
    )
    approval_decide(approval=first_ask, user=personas.approver, decision="approve")
    assert drive(first).status == "completed"
    assert changes_since_asked(second_ask) == ["docs/guide.md changed since the request"]
    run_rollback(run=first, user=personas.admin)
    assert guide.read_text() == GUIDE
    assert changes_since_asked(second_ask) == []
    client.force_login(personas.approver)
    review = client.get(reverse("approvals:review", args=[second_ask.pk])).content.decode()
    assert 'id="review-changed"' not in review
    approval_decide(approval=second_ask, user=personas.approver, decision="approve")
    assert drive(second).status == "completed"
    second_ask.refresh_from_db()
    assert second_ask.status == "approved"
    assert guide.read_text() == changed(GUIDE, 8, "Eight.")


# --- the same, through the REST API (POST /api/approvals/{id}/decide/) ------------------------
def decide_through_api(user, approval: ApprovalRequest, **data) -> dict:
    """One decision as a script makes it: DRF's endpoint, with the digest it was shown."""
    from rest_framework.test import APIClient

    api_client = APIClient()
    api_client.force_authenticate(user)
    shown = api_client.get(f"/api/approvals/{approval.pk}/")
    assert shown.status_code == 200, shown.content
    response = api_client.post(
        f"/api/approvals/{approval.pk}/decide/",
        {"digest": shown.json()["digest"], **data},
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()


def read_through_api(user, approval: ApprovalRequest) -> dict:
    from rest_framework.test import APIClient

    api_client = APIClient()
    api_client.force_authenticate(user)
    response = api_client.get(f"/api/approvals/{approval.pk}/")
    assert response.status_code == 200, response.content
    return response.json()


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_through_the_api_an_edit_on_a_file_another_run_changed_is_rebased_kept_and_committed_once(
    personas, agent, workspace, guide, api
):
    first, first_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 2, "Line two, reworded."), 1
    )
    second, second_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 8, "Line eight, reworded."), 2
    )
    assert decide_through_api(personas.approver, first_ask, decision="approve")["status"] == (
        "approved"
    )
    assert drive(first).status == "completed"

    shown = read_through_api(personas.approver, second_ask)["diff"]
    edited = shown.replace("+Line eight, reworded.", "+Line eight, reworded through the API.")
    assert edited != shown
    decided = decide_through_api(
        personas.approver, second_ask, decision="approve", edited_diff=edited
    )
    assert (decided["status"], decided["edited_diff"]) == ("approved", edited)
    assert decided["decisions"][0]["edited_diff"] == edited

    second = drive(second)
    old = read_through_api(personas.approver, second_ask)
    assert old["status"] == "invalidated"
    assert old["status_reason"].startswith(
        "docs/guide.md changed since the request (another change was committed); this run's "
        "change, with the edit april-approver made when approving it, was rebased"
    )
    again = ApprovalRequest.objects.get(run=second, status="pending")
    fresh = read_through_api(personas.approver, again)
    assert fresh["reason"].startswith(
        "Rebased onto the file as it is now: docs/guide.md (line 2 came from it). Includes "
        "the edit april-approver made when approving the earlier request."
    )
    assert "+Line eight, reworded through the API." in fresh["diff"]
    assert not [ln for ln in fresh["diff"].splitlines() if ln.startswith("-Line 2")]

    assert decide_through_api(personas.approver, again, decision="approve")["status"] == (
        "approved"
    )
    assert drive(second).status == "completed"
    assert guide.read_bytes() == (
        changed(
            changed(GUIDE, 2, "Line two, reworded."), 8, "Line eight, reworded through the API."
        ).encode()
    )
    assert ToolCall.objects.filter(run=second, tool="commitDraft", status="ok").count() == 1
    assert ApprovalRequest.objects.filter(run=second, status="pending").count() == 0


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_through_the_api_a_change_that_does_not_merge_goes_back_to_the_model(
    personas, agent, workspace, guide, api
):
    first, first_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 5, "Line five, the first way."), 1
    )
    second, second_ask = waiting_run(
        api, personas, agent, workspace, changed(GUIDE, 5, "Line five, the second way."), 2
    )
    decide_through_api(personas.approver, first_ask, decision="approve")
    assert drive(first).status == "completed"
    assert decide_through_api(personas.approver, second_ask, decision="approve")["status"] == (
        "approved"
    )
    turns_before = second.model_calls.count()
    asked_before = len(api.requests)
    drafting(api, changed(GUIDE, 5, "Line five, the first way, and the second."), 3)
    second = drive(second)

    old = read_through_api(personas.approver, second_ask)
    assert old["status"] == "invalidated"
    assert "does not merge with it: both changed line 5" in old["status_reason"]
    # One more turn for the model (its new draft, then "Drafted."), told the conflict.
    assert second.model_calls.count() == turns_before + 2
    assert len(api.requests) == asked_before + 2
    told = str(api.requests[asked_before]["body"]["messages"][-1]["content"])
    assert "Your change to docs/guide.md could not be committed" in told
    assert "both changed line 5" in told
    assert guide.read_text() == changed(GUIDE, 5, "Line five, the first way.")
    again = ApprovalRequest.objects.get(run=second, status="pending")
    assert (
        "+Line five, the first way, and the second."
        in read_through_api(personas.approver, again)["diff"]
    )
    assert ApprovalRequest.objects.filter(run=second, status="pending").count() == 1
