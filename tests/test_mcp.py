"""MCP (SPEC T12) against a real stdio server written with the SDK: the six checks refuse,
each for its own reason, and an allowed call works."""

from __future__ import annotations

import sys
import uuid
from datetime import time
from pathlib import Path

import pytest

from policies.core.permissions import Policy, Rule
from policies.mcp_servers import mcp_discover
from policies.models import McpServer, ToolDefinition
from runs.tools.call import tool_call_run

pytestmark = pytest.mark.django_db
OPEN = Policy("open", "L3", (Rule("all", "*", "allow"),))


@pytest.fixture
def notes(workspace):
    (workspace.root_path / "notes").mkdir()
    (workspace.root_path / "notes" / "a.md").write_text("remember the milk")
    (workspace.root_path / "notes" / "secret").mkdir()
    server = McpServer.objects.create(
        name="notes",
        command=sys.executable,
        args=[str(Path(__file__).parent / "mcp_server.py")],
        allowed_tools=["read_note", "write_note", "fail"],
        allowed_paths=["notes/**"],
        forbidden_paths=["notes/secret/**"],
        rate_limit_per_minute=0,
    )
    mcp_discover(server)
    return server


def call(workspace, tool, policy=OPEN, **arguments):
    return tool_call_run(
        workspace=workspace, tool=f"mcp:notes:{tool}", arguments=arguments, policy=policy
    )


def test_discovery_puts_the_servers_tools_in_the_registry(notes):
    names = set(ToolDefinition.objects.filter(source="mcp").values_list("name", flat=True))
    assert names == {
        "mcp:notes:read_note",
        "mcp:notes:write_note",
        "mcp:notes:wipe",
        "mcp:notes:fail",
    }
    tool = ToolDefinition.objects.get(name="mcp:notes:read_note")
    assert tool.input_schema["required"] == ["path"] and tool.side_effect == "external_api"


def test_an_allowed_call_works_and_keeps_a_request_id(notes, workspace):
    record = call(workspace, "read_note", path="notes/a.md")
    assert record.status == "ok", record.error
    assert record.output["content"] == "remember the milk"
    assert record.output["request_id"].startswith("notes:read_note:")


def test_a_server_not_whitelisted_is_refused(notes, workspace):
    notes.enabled = False
    notes.save()
    record = call(workspace, "read_note", path="notes/a.md")
    assert record.error == "whitelist: the MCP server notes is not whitelisted"
    notes.delete()
    assert call(workspace, "read_note", path="notes/a.md").error.startswith("whitelist:")


def test_a_tool_not_allowed_is_refused(notes, workspace):
    record = call(workspace, "wipe")
    assert record.error == "tool: wipe is not an allowed tool of notes"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("notes/secret/x.md", "is in a forbidden path of notes"),
        ("NOTES/Secret/x.md", "is in a forbidden path of notes"),  # case games lose
        ("other/x.md", "is outside the allowed paths of notes"),
        ("../outside.md", "Paths with .. are refused"),
        ("/etc/passwd", "leads outside the folder the server serves"),
        ("~/.ssh/id_rsa", "Home paths are refused"),
    ],
)
def test_a_path_argument_out_of_range_is_refused(notes, workspace, path, message):
    record = call(workspace, "read_note", path=path)
    assert record.status == "refused"
    assert record.error.startswith("arguments:") and message in record.error


def test_a_call_that_needs_a_person_is_refused_for_approval(notes, workspace):
    asking = Policy("asking", "L3", (Rule("mcp", "mcp:*", "ask"),))
    record = call(workspace, "read_note", asking, path="notes/a.md")
    assert record.error.startswith("approval: ask") and record.decision == "ask"


def test_the_rate_limit_is_enforced(notes, workspace):
    # The count is per server and minute, shared by every process: a fresh name starts at 0.
    notes.name, notes.rate_limit_per_minute = f"notes{uuid.uuid4().hex[:8]}", 2
    notes.save()
    mcp_discover(notes)

    def read():
        return tool_call_run(
            workspace=workspace,
            tool=f"mcp:{notes.name}:read_note",
            arguments={"path": "notes/a.md"},
            policy=OPEN,
        )

    assert [read().status for _ in range(2)] == ["ok", "ok"]
    assert read().error == (
        f"rate_limit: {notes.name} allows 2 calls a minute; try again in a minute"
    )


