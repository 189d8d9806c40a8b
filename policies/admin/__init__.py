"""The policies app's admin, in six modules: agents and workspaces, context configuration,
permissions/tools, policy revisions and changes, and hook bindings. Importing them
registers their model admins."""

from __future__ import annotations

from .agents import AgentAdmin, WorkspaceAdmin
from .context import BusinessRuleInline, InstructionVersionAdmin, LayerConfigInline
from .hooks import HookBindingAdmin
from .permissions import McpServerAdmin, PolicyAdmin, ToolDefinitionAdmin
from .policy_changes import PolicyChangeRequestAdmin
from .policy_revisions import PolicyRevisionAdmin

__all__ = [
    "AgentAdmin",
    "BusinessRuleInline",
    "HookBindingAdmin",
    "InstructionVersionAdmin",
    "LayerConfigInline",
    "McpServerAdmin",
    "PolicyAdmin",
    "PolicyChangeRequestAdmin",
    "PolicyRevisionAdmin",
    "ToolDefinitionAdmin",
    "WorkspaceAdmin",
]
