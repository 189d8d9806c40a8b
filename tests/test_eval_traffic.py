"""The eval set's traffic stays out of everyone's way, by one mechanism
(``policies.models.eval_traffic``): its agents, workspaces, policies, MCP servers and their
tools, and the runs, tool calls, approvals and rollups of its agents, are left out of every
listing, dropdown and figure — the admin's included — and its tools are offered to, and
callable by, its own runs only."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from approvals.models import ApprovalRequest
from policies.core.default_policy import DEFAULT_POLICY
from policies.models import Agent, McpServer, Policy, ToolDefinition, Workspace
from policies.simulation import policy_edit_effect
from runs.models import Run, ToolCall
from runs.observability.metrics import metrics_snapshot
from runs.tools.call import tool_call_run
from runs.tools.registry import tool_definitions_for
from tests.conftest import SEEDED

pytestmark = SEEDED


@pytest.fixture
def suite_rows(personas, agent, workspace, tmp_path) -> dict[str, Any]:
    """What one suite leaves behind, beside a real agent and workspace of the same kind."""
    root = tmp_path / "eval-workspace"
    root.mkdir()
    policy = Policy.objects.create(name="eval-case", description="Eval case x", for_evals=True)
    eval_agent = Agent.objects.create(
        slug="eval-a1", name="Eval agent", identity="x", policy=policy, for_evals=True
    )
    space = Workspace.objects.create(
        slug="eval-case", name="Eval: a case", root=str(root), for_evals=True
    )
    server = McpServer.objects.create(
        name="eval-notes", command="python", allowed_tools=["wipe"], for_evals=True
    )
    tool = ToolDefinition.objects.create(
        name="mcp:eval-notes:wipe",
        description="Wipes the notes.",
        input_schema={"type": "object", "properties": {}},
        permission_level="L1",
        side_effect="none",
        source="mcp",
        for_evals=True,
    )
    eval_run = Run.objects.create(
        agent=eval_agent, workspace=space, requester=personas.operator, request="x"
    )
    real_run = Run.objects.create(
        agent=agent, workspace=workspace, requester=personas.operator, request="y"
    )
    for run, tool_use in ((eval_run, "e"), (real_run, "r")):
        ToolCall.objects.create(
            run=run,
            workspace=run.workspace,
            tool_use_id=tool_use,
            tool="readSource",
            path="a.md",
            decision="allow",
            status="ok",
            policy_name="default",
        )
        ApprovalRequest.objects.create(
            run=run, kind="tool_call", tool="publish", tool_use_id=tool_use
        )
    return {
        "policy": policy,
        "agent": eval_agent,
        "workspace": space,
        "server": server,
        "tool": tool,
        "run": eval_run,
        "real_run": real_run,
    }


@pytest.mark.parametrize(
    ("admin_url", "label"),
    [
        ("admin:policies_agent_changelist", "Eval agent"),
        ("admin:policies_workspace_changelist", "Eval: a case"),
        ("admin:policies_policy_changelist", "eval-case"),
        ("admin:policies_mcpserver_changelist", "eval-notes"),
        ("admin:policies_tooldefinition_changelist", "mcp:eval-notes:wipe"),
        ("admin:runs_run_changelist", "Eval agent"),
        ("admin:runs_toolcall_changelist", "eval-a1"),
        ("admin:runs_toolcall_changelist", "Eval: a case"),
        ("admin:approvals_approvalrequest_changelist", "eval-a1"),
    ],
)
def test_the_admin_lists_hide_the_eval_set_unless_asked(
    admin_url, label, suite_rows, client, personas
):
    client.force_login(personas.admin)
    url = reverse(admin_url)
    default = client.get(url)
    assert default.status_code == 200
    assert label not in default.content.decode()
    assert label in client.get(url, {"eval_set": "shown"}).content.decode()
    assert label in client.get(url, {"eval_set": "only"}).content.decode()


def test_admin_dropdowns_offer_no_eval_rows_but_an_eval_row_keeps_its_own(
    suite_rows, client, personas, agent
):
    client.force_login(personas.admin)
    real = client.get(reverse("admin:policies_agent_change", args=[agent.pk])).content.decode()
    assert "eval-case" not in real  # the policy dropdown of a real agent
    own = reverse("admin:policies_agent_change", args=[suite_rows["agent"].pk])
    assert "eval-case" in client.get(own).content.decode()


def test_the_policy_preview_replays_no_eval_call(suite_rows, agent):
    from policies.permissions import policy_load

    current = policy_load("default")
    edited = type(current)(current.name, current.ceiling, (), current.version)
    looked_at, changed = policy_edit_effect(current=current, edited=edited)
    assert looked_at == 1  # the real run's call, not the eval run's
    real_calls = ToolCall.objects.filter(run=suite_rows["real_run"]).values_list("pk", flat=True)
    assert changed and {c.tool_call_id for c in changed} <= {str(pk) for pk in real_calls}


def test_an_eval_tool_is_offered_to_and_callable_by_the_eval_set_only(suite_rows, workspace):
    everyone = [t["name"] for t in tool_definitions_for(DEFAULT_POLICY)]
    assert "mcp:eval-notes:wipe" not in everyone
    own = [t["name"] for t in tool_definitions_for(DEFAULT_POLICY, for_evals=True)]
    assert "mcp:eval-notes:wipe" in own
    real = tool_call_run(
        workspace=workspace,
        tool="mcp:eval-notes:wipe",
        arguments={},
        policy=DEFAULT_POLICY,
        run=suite_rows["real_run"],
        tool_use_id="try-wipe",
    )
    assert real.status == "refused" and "no enabled tool" in real.error


def test_metrics_leave_the_eval_set_out(suite_rows):
    snapshot = metrics_snapshot()
    assert "eval-a1" not in snapshot.agents
    assert snapshot.pending_approvals == 1  # the real run's request only
    assert sum(snapshot.live.values()) == 1


def test_a_real_row_keeps_its_eval_choice_offered(suite_rows, client, personas, agent):
    agent.policy = suite_rows["policy"]  # a real agent pointed at an eval policy by hand
    agent.save(update_fields=["policy"])
    client.force_login(personas.admin)
    page = client.get(reverse("admin:policies_agent_change", args=[agent.pk])).content.decode()
    assert f'<option value="{suite_rows["policy"].pk}" selected>eval-case</option>' in page
