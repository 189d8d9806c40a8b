"""Who reaches the API's schema and docs, and where a token may travel (issue 16, section 4).

A logged-in user in no role gets neither the schema nor the docs. A token is accepted in the
Authorization header only: one in a query string — under any credential-like name, or any
name at all when its value is an issued token — is refused with a 400 that says where it
goes, on every page and API route, even for a client its session already authenticates.
"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import SEEDED

pytestmark = SEEDED

QUERY_NAMES = (
    "token",
    "TOKEN",
    "access_token",
    "Access-Token",
    "auth",
    "auth_token",
    "authorization",
    "api_key",
    "api-key",
    "X-Api-Key",
    "apikey",
    "key",
    "bearer",
    "jwt",
)
ROUTES = ("/api/runs/", "/api/schema/", "/api/docs/", "/api/", "/runs/", "/metrics", "/")


def session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_users_with_no_role_get_no_schema_no_docs_and_no_api_root(personas):
    outsider = session(personas.outsider)
    for url in ("/api/schema/", "/api/docs/", "/api/docs/?script=", "/api/"):
        response = outsider.get(url)
        assert response.status_code == 403, (url, response.status_code)
        assert b"openapi" not in response.content.lower()
    anonymous = APIClient()
    for url in ("/api/schema/", "/api/docs/", "/api/"):
        assert anonymous.get(url).status_code in (401, 403), url
    for user in (personas.operator, personas.ops, personas.approver, personas.admin):
        schema = session(user).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        assert schema.status_code == 200 and "paths" in schema.json()
        assert session(user).get("/api/docs/").status_code == 200


@pytest.mark.parametrize("name", QUERY_NAMES)
def test_a_token_in_the_query_string_is_refused_on_every_route(personas, name):
    key = Token.objects.create(user=personas.operator).key
    for client in (APIClient(), session(personas.operator)):
        for url in ROUTES:
            response = client.get(url, {name: key})
            assert response.status_code == 400, (name, url, response.status_code)
            assert b"Authorization header" in response.content
            assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    # The same token in the header still works.
    header = APIClient()
    header.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert header.get("/api/runs/").status_code == 200


def test_an_issued_token_is_refused_under_any_parameter_name(personas):
    key = Token.objects.create(user=personas.operator).key
    for name in ("q", "t", "status", "after"):
        response = APIClient().get("/api/runs/", {name: key})
        assert response.status_code == 400 and b"Authorization header" in response.content
    # A value merely shaped like a token (nobody's) is an ordinary value.
    assert session(personas.ops).get("/api/runs/", {"agent": "a" * 40}).status_code == 200


def test_nul_characters_in_a_url_are_a_400_on_pages_and_api(personas):
    for url in ("/api/runs/", "/runs/", "/approvals/", "/dashboards/retro/"):
        for query in ({"agent": "\x00"}, {"a\x00": "1"}, {"status": "x\x00y"}):
            response = session(personas.admin).get(url, query)
            assert response.status_code == 400, (url, query, response.status_code)
