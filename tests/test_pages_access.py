"""Every page so far against every role: allowed or refused as intended."""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import reverse

from runs.models import Run

pytestmark = pytest.mark.django_db

# page → the personas that may open it; everyone else gets 403 (anonymous: the login page).
PAGES = {
    "runs:list": {"admin", "approver", "operator", "ops"},
    "runs:new": {"admin", "operator"},
    "approvals:queue": {"admin", "approver"},
    "dashboards": {"admin", "approver", "ops"},
    "admin:index": {"admin"},
}
NAV = {
    "admin": {"runs", "approvals", "dashboards", "admin"},
    "approver": {"runs", "approvals", "dashboards"},
    "operator": {"runs"},
    "ops": {"runs", "dashboards"},
}


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("who", ["admin", "approver", "operator", "ops", "outsider"])
def test_each_page_opens_only_for_the_roles_that_may(client, personas, page, who):
    client.force_login(getattr(personas, who))
    response = client.get(reverse(page))
    if who in PAGES[page]:
        assert response.status_code == 200
    elif page == "admin:index":
        assert response.status_code == 302  # the admin sends non-staff to its own login
        assert "/admin/login/" in response["Location"]
    else:
        assert response.status_code == 403


@pytest.mark.parametrize("page", PAGES)
def test_an_anonymous_user_is_sent_to_log_in(client, page):
    response = client.get(reverse(page))
    assert response.status_code == 302
    assert "login" in response["Location"]


@pytest.mark.parametrize("who", ["admin", "approver", "operator", "ops"])
def test_the_navigation_shows_exactly_what_the_role_may_open(client, personas, who):
    client.force_login(getattr(personas, who))
    html = client.get(reverse("runs:list")).content.decode()
    shown = {
        key for key in ("runs", "approvals", "dashboards", "admin") if f'data-nav="{key}"' in html
    }
    assert shown == NAV[who]


def test_home_sends_each_role_to_its_first_page(client, personas):
    for user, page in (
        (personas.ops, "runs:list"),
        (personas.operator, "runs:list"),
        (personas.admin, "runs:list"),
        (personas.approver, "approvals:queue"),  # approvers live in the queue
    ):
        client.force_login(user)
        assert client.get("/")["Location"] == reverse(page), user


def test_home_tells_a_user_without_a_role_why_there_is_nothing(client, personas):
    client.force_login(personas.outsider)
    response = client.get("/")
    assert response.status_code == 403
    assert b"No role yet" in response.content


@pytest.mark.parametrize("who", ["admin", "approver", "operator", "ops"])
def test_a_run_page_opens_for_every_role_that_sees_runs(client, run, who, personas):
    client.force_login(getattr(personas, who))
    response = client.get(reverse("runs:detail", args=[run.pk]))
    assert response.status_code == 200
    assert str(run.pk) in response.content.decode()
    assert f'ws-connect="/ws/runs/{run.pk}/?after=1"' in response.content.decode()


def test_an_outsider_never_sees_a_run(client, run, personas):
    client.force_login(personas.outsider)
    response = client.get(reverse("runs:detail", args=[run.pk]))
    assert response.status_code == 403
    assert run.request not in response.content.decode()


def test_an_anonymous_user_never_sees_a_run(client, run):
    response = client.get(reverse("runs:detail", args=[run.pk]))
    assert response.status_code == 302
    assert run.request not in response.content.decode()


@pytest.mark.parametrize("run_id", [str(uuid.UUID(int=0x42)), "not-a-uuid", "1"])
def test_an_unknown_run_is_404(client, personas, run_id):
    client.force_login(personas.operator)
    assert client.get(reverse("runs:detail", args=[run_id])).status_code == 404


def test_an_unknown_status_filter_is_a_clear_error(client, personas):
    client.force_login(personas.operator)
    response = client.get(reverse("runs:list"), {"status": "exploded"})
    assert response.status_code == 400
    assert b"Unknown status" in response.content


def test_the_status_filter_narrows_the_list(client, personas, run):
    client.force_login(personas.operator)
    assert (
        run.request[:40] in client.get(reverse("runs:list"), {"status": "created"}).content.decode()
    )
    assert (
        run.request[:40]
        not in client.get(reverse("runs:list"), {"status": "failed"}).content.decode()
    )


def test_an_operator_submits_a_run(
    client, personas, agent, workspace, django_capture_on_commit_callbacks
):
    client.force_login(personas.operator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(
            reverse("runs:new"),
            {
                "agent": agent.pk,
                "workspace": workspace.pk,
                "request": "  Fix the broken link in docs/configuration.md  ",
            },
        )
    run = Run.objects.get()
    assert response["Location"] == reverse("runs:detail", args=[run.pk])
    assert (run.request, run.requester, run.status) == (
        "Fix the broken link in docs/configuration.md",
        personas.operator,
        "created",
    )
    assert (run.model_label, run.risk, run.task["intent"]) == (
        "offline replay",
        "low",
        "doc_update",
    )
    assert [e.type for e in run.events.all()] == ["run.created"]
    assert callbacks, "the run is handed to a worker once committed"


def test_a_request_no_model_can_answer_is_refused_and_nothing_is_stored(
    client, personas, agent, workspace, monkeypatch
):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    client.force_login(personas.operator)
    response = client.post(
        reverse("runs:new"),
        {"agent": agent.pk, "workspace": workspace.pk, "request": "Update the changelog"},
    )
    assert response.status_code == 400
    assert "No model can answer this request" in response.content.decode()
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"request": "   "}, "request is empty"),
        ({"request": "x" * 20_001}, "at most 20000 characters"),
        ({"agent": "999999"}, "Select a valid choice"),
        ({"workspace": "nope"}, "Select a valid choice"),
    ],
)
def test_a_bad_run_submission_is_refused_and_records_nothing(
    client, personas, agent, workspace, data, message
):
    client.force_login(personas.operator)
    form = {"agent": agent.pk, "workspace": workspace.pk, "request": "Do it", **data}
    response = client.post(reverse("runs:new"), form)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Run.objects.exists()


