"""Session grants (SPEC P4): remembered for the run, used by later calls, visible on the
run page, revocable; approvers only, never for their own run."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from policies.core.default_policy import DEFAULT_POLICY
from policies.core.permissions import PolicyError
from runs.grants import grant_create, grant_revoke
from runs.tools.call import tool_call_run

pytestmark = pytest.mark.django_db


def commit(run, path):
    tool_call_run(
        workspace=run.workspace,
        tool="createDraft",
        run=run,
        arguments={"path": path, "content": "new"},
        policy=DEFAULT_POLICY,
    )
    return tool_call_run(
        workspace=run.workspace,
        tool="commitDraft",
        run=run,
        arguments={"path": path},
        policy=DEFAULT_POLICY,
    )


def test_a_grant_lets_later_calls_of_the_run_through_and_revoking_stops_it(run, personas):
    assert commit(run, "docs/a.md").decision == "ask"
    grant = grant_create(run=run, tool="commitDraft", path="docs/**", user=personas.approver)
    allowed = commit(run, "docs/b.md")
    assert (allowed.status, allowed.decision) == ("ok", "allow")
    assert "remembered for this run by april-approver" in allowed.reason
    assert commit(run, "src/c.md").decision == "ask"  # outside the pattern
    grant_revoke(grant=grant, user=personas.approver)
    assert commit(run, "docs/d.md").decision == "ask"
    assert [e.type for e in run.events.order_by("seq")][-2:] == ["grant.created", "grant.revoked"]


@pytest.mark.parametrize("who", ["operator", "ops", "outsider"])
def test_only_approvers_grant_or_revoke(run, personas, who):
    with pytest.raises(PermissionDenied):
        grant_create(run=run, tool="commitDraft", path="docs/**", user=getattr(personas, who))


def test_a_requester_cannot_grant_their_own_run(run, personas):
    personas.operator.groups.add(personas.approver.groups.get())
    with pytest.raises(PermissionDenied, match="own run"):
        grant_create(run=run, tool="commitDraft", path="docs/**", user=personas.operator)


@pytest.mark.parametrize(
    ("tool", "path"), [(" ", "docs/**"), ("commitDraft", "/etc/**"), ("commitDraft", "../x.md")]
)
def test_a_malformed_grant_is_refused(run, personas, tool, path):
    with pytest.raises(PolicyError, match="Cannot remember this"):
        grant_create(run=run, tool=tool, path=path, user=personas.approver)


def test_grants_are_shown_on_the_run_page_and_revoked_there(client, run, personas):
    grant = grant_create(run=run, tool="commitDraft", path="docs/**", user=personas.approver)
    client.force_login(personas.approver)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert f'data-grant="{grant.pk}"' in page and "docs/**" in page and "Revoke" in page
    client.post(reverse("runs:grant_revoke", args=[run.pk, grant.pk]))
    grant.refresh_from_db()
    assert grant.revoked_at is not None and grant.revoked_by == personas.approver


def test_an_operator_sees_grants_but_cannot_revoke_them(client, run, personas):
    grant = grant_create(run=run, tool="commitDraft", path="docs/**", user=personas.approver)
    client.force_login(personas.operator)
    assert "Revoke" not in client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    response = client.post(reverse("runs:grant_revoke", args=[run.pk, grant.pk]))
    assert response.status_code == 403
    grant.refresh_from_db()
    assert grant.revoked_at is None
