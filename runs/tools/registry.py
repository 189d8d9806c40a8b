"""What the model is told about tools (SPEC T1): definitions only, never implementations,
and only of the enabled tools the agent's policy could let it use; of an MCP server's
tools, only those on its allow list while it is whitelisted (T12)."""

from __future__ import annotations

from typing import Any

from policies.core.permissions import Policy, level_of, tool_may_be_used
from policies.mcp_servers import split_name
from policies.models import McpServer, ToolDefinition


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


def tool_definitions_for(policy: Policy, *, for_evals: bool = False) -> list[dict[str, Any]]:
    """In the Anthropic Messages API's shape: name, description, input_schema. The eval
    set's own MCP tools (``wipe``, ``dump_env``) are offered to its agents only."""
    tools = ToolDefinition.objects.filter(enabled=True)
    if not for_evals:
        tools = tools.without_evals()
    allowed = _mcp_allowed(for_evals=for_evals)
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
        for tool in tools.order_by("name")
        if tool_may_be_used(policy, tool.name, level_of(tool.permission_level))
        and (tool.source != "mcp" or _offered(tool.name, allowed))
    ]


def _offered(name: str, allowed: set[str]) -> bool:
    try:
        split_name(name)
    except ValueError:
        return False  # not a registry name of a server's tool: nothing can call it
    return name in allowed
