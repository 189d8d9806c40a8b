"""An MCP tool's reach and a server's root are an admin's to set (issue 16): the forms take
them, and refuse what the checks could not read."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from policies.models import McpServer, ToolDefinition

pytestmark = pytest.mark.django_db


@pytest.fixture
def tool(db) -> ToolDefinition:
    return ToolDefinition.objects.create(
        name="mcp:git:git_show",
        description="Show a revision.",
        input_schema={"type": "object", "properties": {"revision": {"type": "string"}}},
        permission_level="L1",
        side_effect="none",
        source="mcp",
        argument_kinds={"revision": "revision"},
        whole_root=True,
        annotations={"readOnlyHint": True},
    )


def form(tool: ToolDefinition, **changes: str) -> dict[str, str]:
    data = {
        "name": tool.name,
        "description": tool.description,
        "input_schema": '{"type": "object"}',
        "output_schema": "{}",
        "permission_level": "L1",
        "side_effect": "none",
        "timeout_sec": "30",
        "retry": "0",
        "audit": "on",
        "source": "mcp",
        "implementation": "",
        "enabled": "on",
        "argument_kinds": '{"revision": "revision"}',
        "whole_root": "on",
    }
    return {**data, **changes}


def admin_client(personas) -> Client:
    client = Client()
    client.force_login(personas.admin)
    return client


def test_an_admin_declares_a_tools_reach(personas, tool):
    url = reverse("admin:policies_tooldefinition_change", args=[tool.pk])
    client = admin_client(personas)
    page = client.get(url)
    assert page.status_code == 200 and b"readOnlyHint" in page.content  # shown, not edited
    changed = form(tool, argument_kinds='{"revision": "revision", "repo_path": "path"}')
    changed.pop("whole_root")
    assert client.post(url, changed).status_code == 302
    tool.refresh_from_db()
    assert tool.argument_kinds == {"revision": "revision", "repo_path": "path"}
    assert tool.whole_root is False and tool.annotations == {"readOnlyHint": True}


@pytest.mark.parametrize("kinds", ['{"revision": "anything"}', '["path"]', '{"a": 1}'])
def test_a_kind_the_checks_do_not_know_is_refused(personas, tool, kinds):
    url = reverse("admin:policies_tooldefinition_change", args=[tool.pk])
    response = admin_client(personas).post(url, form(tool, argument_kinds=kinds))
    assert response.status_code == 200 and b"argument names to one of" in response.content
    tool.refresh_from_db()
    assert tool.argument_kinds == {"revision": "revision"}


def test_a_servers_root_must_be_an_absolute_folder(personas):
    server = McpServer(name="git", command="mcp-server-git", root="repo")
    with pytest.raises(Exception, match="absolute path"):
        server.full_clean()
    server.root = "/srv/repo"
    server.full_clean()
