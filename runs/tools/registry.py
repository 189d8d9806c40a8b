"""What the model is told about tools (SPEC T1): definitions only, never implementations,
and only of the enabled tools the agent's policy could let it use; of an MCP server's
tools, only those on its allow list while it is whitelisted (T12), and only those the
run's task could use (a read-only task is not offered a tool that changes things)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from policies.core.permissions import Policy, level_of, side_effect_of, tool_may_be_used
from policies.decision_inputs import ToolRows, tool_rows_read
from policies.mcp_servers import split_name
from policies.models import ToolDefinition

from ..core.intake.boundaries import side_effect_outside


def tool_definitions_for(
    policy: Policy,
    *,
    for_evals: bool = False,
    task: Mapping[str, Any] | None = None,
    rows: ToolRows | None = None,
) -> list[dict[str, Any]]:
    """In the Anthropic Messages API's shape: name, description, input_schema. The eval
    set's own MCP tools (``wipe``, ``dump_env``) are offered to its agents only. With the
    run's ``task``, an MCP tool its boundaries refuse whatever the arguments (one with a side
    effect, in a task that changes no files) is not offered: its call would be refused.
    ``rows``: the tools and allow lists as a worker keeps them (read here otherwise)."""
    if rows is None:
        rows = tool_rows_read(for_evals=for_evals)
    allowed = rows.mcp_allowed
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
        for tool in rows.definitions.values()
        if tool_may_be_used(policy, tool.name, level_of(tool.permission_level))
        and (tool.source != "mcp" or _offered(tool.name, allowed))
        and (tool.source != "mcp" or task is None or _within(task, tool))
    ]


def _within(task: Mapping[str, Any], tool: ToolDefinition) -> bool:
    return side_effect_outside(task, tool.name, side_effect_of(tool.side_effect)) is None


def _offered(name: str, allowed: AbstractSet[str]) -> bool:
    try:
        split_name(name)
    except ValueError:
        return False  # not a registry name of a server's tool: nothing can call it
    return name in allowed
