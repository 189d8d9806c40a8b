"""The policies app's admin, in two modules: context configuration and permissions/tools.
Importing them registers their model admins."""

from __future__ import annotations

from .context import BusinessRuleInline, InstructionVersionAdmin, LayerConfigInline
from .permissions import McpServerAdmin, PolicyAdmin, ToolDefinitionAdmin

__all__ = [
    "BusinessRuleInline",
    "InstructionVersionAdmin",
    "LayerConfigInline",
    "McpServerAdmin",
    "PolicyAdmin",
    "ToolDefinitionAdmin",
]