def test_a_run_submission_without_the_csrf_token_is_refused(personas, agent, workspace):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(personas.operator)
    response = client.post(
        reverse("runs:new"), {"agent": agent.pk, "workspace": workspace.pk, "request": "Do it"}
    )
    assert response.status_code == 403
    assert not Run.objects.exists()


def test_login_and_logout_work(client, personas):
    from tests.conftest import PASSWORD

    response = client.post(reverse("login"), {"username": "otto-operator", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get(reverse("runs:list")).status_code == 200
    assert client.get(reverse("logout")).status_code == 405  # logging out takes a POST
    client.post(reverse("logout"))
    assert client.get(reverse("runs:list")).status_code == 302


def test_a_wrong_password_is_refused(client, personas):
    response = client.post(reverse("login"), {"username": "otto-operator", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content


def test_the_approval_queue_lists_pending_requests(client, personas, run):
    from approvals.models import ApprovalRequest

    pending = ApprovalRequest.objects.create(
        run=run, kind="commit", tool_use_id="commit:x", summary="Commit docs/a.md", risk="low"
    )
    ApprovalRequest.objects.create(
        run=run, kind="commit", tool_use_id="commit:y", summary="Already done", status="approved"
    )
    client.force_login(personas.approver)
    html = client.get(reverse("approvals:queue")).content.decode()
    assert f'data-approval="{pending.pk}"' in html and "Commit docs/a.md" in html
    assert "Already done" not in html


def test_the_dashboard_counts_runs_per_state(client, personas, run):
    client.force_login(personas.ops)
    html = client.get(reverse("dashboards")).content.decode()
    assert '<td data-status="created">1</td>' in html
    assert '<td data-status="failed">0</td>' in html


def test_a_refused_page_says_why_inside_the_console_layout(client, personas):
    client.force_login(personas.approver)
    response = client.get(reverse("runs:new"))
    assert response.status_code == 403
    html = response.content.decode()
    assert "Your role may not submit runs." in html
    assert 'data-nav="approvals"' in html  # the navigation is still there


def test_a_refused_page_logs_one_line_without_a_traceback(client, personas, caplog):
    client.force_login(personas.approver)
    client.get(reverse("runs:new"))
    from harness_console.logging import QuietPermissionDenied

    records = [r for r in caplog.records if "Forbidden" in r.getMessage()]
    assert records
    for record in records:
        QuietPermissionDenied().filter(record)
        assert record.exc_info is None


@pytest.mark.parametrize("who", ["approver", "operator", "ops", "outsider"])
def test_the_admin_refuses_other_roles_with_the_console_s_403_page(client, personas, who):
    """Not Django's admin login inviting a signed-in user to sign in as someone else."""
    client.force_login(getattr(personas, who))
    response = client.get("/admin/policies/policy/", follow=True)
    assert response.status_code == 403
    html = response.content.decode()
    assert "Not allowed" in html and "The admin pages are for the admin role" in html
    assert 'name="password"' not in html
    client.logout()  # signed out: the login form, as before
    response = client.get("/admin/", follow=True)
    assert response.status_code == 200 and 'name="password"' in response.content.decode()


@pytest.mark.usefixtures("seeded")
def test_an_agent_s_model_must_be_one_the_price_table_prices(agent):
    from django.forms.models import model_to_dict

    from policies.admin.agents import AgentForm

    data = {k: v for k, v in model_to_dict(agent).items() if v is not None}
    typo = AgentForm(data={**data, "model": "claude-sonet-4-6"}, instance=agent)
    assert not typo.is_valid()
    assert "No price in the price table matches 'claude-sonet-4-6'" in typo.errors["model"][0]
    error = typo.errors["model"][0]
    # The nearest priced names (the agent's own model is in use and priced), what is
    # checked, and every priced name.
    assert "Did you mean claude-sonnet-4-6, claude-sonnet-4 or claude-opus-4-6? " in error
    assert "checked against the price table only" in error
    assert "Priced: claude-3-5-haiku, claude-haiku-4-5, claude-opus-4," in error
    far = AgentForm(data={**data, "model": "gpt-4o"}, instance=agent)
    assert not far.is_valid() and "Did you mean" not in far.errors["model"][0]
    priced = AgentForm(data={**data, "model": " claude-sonnet-4-6 "}, instance=agent)
    assert priced.is_valid(), priced.errors
    assert priced.cleaned_data["model"] == "claude-sonnet-4-6"


@pytest.mark.usefixtures("seeded")
def test_the_agent_form_offers_the_priced_model_names(client, personas, agent):
    client.force_login(personas.admin)
    html = client.get(f"/admin/policies/agent/{agent.pk}/change/").content.decode()
    assert 'list="agent-model-names"' in html and '<datalist id="agent-model-names">' in html
    options = re.findall(r'<option value="(claude-[^"]+)"></option>', html)
    assert options == sorted(options) and {"claude-sonnet-4", "claude-sonnet-4-6"} <= set(options)
