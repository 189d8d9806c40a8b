"""What the model is told about tools (SPEC T1): definitions only, never implementations,
and only of the enabled tools the agent's policy could let it use; of an MCP server's
tools, only those on its allow list while it is whitelisted (T12), and only those the
run's task could use (a read-only task is not offered a tool that changes things)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.core.permissions import Policy, level_of, side_effect_of, tool_may_be_used
from policies.mcp_servers import split_name
from policies.models import McpServer, ToolDefinition

from ..core.intake.boundaries import side_effect_outside


def _mcp_allowed(*, for_evals: bool) -> set[str]:
    """Registry names of the MCP tools a whitelisted server allows: any other MCP tool is
    refused at its call (check 2), so offering it would only invite the model to try."""
    servers = McpServer.objects.filter(enabled=True)
    if not for_evals:
        servers = servers.without_evals()
    return {
        f"mcp:{name}:{tool}"
        for name, tools in servers.values_list("name", "allowed_tools")
        for tool in (tools if isinstance(tools, list) else [])
    }


def tool_definitions_for(
    policy: Policy, *, for_evals: bool = False, task: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """In the Anthropic Messages API's shape: name, description, input_schema. The eval
    set's own MCP tools (``wipe``, ``dump_env``) are offered to its agents only. With the
    run's ``task``, an MCP tool its boundaries refuse whatever the arguments (one with a side
    effect, in a task that changes no files) is not offered: its call would be refused."""
    tools = ToolDefinition.objects.filter(enabled=True)
    if not for_evals:
        tools = tools.without_evals()
    allowed = _mcp_allowed(for_evals=for_evals)
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
        for tool in tools.order_by("name")
        if tool_may_be_used(policy, tool.name, level_of(tool.permission_level))
        and (tool.source != "mcp" or _offered(tool.name, allowed))
        and (tool.source != "mcp" or task is None or _within(task, tool))
    ]


def _within(task: Mapping[str, Any], tool: ToolDefinition) -> bool:
    return side_effect_outside(task, tool.name, side_effect_of(tool.side_effect)) is None


def _offered(name: str, allowed: set[str]) -> bool:
    try:
        split_name(name)
    except ValueError:
        return False  # not a registry name of a server's tool: nothing can call it
    return name in allowed
