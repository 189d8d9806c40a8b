"""The policies app's admin, in three modules: context configuration, permissions/tools and
hook bindings. Importing them registers their model admins."""

from __future__ import annotations

from .context import BusinessRuleInline, InstructionVersionAdmin, LayerConfigInline
from .hooks import HookBindingAdmin
from .permissions import McpServerAdmin, PolicyAdmin, ToolDefinitionAdmin

__all__ = [
    "BusinessRuleInline",
    "HookBindingAdmin",
    "InstructionVersionAdmin",
    "LayerConfigInline",
    "McpServerAdmin",
    "PolicyAdmin",
    "ToolDefinitionAdmin",
]
