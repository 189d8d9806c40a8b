"""No action or read beyond policy, inside real runs (issue 16, SPEC T1, T9, T12, P1–P3):
the model (the fake Anthropic server, through the real SDK) is offered only the MCP tools
a server allows; a read-only task cannot write through an MCP tool; what a server's folder
forbids never reaches the run's record or ``GET /api/runs/<id>/``; and the shell is an L3
action a person approves by typing the command, only for a task that needs one."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from policies.mcp_servers import mcp_discover
from policies.models import McpServer, PolicyRule
from policies.models import Policy as PolicyRow
from runs.approval_outcomes import approval_decide
from runs.models import Run, ToolCall
from runs.services import run_create
from tests.conftest import SEEDED
from tests.fake_anthropic import FakeAnthropic, message
from tests.helpers import drive
from tests.test_mcp_reach import (  # noqa: F401 - served is a fixture
    EMPTY_TREE,
    FORBIDDEN,
    FS_TOOLS,
    GIT_TOOLS,
    KEY,
    SCRIPT,
    served,
)

pytestmark = SEEDED
WRITES = {
    "mcp:fs:write_file": {"path": "notes/new.md", "content": "written"},
    "mcp:fs:move_file": {"source": "notes/a.md", "destination": "notes/moved.md"},
    "mcp:git:git_add": {"repo_path": ".", "files": ["notes/a.md"]},
    "mcp:git:git_commit": {"repo_path": ".", "message": "by a read-only task"},
    "mcp:git:git_checkout": {"repo_path": ".", "branch_name": "main"},
}


@pytest.fixture
def servers(served):  # noqa: F811
    for name, args, tools in (
        ("fs", ["fs", str(served)], FS_TOOLS),
        ("git", ["git", "--repository", str(served)], GIT_TOOLS),
    ):
        row = McpServer.objects.create(
            name=name,
            command=sys.executable,
            args=[SCRIPT, *args],
            allowed_tools=tools,
            allowed_paths=["**"],
            forbidden_paths=FORBIDDEN,
        )
        mcp_discover(row)
    return served


@pytest.fixture
def open_policy(agent):
    """Everything allowed: what stops a call here is the boundary or the server's folder."""
    row = PolicyRow.objects.create(name="open", ceiling="L3")
    PolicyRule.objects.create(policy=row, order=1, key="all", tool="*", decision="allow")
    agent.policy = row
    agent.save(update_fields=["policy"])
    return row


def submit(personas, agent, workspace, request: str) -> Run:
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request=request,
        dispatch=False,
    )
    assert run.model_label == "anthropic"
    return run


