"""The REST API (SPEC X3): roles on every endpoint, bad input on every endpoint, and the
run lifecycle through it (runs driven in this process; the real worker's tests are in
test_runs_live)."""

from __future__ import annotations

import uuid

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from runs.models import Run
from tests.conftest import SEEDED
from tests.helpers import BROKEN, FIX, drive

pytestmark = SEEDED


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(user, agent, workspace, request=FIX):
    return client_for(user).post(
        "/api/runs/",
        {"agent": agent.slug, "workspace": workspace.slug, "request": request},
        format="json",
    )


def test_submit_returns_the_intake_and_the_lifecycle_runs_through_the_api(
    personas, agent, workspace, docs
):
    response = submit(personas.operator, agent, workspace)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "created" and body["risk"] == "low"
    assert body["missing_parameters"] == []
    assert body["model"]["label"] == "offline replay"
    run = drive(body["id"])
    assert run.status == "waiting_for_approval"

    approver = client_for(personas.approver)
    pending = approver.get("/api/approvals/", {"status": "pending"}).json()["results"]
    assert [p["run"] for p in pending] == [str(run.pk)]
    assert pending[0]["kind"] == "commit" and "getting-started.md" in pending[0]["diff"]
    decided = approver.post(
        f"/api/approvals/{pending[0]['id']}/decide/", {"decision": "approve"}, format="json"
    )
    assert decided.status_code == 200 and decided.json()["status"] == "approved"
    again = approver.post(
        f"/api/approvals/{pending[0]['id']}/decide/", {"decision": "reject", "comment": "no"}
    )
    assert again.status_code == 409 and again.json()["status"] == "approved"
    assert drive(run.pk).status == "completed"

    detail = client_for(personas.ops).get(f"/api/runs/{run.pk}/").json()
    assert [s["step_id"] for s in detail["steps"]][:3] == ["intake", "classify", "extract"]
    synthesize = next(s for s in detail["steps"] if s["step_id"] == "synthesize")
    assert synthesize["output_artifacts"] == ["draft:docs/configuration.md"]
    verify = next(s for s in detail["steps"] if s["step_id"] == "verify")
    assert (verify["verification"], verify["input_artifacts"]) == (
        "pass",
        ["docs/configuration.md"],
    )
    assert {c["tool"] for c in detail["tool_calls"]} >= {"readSource", "patchDraft", "commitDraft"}
    assert detail["rollback"][0]["path"] == "docs/configuration.md"
    assert detail["verification"]["result"] == "pass"
    assert detail["progress"] == {"turn": 3, "max_turns": 50}
    # What it cost: an offline replay reaches no provider, so nothing, whatever its script's
    # usage (kept per call, cache tokens apart).
    assert (detail["cost_usd"], detail["cost_basis"]) == ("0.000000000", "replay")
    calls = detail["model_calls"]
    assert [c["turn"] for c in calls] == [1, 2, 3]
    assert {(c["cost_usd"], c["cost_basis"], c["price_version"]) for c in calls} == {
        ("0.000000000", "replay", None)
    }
    assert calls[0]["cache_creation_input_tokens"] == 600

    events = client_for(personas.ops).get(f"/api/runs/{run.pk}/events/", {"after": 5}).json()
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(6, 6 + len(seqs)))

    rolled = approver.post(f"/api/runs/{run.pk}/rollback/")
    assert rolled.status_code == 200 and rolled.json()["status"] == "rolled_back"
    assert (docs / "configuration.md").read_text() == BROKEN
    assert approver.post(f"/api/runs/{run.pk}/rollback/").status_code == 409


def test_the_answer_endpoint_resumes_a_run_waiting_for_a_parameter(personas, agent, workspace):
    (workspace.root_path / "docs").mkdir()
    (workspace.root_path / "docs" / "old-faq.md").write_text("# Old\n")
    body = submit(personas.operator, agent, workspace, "Delete the old FAQ page").json()
    assert [m["name"] for m in body["missing_parameters"]] == ["path"]
    drive(body["id"])
    client = client_for(personas.operator)
    url = f"/api/runs/{body['id']}/answer/"
    assert client.post(url, {"answers": {}}, format="json").status_code == 400
    bad = client.post(url, {"answers": {"path": "/etc/passwd"}}, format="json")
    assert bad.status_code == 400 and "answers" in bad.json()
    wrong = client.post(url, {"answers": {"colour": "blue"}}, format="json")
    assert wrong.status_code == 400 and "Nothing asked for colour" in str(wrong.json())
    good = client.post(url, {"answers": {"path": "docs/old-faq.md"}}, format="json")
    assert good.status_code == 200 and good.json()["status"] == "planning"


def test_cancel_through_the_api(personas, agent, workspace, docs):
    body = submit(personas.operator, agent, workspace).json()
    drive(body["id"])
    assert client_for(personas.ops).post(f"/api/runs/{body['id']}/cancel/").status_code == 403
    cancelled = client_for(personas.operator).post(f"/api/runs/{body['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "failed"
    assert cancelled.json()["failure_reason"] == "cancelled by otto-operator"
    again = client_for(personas.operator).post(f"/api/runs/{body['id']}/cancel/")
    assert again.status_code == 400


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "agent"),
        ({"agent": "nobody", "workspace": "test", "request": FIX}, "agent"),
        ({"agent": "tester", "workspace": "nowhere", "request": FIX}, "workspace"),
        ({"agent": "tester", "workspace": "test", "request": "   "}, "request"),
        ({"agent": "tester", "workspace": "test", "request": "x" * 20_001}, "request"),
        (
            {"agent": "tester", "workspace": "test", "request": "Do a thing nobody recorded"},
            "request",
        ),
        ({"agent": ["tester"], "workspace": {"a": 1}, "request": 5}, "agent"),
    ],
)
def test_bad_submissions_get_a_message_per_field_and_store_nothing(
    personas, agent, workspace, data, field, monkeypatch
):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    response = client_for(personas.operator).post("/api/runs/", data, format="json")
    assert response.status_code == 400
    assert field in response.json() and response.json()[field]
    assert not Run.objects.exists()


