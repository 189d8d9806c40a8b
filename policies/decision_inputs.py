"""The rows that decide tool calls, kept per process while the decision stamp holds
(SPEC P3–P7).

A run worker drives hundreds of runs of a few agents at once, and every claim read the same
policy, rules, tool definitions, MCP allow lists and hook bindings again: a dozen queries a
run, a fifth of a worker's time on a short run. Here a process keeps each of them, keyed by
what it is for, tagged with the decision stamp (``policies.config_stamp``) read *before*
its rows: an entry is used only while the stamp read now is the one it was read under, and
for at most ``MAX_AGE_SECONDS``. Any save or delete of those rows moves the stamp once it
commits, so an edit still applies to the very next call, in every process; a load that
raced an edit is tagged with the older stamp and read again at the next look.

What is kept is shared by the threads of the process: plain values (``Policy``,
``Binding``) and model instances nobody writes to (the tool definitions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config_stamp import stamp_kept, stamp_kept_forget
from .core.hook_runner import Binding
from .core.permissions import Policy
from .hooks import hook_bindings_for
from .models import McpServer, ToolDefinition
from .permissions import policy_for_agent


@dataclass(frozen=True)
class ToolRows:
    """The enabled tools (by name, in name order) and the registry names of the MCP tools
    a whitelisted server allows."""

    definitions: Mapping[str, ToolDefinition]
    mcp_allowed: frozenset[str]


def decision_policy(agent: Any, stamp: str) -> Policy:
    """The agent's policy (its own, or the default), as ``policy_for_agent`` reads it."""
    return stamp_kept(("policy", agent.policy_id), stamp, lambda: policy_for_agent(agent))


def decision_hooks(agent: Any, stamp: str) -> list[Binding]:
    """The agent's enabled hook bindings, as ``hook_bindings_for`` builds them."""
    return list(stamp_kept(("hooks", agent.pk), stamp, lambda: hook_bindings_for(agent)))


def decision_tools(*, for_evals: bool, stamp: str) -> ToolRows:
    """The enabled tools and MCP allow lists (the eval set's own only for its agents)."""
    return stamp_kept(("tools", for_evals), stamp, lambda: tool_rows_read(for_evals=for_evals))


def tool_rows_read(*, for_evals: bool) -> ToolRows:
    """The tools and allow lists as they are stored now."""
    tools = ToolDefinition.objects.filter(enabled=True)
    servers = McpServer.objects.filter(enabled=True)
    if not for_evals:
        tools, servers = tools.without_evals(), servers.without_evals()
    allowed = frozenset(
        f"mcp:{name}:{tool}"
        for name, tools_allowed in servers.values_list("name", "allowed_tools")
        for tool in (tools_allowed if isinstance(tools_allowed, list) else [])
    )
    return ToolRows({tool.name: tool for tool in tools.order_by("name")}, allowed)


def decision_inputs_forget() -> None:
    """Drop every entry (tests that rewrite rows under a stamp they then restore)."""
    stamp_kept_forget()
