"""What admins configure: agents and workspaces, context, policies, tools, MCP servers, hooks.

Django finds an app's models here; each lives in the module named after what it holds.
"""

from __future__ import annotations

from .agents import SLUG_VALIDATOR, Agent, Workspace
from .context import BusinessRule, InstructionVersion, LayerConfig
from .eval_traffic import EvalAware, EvalTraffic
from .hooks import HookBinding
from .permissions import Policy, PolicyChange, PolicyRevision, PolicyRule
from .policy_changes import PolicyChangeRequest
from .tools import McpServer, ToolDefinition

__all__ = [
    "SLUG_VALIDATOR",
    "Agent",
    "BusinessRule",
    "EvalAware",
    "EvalTraffic",
    "HookBinding",
    "InstructionVersion",
    "LayerConfig",
    "McpServer",
    "Policy",
    "PolicyChange",
    "PolicyChangeRequest",
    "PolicyRevision",
    "PolicyRule",
    "ToolDefinition",
    "Workspace",
]