def test_roles_on_every_endpoint(personas, agent, workspace, docs):
    run_id = submit(personas.operator, agent, workspace).json()["id"]
    drive(run_id)
    approval = ApprovalRequest.objects.get(run_id=run_id)
    anonymous = APIClient()
    endpoints = [
        ("get", "/api/runs/"),
        ("get", f"/api/runs/{run_id}/"),
        ("get", f"/api/runs/{run_id}/events/"),
        ("post", f"/api/runs/{run_id}/answer/"),
        ("post", f"/api/runs/{run_id}/cancel/"),
        ("post", f"/api/runs/{run_id}/rollback/"),
        ("get", "/api/approvals/"),
        ("get", f"/api/approvals/{approval.pk}/"),
        ("post", f"/api/approvals/{approval.pk}/decide/"),
        ("post", "/api/runs/"),
    ]
    for method, url in endpoints:
        assert getattr(anonymous, method)(url).status_code in (401, 403), url
        assert getattr(client_for(personas.outsider), method)(url).status_code == 403, url
    # Ops and operators see runs but never the approvals; ops cannot submit.
    for user in (personas.ops, personas.operator):
        assert client_for(user).get("/api/approvals/").status_code == 403
        decide = client_for(user).post(
            f"/api/approvals/{approval.pk}/decide/", {"decision": "approve"}
        )
        assert decide.status_code == 403
    assert submit(personas.ops, agent, workspace).status_code == 403
    assert client_for(personas.ops).post(f"/api/runs/{run_id}/rollback/").status_code == 403
    # A requester who is an approver still cannot approve their own run.
    own = submit(personas.admin, agent, workspace).json()["id"]
    drive(own)
    mine = ApprovalRequest.objects.get(run_id=own)
    refused = client_for(personas.admin).post(
        f"/api/approvals/{mine.pk}/decide/", {"decision": "approve"}
    )
    assert refused.status_code == 403 and "own run" in refused.json()["detail"]
    assert ApprovalRequest.objects.get(pk=mine.pk).status == "pending"


def test_bad_input_on_the_other_endpoints(personas, agent, workspace, docs):
    run_id = submit(personas.operator, agent, workspace).json()["id"]
    drive(run_id)
    approval = ApprovalRequest.objects.get(run_id=run_id)
    ops, approver = client_for(personas.ops), client_for(personas.approver)
    assert ops.get("/api/runs/", {"status": "sleeping"}).status_code == 400
    assert ops.get(f"/api/runs/{run_id}/events/", {"after": "-1"}).status_code == 400
    assert ops.get(f"/api/runs/{run_id}/events/", {"after": "x"}).status_code == 400
    assert ops.get(f"/api/runs/{uuid.uuid4()}/").status_code == 404
    assert ops.get("/api/runs/not-a-uuid/").status_code == 404
    assert approver.get("/api/approvals/", {"status": "maybe"}).status_code == 400
    url = f"/api/approvals/{approval.pk}/decide/"
    assert "decision" in approver.post(url, {"decision": "perhaps"}).json()
    assert "comment" in approver.post(url, {"decision": "reject"}).json()
    too_long = approver.post(url, {"decision": "reject", "comment": "x" * 4001}).json()
    assert "comment" in too_long
    assert ApprovalRequest.objects.get(pk=approval.pk).status == "pending"
    filtered = ops.get("/api/runs/", {"status": "waiting_for_approval", "agent": "tester"})
    assert [r["id"] for r in filtered.json()["results"]] == [run_id]
    assert ops.get("/api/runs/", {"requester": "nobody"}).json()["results"] == []


def test_session_clients_need_csrf_and_tokens_come_from_drf_create_token(
    personas, agent, workspace, docs
):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(personas.operator)
    data = {"agent": agent.slug, "workspace": workspace.slug, "request": FIX}
    assert browser.post("/api/runs/", data, format="json").status_code == 403
    assert not Run.objects.exists()

    call_command("drf_create_token", personas.operator.username, verbosity=0)
    token = Token.objects.get(user=personas.operator)
    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert script.post("/api/runs/", data, format="json").status_code == 201
    script.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert script.get("/api/runs/").status_code == 401


def test_the_schema_and_the_docs(personas):
    anonymous = APIClient()
    assert anonymous.get("/api/schema/").status_code == 401
    assert anonymous.get("/api/docs/").status_code in (401, 403)
    client = client_for(personas.operator)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in (
        "/api/runs/",
        "/api/runs/{id}/",
        "/api/runs/{id}/events/",
        "/api/runs/{id}/answer/",
        "/api/runs/{id}/cancel/",
        "/api/runs/{id}/rollback/",
        "/api/approvals/",
        "/api/approvals/{id}/decide/",
    ):
        assert path in paths, path
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
    assert b"cdn" not in docs.content.lower()
