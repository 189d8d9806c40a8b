"""The API's contract, attacked as a class (issue 16, section 4): every route of the served
OpenAPI schema, as every persona, with well-formed but hostile input — format suffixes,
unknown and malformed ids, huge, negative and non-numeric numbers, NUL characters, wrong
types — answers below 500, and every 2xx body matches the schema of its operation."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from tests.conftest import SEEDED
from tests.helpers import drive, driven
from tests.openapi import body_errors, openapi_document, operation_for

pytestmark = SEEDED

SUFFIXES = ("", ".json", ".api", ".xml", ".json/", ".JSON")
BAD_IDS = (
    str(uuid.uuid4()),
    "not-a-uuid",
    "0" * 32,
    "-" * 36,
    "F" * 32,
    "12345678-1234-1234-1234-1234567890ab",
    "1" * 36,
)
HOSTILE_NUMBERS = (
    "-1",
    "0",
    "x",
    "1e3",
    "1.5",
    "10" * 20,
    str(2**63),
    str(2**31),
    "9" * 400,
    " 5",
    "٣",  # an Arabic-Indic digit: str.isdigit() says yes, int() agrees, SQL does not care
    "0x10",
    "",
    "\x00",
)
HOSTILE_TEXT = ("\x00", "a\x00b", "%", "'; --", "é" * 300, "x" * 5000, "[]", "{}")
QUERY_NAMES = ("limit", "offset", "page", "page_size", "after", "status", "agent", "requester")
HOSTILE_VALUES: tuple[Any, ...] = (
    None,
    "\x00",
    "a\x00b",
    10**30,
    -1,
    1.5,
    True,
    [],
    {},
    {"\x00": "x"},
    {"a": "\x00"},
    ["\x00"],
    "x" * 100_000,
)
# One plausible body per operation that takes one, so each persona's 2xx is seen too.
VALID_BODIES = {
    "/api/runs/": lambda f: {
        "agent": f["agent"],
        "workspace": f["workspace"],
        "request": "What does docs/configuration.md say?",
    },
    "/api/runs/{id}/answer/": lambda f: {"answers": {"path": "docs/configuration.md"}},
    "/api/approvals/{id}/decide/": lambda f: {"decision": "reject", "comment": "not now"},
}


@pytest.fixture
def world(personas, agent, workspace, docs) -> dict[str, Any]:
    """A run waiting for approval (its request still pending: nobody decided it yet), and
    a completed one, approved by the approver, whose writes can be rolled back."""
    waiting = driven(personas, agent, workspace)
    done = driven(personas, agent, workspace)
    approver = APIClient()
    approver.force_authenticate(personas.approver)
    decided = approver.post(
        f"/api/approvals/{ApprovalRequest.objects.get(run=done).pk}/decide/",
        {"decision": "approve"},
        format="json",
    )
    assert decided.status_code == 200, decided.content
    assert drive(done.pk).status == "completed"
    return {
        "run": str(waiting.pk),
        "completed": str(done.pk),
        "approval": str(ApprovalRequest.objects.get(run=waiting).pk),
        "agent": agent.slug,
        "workspace": workspace.slug,
        "document": openapi_document(personas.admin),
    }


def clients(personas) -> dict[str, APIClient]:
    made = {"anonymous": APIClient()}
    for name, user in personas.all().items():
        made[name] = APIClient()
        made[name].force_authenticate(user)
    for client in made.values():
        client.raise_request_exception = False  # a 500 is an answer to record, not raise
    return made


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (template, method, operation)
        for template, item in document["paths"].items()
        for method, operation in item.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]


def concrete(template: str, world: dict[str, Any], ident: str | None = None) -> str:
    """The template with a real id (a run's or an approval's, by its collection)."""
    if "{id}" not in template:
        return template
    own = world["approval"] if template.startswith("/api/approvals/") else world["run"]
    if template.endswith("/rollback/"):
        own = world["completed"]
    return template.replace("{id}", own if ident is None else ident)


class Verdicts:
    """Every request's answer judged: below 500, and a 2xx JSON body that fits the schema."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.problems: list[str] = []
        self.count = 0

    def send(self, client: APIClient, method: str, url: str, **kwargs: Any) -> Any:
        self.count += 1
        response = getattr(client, method)(url, **kwargs)
        where = f"{method.upper()} {url} {kwargs.get('data', '')!r:.80} -> {response.status_code}"
        if response.status_code >= 500:
            self.problems.append(f"{where}: {response.content[:200]!r}")
        elif 200 <= response.status_code < 300 and "json" in response.get("Content-Type", ""):
            path = url.split("?", 1)[0]
            operation = operation_for(self.document, method, path)
            if operation is None:
                self.problems.append(f"{where}: answered 2xx on a route the schema lacks")
            else:
                errors = body_errors(self.document, operation, response)
                self.problems += [f"{where}: {e}" for e in errors]
        return response

    def assert_clean(self) -> None:
        assert self.count, "no request was sent"
        assert not self.problems, f"{len(self.problems)} of {self.count}:\n" + "\n".join(
            self.problems[:40]
        )