def test_the_rate_limit_holds_across_the_turn_of_a_minute():
    """Two calls in the last second of a minute and one in the first second of the next:
    three in two seconds, the third refused (calendar minutes alone let it through)."""
    from datetime import UTC, datetime, timedelta

    from policies.rate_limits import rate_exceeded

    key = f"mcp:notes{uuid.uuid4().hex[:8]}"
    minute = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    late = minute - timedelta(seconds=1)
    assert [rate_exceeded(key, 2, late) for _ in range(2)] == [False, False]
    assert rate_exceeded(key, 2, minute + timedelta(seconds=1))
    # As the earlier calls slide out of the last sixty seconds, calls go through again.
    assert not rate_exceeded(key, 2, minute + timedelta(seconds=90))


def test_a_call_outside_the_change_window_is_refused(notes, workspace):
    from django.utils import timezone

    today = timezone.now().weekday()
    notes.window_days = [(today + 1) % 7]
    notes.window_start, notes.window_end = time(9, 0), time(17, 0)
    notes.save()
    record = call(workspace, "write_note", path="notes/b.md", text="x")
    assert record.error.startswith("change_window: outside the change window of notes")
    assert not (workspace.root_path / "notes" / "b.md").exists()


def test_a_tool_error_from_the_server_is_a_tool_error(notes, workspace):
    record = call(workspace, "fail")
    assert record.status == "error" and record.error == "Error executing tool fail"


def test_the_default_policy_asks_before_any_mcp_call(notes, workspace):
    from policies.core.default_policy import DEFAULT_POLICY

    record = call(workspace, "read_note", DEFAULT_POLICY, path="notes/a.md")
    assert record.decision == "ask" and record.status == "refused"


def test_check_permission_knows_mcp_tools_from_the_registry(notes):
    import io
    import json

    from django.core.management import call_command

    out = io.StringIO()
    call_command(
        "check_permission",
        "--policy",
        "default",
        "--tool",
        "mcp:notes:read_note",
        "--path",
        "notes/a.md",
        "--json",
        stdout=out,
    )
    report = json.loads(out.getvalue())
    assert (report["decision"], report["rule"]) == ("ask", "mcp")


def test_rediscovery_keeps_an_admins_hardening(notes):
    ToolDefinition.objects.filter(name="mcp:notes:write_note").update(
        enabled=False, side_effect="production_change", permission_level="L3"
    )
    mcp_discover(notes)
    tool = ToolDefinition.objects.get(name="mcp:notes:write_note")
    assert (tool.enabled, tool.side_effect, tool.permission_level) == (
        False,
        "production_change",
        "L3",
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"path": "notes/a.md", "filePath": "/etc/passwd"},
        {"path": "notes/a.md", "options": {"dest": "../x"}},
        {"path": "notes/a.md", "uri": "file:///etc/passwd"},
        {"path": "notes/a.md", "targets": [{"src": "notes/secret/k"}]},
    ],
)
def test_every_path_argument_is_checked_whatever_its_name_or_depth(notes, workspace, arguments):
    from policies.core.mcp_checks import path_arguments

    assert len(path_arguments(arguments)) == 2
    record = tool_call_run(
        workspace=workspace, tool="mcp:notes:read_note", arguments=arguments, policy=OPEN
    )
    assert record.status == "refused" and record.error.startswith("arguments:")


def test_each_path_is_decided_and_the_strictest_verdict_stands(notes, workspace):
    from policies.core.default_policy import DEFAULT_POLICY

    ToolDefinition.objects.filter(name="mcp:notes:write_note").update(
        input_schema={"type": "object"},
        argument_kinds={"path": "path", "destination": "path", "text": "text"},
    )
    notes.allowed_paths = ["**"]
    notes.save()
    lax = Policy("lax", "L3", (*DEFAULT_POLICY.rules[:2], Rule("mcp", "mcp:*", "allow")))
    record = tool_call_run(
        workspace=workspace,
        tool="mcp:notes:write_note",
        arguments={"path": "notes/b.md", "destination": ".env", "text": "x"},
        policy=lax,
    )
    assert (record.status, record.decision, record.rule) == ("refused", "deny", "deny-secrets")


def test_a_link_in_an_mcp_path_argument_is_followed_before_the_checks(notes, workspace, tmp_path):
    import os

    (tmp_path / "elsewhere.md").write_text("outside")
    os.symlink(tmp_path / "elsewhere.md", workspace.root_path / "notes" / "link.md")
    record = call(workspace, "read_note", path="notes/link.md")
    assert record.status == "refused" and "outside the folder the server serves" in record.error
