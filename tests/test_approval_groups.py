"""Identical requests decided together (issue 18 point 3, B15): the queue groups requests
that are the same action from several runs, and an approver decides a group in one step
with one comment; each member stays its own audited decision bound to its own digest, and
separation of duties holds per member."""

from __future__ import annotations

import pytest
from django.urls import reverse

from approvals.groups import groups_in, same_action
from approvals.models import ApprovalDecision, ApprovalRequest
from tests.conftest import SEEDED
from tests.helpers import driven
from tests.test_approvals import api, waiting_commit, waiting_delete

pytestmark = SEEDED


def members(*approvals: ApprovalRequest) -> list[dict[str, str]]:
    return [{"id": str(a.pk), "digest": a.digest} for a in approvals]


def posted(*approvals: ApprovalRequest, **data) -> dict:
    return {"member": [f"{a.pk}:{a.digest}" for a in approvals], **data}


@pytest.fixture
def three(personas, agent, workspace, docs) -> list[ApprovalRequest]:
    """Three runs asking to commit the very same fix to the same file."""
    return [waiting_commit(personas, agent, workspace)[1] for _ in range(3)]


def test_the_same_action_from_three_runs_is_one_group(three):
    assert len({same_action(a) for a in three}) == 1
    assert len({a.run_id for a in three}) == 3
    (group,) = groups_in(ApprovalRequest.objects.filter(status="pending").order_by("requested_at"))
    assert [m.pk for m in group.members] == [a.pk for a in three]
    assert groups_in(three[:1]) == []  # one request alone is no group


def test_a_group_is_decided_in_one_step_one_audited_decision_each(client, personas, three):
    client.force_login(personas.approver)
    queue = client.get(reverse("approvals:queue")).content.decode()
    assert 'id="approval-groups"' in queue and "3 identical requests" in queue
    assert 'data-group-size="3"' in queue
    response = client.post(
        reverse("approvals:decide_group"),
        posted(*three, decision="approve", comment="Same fix thrice: fine."),
        follow=True,
    )
    assert "Approved 3 of 3 identical requests" in response.content.decode()
    for approval in three:
        approval.refresh_from_db()
        assert approval.status == "approved" and approval.comment == "Same fix thrice: fine."
        (vote,) = ApprovalDecision.objects.filter(approval=approval)
        assert (vote.user, vote.shown_digest) == (personas.approver, approval.digest)


def test_each_member_is_checked_on_its_own(personas, agent, workspace, docs, three):
    """The approver's own run is refused alone; a member whose digest the page did not
    show is refused alone; the others count."""
    mine = driven(personas, agent, workspace, user=personas.approver)
    theirs = ApprovalRequest.objects.get(run=mine, status="pending")
    assert same_action(theirs) == same_action(three[0])
    stale = members(three[2])[0] | {"digest": "0" * 64}
    body = api(personas.approver).post(
        "/api/approvals/decide-group/",
        {"members": [*members(three[0], three[1], theirs), stale], "decision": "approve"},
        format="json",
    )
    assert body.status_code == 200, body.content
    data = body.json()
    assert [d["id"] for d in data["decided"]] == [str(three[0].pk), str(three[1].pk)]
    refused = {r["id"]: r["reason"] for r in data["refused"]}
    assert refused[str(theirs.pk)] == "A requester cannot decide on their own run."
    assert "reload" in refused[str(three[2].pk)]
    theirs.refresh_from_db()
    three[2].refresh_from_db()
    assert theirs.status == three[2].status == "pending"
    assert not ApprovalDecision.objects.filter(approval__in=[theirs, three[2]]).exists()


def test_requests_that_are_not_one_action_are_refused_whole(personas, agent, workspace, docs):
    commit = waiting_commit(personas, agent, workspace)[1]
    delete = waiting_delete(personas, agent, workspace)[1]
    body = api(personas.approver).post(
        "/api/approvals/decide-group/",
        {"members": members(commit, delete), "decision": "approve"},
        format="json",
    )
    assert body.status_code == 400 and "not one group" in str(body.json())
    assert not ApprovalDecision.objects.exists()


def test_a_rejection_needs_its_one_comment_and_says_so_once(client, personas, three):
    client.force_login(personas.approver)
    response = client.post(
        reverse("approvals:decide_group"), posted(*three, decision="reject"), follow=True
    )
    html = response.content.decode()
    assert html.count("None of the 3 requests was decided") == 1
    assert ApprovalRequest.objects.filter(pk__in=[a.pk for a in three], status="pending").count()
    response = client.post(
        reverse("approvals:decide_group"),
        posted(*three, decision="reject", comment="Not this way."),
        follow=True,
    )
    assert "Rejected 3 of 3 identical requests" in response.content.decode()
    assert set(
        ApprovalRequest.objects.filter(pk__in=[a.pk for a in three]).values_list(
            "status", flat=True
        )
    ) == {"rejected"}


def test_an_l3_group_needs_the_typed_confirmation(client, personas, agent, workspace, docs):
    deletes = [waiting_delete(personas, agent, workspace)[1] for _ in range(2)]
    client.force_login(personas.approver)
    queue = client.get(reverse("approvals:queue")).content.decode()
    assert "Type <code>docs/old-faq.md</code> to confirm" in queue
    client.post(reverse("approvals:decide_group"), posted(*deletes, decision="approve"))
    assert ApprovalRequest.objects.filter(pk__in=[d.pk for d in deletes], status="pending").count()
    response = client.post(
        reverse("approvals:decide_group"),
        posted(*deletes, decision="approve", confirm="docs/old-faq.md"),
        follow=True,
    )
    assert "Approved 2 of 2 identical requests" in response.content.decode()


@pytest.mark.parametrize("who", ["operator", "ops", "outsider"])
def test_only_approvers_decide_a_group(client, personas, three, who):
    client.force_login(getattr(personas, who))
    response = client.post(reverse("approvals:decide_group"), posted(*three, decision="approve"))
    assert response.status_code == 403
    assert (
        api(getattr(personas, who))
        .post(
            "/api/approvals/decide-group/",
            {"members": members(*three), "decision": "approve"},
            format="json",
        )
        .status_code
        == 403
    )
    assert not ApprovalDecision.objects.exists()
