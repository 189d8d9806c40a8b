"""What the model is told about tools (SPEC T1): definitions only, never implementations,
and only of the enabled tools the agent's policy could let it use."""

from __future__ import annotations

from typing import Any

from policies.core.permissions import Policy, level_of, tool_may_be_used
from policies.models import ToolDefinition


def tool_definitions_for(policy: Policy, *, for_evals: bool = False) -> list[dict[str, Any]]:
    """In the Anthropic Messages API's shape: name, description, input_schema. The eval
    set's own MCP tools (``wipe``, ``dump_env``) are offered to its agents only."""
    tools = ToolDefinition.objects.filter(enabled=True)
    if not for_evals:
        tools = tools.without_evals()
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
        for tool in tools.order_by("name")
        if tool_may_be_used(policy, tool.name, level_of(tool.permission_level))
    ]