def test_every_route_with_every_suffix_as_every_persona(personas, world):
    verdicts = Verdicts(world["document"])
    for client in clients(personas).values():
        for template, method, _ in operations(world["document"]):
            url = concrete(template, world)
            body = VALID_BODIES.get(template, lambda f: {})(world)
            for suffix in SUFFIXES:
                target = url[:-1] + suffix if suffix else url
                kwargs = {"data": body, "format": "json"} if method != "get" else {}
                verdicts.send(client, method, target, **kwargs)
            verdicts.send(client, method, url, HTTP_ACCEPT="text/html")
        for method in ("put", "patch", "delete"):
            verdicts.send(client, method, concrete("/api/runs/{id}/", world), data={})
    verdicts.assert_clean()


def test_unknown_and_malformed_ids_are_404_never_500(personas, world):
    verdicts = Verdicts(world["document"])
    made = clients(personas)
    for name in ("admin", "approver", "ops"):
        for template, method, _ in operations(world["document"]):
            if "{id}" not in template:
                continue
            for ident in BAD_IDS:
                response = verdicts.send(made[name], method, concrete(template, world, ident))
                if response.status_code not in (403, 404, 405):
                    verdicts.problems.append(f"{name} {template} {ident!r}: {response.status_code}")
    verdicts.assert_clean()


def test_hostile_query_parameters_are_400_or_ignored_never_500(personas, world):
    verdicts = Verdicts(world["document"])
    made = clients(personas)
    for name in ("admin", "ops"):
        for template, method, _ in operations(world["document"]):
            if method != "get":
                continue
            url = concrete(template, world)
            for parameter in QUERY_NAMES:
                for value in (*HOSTILE_NUMBERS, *HOSTILE_TEXT):
                    verdicts.send(made[name], "get", url, data={parameter: value})
    verdicts.assert_clean()


def test_page_sizes_are_capped_and_bad_page_numbers_are_400(personas, world):
    """The documented contract of ``limit`` and ``offset`` on every paginated list: a limit
    above the maximum is served as the maximum; any other number out of range is a 400."""
    client = clients(personas)["admin"]
    for url in ("/api/runs/", "/api/approvals/"):
        for huge in ("201", "1000000", str(2**63), "9" * 400):
            capped = client.get(url, {"limit": huge, "offset": "0"})
            assert capped.status_code == 200, (url, huge)
            assert capped.json()["next"] is None or "limit=200" in capped.json()["next"]
        bad = {
            "limit": ("-1", "0", "x", "1.5", "1e3", " 5", "٣", ""),
            "offset": ("-1", "x", "1.5", str(2**31), str(2**63), "9" * 400, "٣"),
        }
        for parameter, values in bad.items():
            for value in values:
                response = client.get(url, {parameter: value})
                assert response.status_code == 400, (url, parameter, value)
                assert parameter in response.json(), response.content
        assert client.get(url, {"offset": 10**6}).json()["results"] == []
    # The schema says so, bounds included.
    parameters = world["document"]["paths"]["/api/runs/"]["get"]["parameters"]
    limit = next(p for p in parameters if p["name"] == "limit")
    assert limit["schema"]["maximum"] == 200


def test_the_events_list_is_the_bare_list_its_schema_says(personas, world):
    client = clients(personas)["ops"]
    events = client.get(f"/api/runs/{world['run']}/events/", {"after": 2})
    assert isinstance(events.json(), list) and events.json()[0]["seq"] == 3
    operation = world["document"]["paths"]["/api/runs/{id}/events/"]["get"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"]["type"] == (
        "array"
    )
    assert not body_errors(world["document"], operation, events)


def test_hostile_bodies_are_400_never_500(personas, world):
    verdicts = Verdicts(world["document"])
    made = clients(personas)
    for name in ("admin", "approver", "operator"):
        for template, method, operation in operations(world["document"]):
            if method != "post":
                continue
            url = concrete(template, world)
            valid = VALID_BODIES.get(template, lambda f: {})(world)
            schema = operation.get("requestBody", {}).get("content", {}).get("application/json")
            names = list(_properties(world["document"], schema)) or ["anything"]
            for field in names:
                for value in HOSTILE_VALUES:
                    body = json.dumps({**valid, field: value})
                    verdicts.send(
                        made[name], "post", url, data=body, content_type="application/json"
                    )
            for raw in ("[]", '"x"', "123", "null", "{", '{"a": NaN}', "\x00"):
                verdicts.send(made[name], "post", url, data=raw, content_type="application/json")
            verdicts.send(made[name], "post", url, data={"decision": "\x00", "request": "\x00"})
    verdicts.assert_clean()


def _properties(document: dict[str, Any], content: dict[str, Any] | None) -> dict[str, Any]:
    if not content:
        return {}
    schema = content["schema"]
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema.get("properties", {})