def tool_turn(*calls: tuple[str, dict]):
    blocks = [
        {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": arguments}
        for i, (name, arguments) in enumerate(calls)
    ]
    return message(blocks, stop_reason="tool_use")


DONE = message([{"type": "text", "text": "Done."}])


def offered(api: FakeAnthropic) -> set[str]:
    return {tool["name"] for tool in api.requests[0]["body"].get("tools", [])}


def test_tools_a_server_does_not_allow_are_never_offered(personas, agent, workspace, servers, api):
    McpServer.objects.filter(name="fs").update(allowed_tools=["read_file"])
    McpServer.objects.filter(name="git").update(enabled=False)
    api.answers.append(DONE)
    run = drive(submit(personas, agent, workspace, "What does notes/a.md say?"))
    assert run.status == "completed", run.failure_reason
    mcp = {name for name in offered(api) if name.startswith("mcp:")}
    assert mcp == {"mcp:fs:read_file"}


def test_a_read_only_task_cannot_write_through_any_mcp_tool(
    personas, agent, workspace, servers, api, open_policy
):
    api.answers += [tool_turn(*WRITES.items(), ("mcp:fs:read_file", {"path": "notes/a.md"})), DONE]
    run = drive(submit(personas, agent, workspace, "What does notes/a.md say?"))
    assert run.status == "completed", run.failure_reason
    assert run.task["intent"] == "question"
    # Not offered (nothing the task could use), and refused when a model calls them anyway.
    assert not set(WRITES) & offered(api) and "mcp:fs:read_file" in offered(api)
    records = {r.tool: r for r in ToolCall.objects.filter(run=run)}
    for tool in WRITES:
        assert (records[tool].status, records[tool].rule) == ("refused", "task-boundary"), tool
        assert "read-only" in records[tool].error
    assert records["mcp:fs:read_file"].status == "ok"  # reading is what the task does
    assert not (servers / "notes" / "new.md").exists() and (servers / "notes" / "a.md").exists()


def test_a_secret_behind_a_link_in_the_served_folder_never_reaches_the_api(
    personas, agent, workspace, servers, api, open_policy
):
    reads = [
        ("mcp:fs:read_file", {"path": "notes/key"}),
        ("mcp:fs:read_file", {"path": "notes/gitconfig"}),
        ("mcp:fs:read_multiple_files", {"paths": ["notes/secrets-dir/key.txt"]}),
        ("mcp:fs:directory_tree", {"path": "notes"}),
        ("mcp:git:git_show", {"repo_path": ".", "revision": "HEAD:secrets/key.txt"}),
        ("mcp:git:git_diff", {"repo_path": ".", "target": EMPTY_TREE}),
    ]
    api.answers += [tool_turn(*reads), DONE]
    run = drive(submit(personas, agent, workspace, "What do the notes say?"))
    assert run.status == "completed", run.failure_reason
    statuses = list(ToolCall.objects.filter(run=run).values_list("tool", "status"))
    assert len(statuses) == len(reads) and {s for _, s in statuses} == {"refused"}
    client = APIClient()
    client.force_authenticate(personas.operator)
    detail = client.get(f"/api/runs/{run.pk}/")
    assert detail.status_code == 200
    assert KEY not in json.dumps(detail.json()) and "GITCONFIG" not in json.dumps(detail.json())
    assert KEY not in json.dumps([m["body"] for m in api.requests])  # nor the model


@pytest.mark.parametrize("policy", ["default", "open"])
def test_a_task_that_needs_a_command_asks_to_type_it(
    personas, agent, workspace, api, request, policy
):
    if policy == "open":
        request.getfixturevalue("open_policy")
    api.answers += [tool_turn(("dangerous", {"command": "ls"})), DONE]
    run = drive(submit(personas, agent, workspace, "Run `ls` in the workspace and tell me"))
    assert "dangerous" in run.task["boundaries"]["tools"]
    assert "dangerous" in offered(api)
    assert run.status == "waiting_for_approval", run.failure_reason
    approval = ApprovalRequest.objects.get(run=run, tool="dangerous")
    assert approval.strong_confirmation and approval.confirm_expected == "ls"
    assert "a person types the command" in approval.reason
    page = Client()
    page.force_login(personas.approver)
    html = page.get(reverse("approvals:review", kwargs={"approval_id": approval.pk})).content
    assert b"the approver types the command" in html and b'data-expected="ls"' in html
    with pytest.raises(ValidationError):
        approval_decide(approval=approval, user=personas.approver, decision="approve")
    with pytest.raises(ValidationError):
        approval_decide(approval=approval, user=personas.approver, decision="approve", confirm="l")
    approval_decide(approval=approval, user=personas.approver, decision="approve", confirm="ls")
    if shutil.which("bwrap") is None:
        return  # the sandbox is not here: the shell refuses to run (tests/test_shell.py)
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    record = ToolCall.objects.get(run=run, tool="dangerous", status="ok")
    assert "AGENTS.md" in record.output["content"]


@pytest.mark.parametrize("policy", ["default", "open"])
def test_a_task_that_needs_no_command_never_gets_the_shell(
    personas, agent, workspace, api, request, policy
):
    if policy == "open":
        request.getfixturevalue("open_policy")
    api.answers += [tool_turn(("dangerous", {"command": "cat AGENTS.md"})), DONE]
    run = drive(submit(personas, agent, workspace, "What does AGENTS.md say?"))
    assert "dangerous" not in offered(api)
    assert run.status == "completed", run.failure_reason
    record = ToolCall.objects.get(run=run, tool="dangerous")
    assert (record.status, record.rule) == ("refused", "task-boundary")
    assert not ApprovalRequest.objects.filter(run=run).exists()


def test_a_whole_root_tool_asks_a_person_when_its_server_says_so(
    personas, agent, workspace, servers, api, open_policy
):
    McpServer.objects.filter(name="git").update(whole_root_tools="ask")
    diff = ("mcp:git:git_diff", {"repo_path": ".", "target": EMPTY_TREE})
    api.answers += [tool_turn(diff), DONE]
    run = drive(submit(personas, agent, workspace, "What changed in the repository?"))
    assert run.status == "waiting_for_approval", run.failure_reason
    approval = ApprovalRequest.objects.get(run=run, tool="mcp:git:git_diff")
    assert approval.rule == "whole-root" and "forbidden paths" in approval.reason
    approval_decide(
        approval=approval, user=personas.approver, decision="reject", comment="not the secrets"
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    record = ToolCall.objects.get(run=run, tool="mcp:git:git_diff")
    assert record.status == "refused" and KEY not in json.dumps(record.output)


def test_a_writing_task_changes_through_mcp_only_the_files_it_names(
    personas, agent, workspace, api, open_policy
):
    """A server that serves the run's workspace (it names no folder of its own)."""
    (workspace.root_path / "notes").mkdir()
    (workspace.root_path / "notes" / "a.md").write_text("teh typo\n")
    row = McpServer.objects.create(
        name="notes",
        command=sys.executable,
        args=[SCRIPT],
        allowed_tools=["write_note"],
        allowed_paths=["notes/**"],
    )
    mcp_discover(row)
    api.answers += [
        tool_turn(
            ("mcp:notes:write_note", {"path": "notes/b.md", "text": "elsewhere"}),
            ("mcp:notes:write_note", {"path": "notes/a.md", "text": "the typo\n"}),
        ),
        DONE,
    ]
    run = drive(submit(personas, agent, workspace, "Fix the typo in notes/a.md"))
    assert run.status == "completed", run.failure_reason
    assert run.task["boundaries"]["write_paths"] == ["notes/a.md"]
    elsewhere, named = ToolCall.objects.filter(run=run).order_by("started_at")
    assert (elsewhere.status, elsewhere.rule) == ("refused", "task-boundary")
    assert named.status == "ok", named.error
    assert not (workspace.root_path / "notes" / "b.md").exists()
    assert (workspace.root_path / "notes" / "a.md").read_text() == "the typo\n"
