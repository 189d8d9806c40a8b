"""The run pages (issue 5, Web): the task form with its examples, the filtered list, and the
run page's task, approvals, answer, cancel and rollback — through Django's test client, with
runs driven in this process. The browser and the real worker are in test_runs_live."""

from __future__ import annotations

from django.urls import reverse

from approvals.models import ApprovalRequest
from tests.conftest import SEEDED
from tests.helpers import BROKEN, FIX, drive, driven

pytestmark = SEEDED


def test_the_form_offers_the_replay_examples_and_an_example_fills_it(
    client, personas, agent, workspace
):
    client.force_login(personas.operator)
    page = client.get(reverse("runs:new")).content.decode()
    assert "Fix a broken link (tests)" in page and "offline replay" in page
    prefilled = client.get(
        reverse("runs:new"), {"agent": agent.pk, "workspace": workspace.pk, "request": FIX}
    ).content.decode()
    assert f"{FIX}</textarea>" in prefilled


def test_the_list_filters_by_status_agent_and_requester(client, personas, agent, workspace, docs):
    mine = driven(personas, agent, workspace)
    theirs = driven(personas, agent, workspace, user=personas.admin)
    client.force_login(personas.ops)
    url = reverse("runs:list")
    by_requester = client.get(url, {"requester": "ada-admin"}).content.decode()
    assert str(theirs.pk) in by_requester and str(mine.pk) not in by_requester
    assert str(mine.pk) in client.get(url, {"agent": "tester"}).content.decode()
    assert str(mine.pk) not in client.get(url, {"agent": "nobody"}).content.decode()
    assert client.get(url, {"status": "sleeping"}).status_code == 400


def test_the_run_page_shows_the_task_the_model_label_and_who_may_decide(
    client, personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    url = reverse("runs:detail", args=[run.pk])
    client.force_login(personas.approver)
    page = client.get(url).content.decode()
    for text in (
        "offline replay",
        "doc_update",
        "docs/configuration.md",
        "turn 3 of 50",
        "Approve",
        "+See [the guide](getting-started.md).",
        "readSource",
        "patchDraft",
    ):
        assert text in page, text
    client.force_login(personas.operator)  # the requester: no buttons, an explanation
    page = client.get(url).content.decode()
    assert 'value="approve"' not in page and "cannot approve your own run" in page
    assert "Cancel run" in page


def test_deciding_from_the_page_resumes_the_run_and_rolling_back_restores(
    client, personas, agent, workspace, docs
):
    run = driven(personas, agent, workspace)
    approval = ApprovalRequest.objects.get(run=run)
    run_page = reverse("runs:detail", args=[run.pk])
    client.force_login(personas.approver)
    page = client.get(run_page).content.decode()
    decide = reverse("approvals:decide", args=[approval.pk])
    assert f'action="{decide}"' in page  # one door to decide, from every page
    back = {"next": run_page, "digest": approval.digest}
    refused = client.post(decide, {"decision": "reject", **back})
    assert refused.status_code == 400  # the review page, with the reason by its field
    assert "Say why you reject it" in refused.content.decode()
    assert f'name="next" value="{run_page}"' in refused.content.decode()
    assert ApprovalRequest.objects.get(pk=approval.pk).status == "pending"
    approved = client.post(decide, {"decision": "approve", **back})
    assert (approved.status_code, approved["Location"]) == (302, run_page)
    drive(run)
    assert run.status == "completed"
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "Roll back" in page
    response = client.post(reverse("runs:rollback", args=[run.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == "rolled_back" and (docs / "configuration.md").read_text() == BROKEN


def test_the_answer_form_resumes_the_intake(client, personas, agent, workspace):
    run = driven(personas, agent, workspace, request="Delete the old FAQ page")
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "Which file" in page and 'name="answer-path"' in page
    bad = client.post(
        reverse("runs:answer", args=[run.pk]), {"answer-path": "/etc"}, HTTP_HX_REQUEST="true"
    )
    assert bad["X-Harness-Refused"] == "1" and 'id="run-action-error"' in bad.content.decode()
    ok = client.post(reverse("runs:answer", args=[run.pk]), {"answer-path": "docs/old-faq.md"})
    assert ok.status_code == 302
    run.refresh_from_db()
    assert run.status == "planning"


def test_cancel_from_the_page_and_who_may(client, personas, agent, workspace, docs):
    run = driven(personas, agent, workspace)
    client.force_login(personas.ops)
    assert client.post(reverse("runs:cancel", args=[run.pk])).status_code == 403
    client.force_login(personas.outsider)
    assert client.post(reverse("runs:cancel", args=[run.pk])).status_code == 403
    client.force_login(personas.operator)
    assert client.post(reverse("runs:cancel", args=[run.pk])).status_code == 302
    run.refresh_from_db()
    assert run.status == "failed" and run.failure_reason == "cancelled by otto-operator"
    assert client.get(reverse("runs:panel", args=[run.pk])).status_code == 200


def test_a_finished_question_shows_the_agents_answer(client, personas, agent, workspace):
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "release-notes.md").write_text("# Notes\n\nShort.\n")
    run = driven(personas, agent, workspace, request="Summarize docs/release-notes.md")
    assert run.status == "completed"
    client.force_login(personas.ops)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert "The agent&#x27;s answer" in page or "The agent's answer" in page
    assert "which I did not follow" in page
    assert "intent <b>question</b>" in page  # the timeline renders the structured task
