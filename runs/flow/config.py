"""What a run's tool calls are decided by, read once per claim and kept fresh (SPEC P3–P7).

Every stage that decides something asks :func:`run_config`: the agent's policy and rules,
the tool definitions and MCP allow lists, the hook bindings (kept per process by
``policies.decision_inputs``) and the run's grants (per claim). Before each use it reads
one stamp (``policies.config_stamp``): when an admin saved any of them, or a person granted
or revoked something, the stamp moved and they are read again, so an edit still applies to
the very next call.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.config_stamp import MAX_AGE_SECONDS, config_stamp
from policies.core.hook_runner import Binding
from policies.core.permissions import Grant, Policy
from policies.decision_inputs import ToolRows, decision_hooks, decision_policy, decision_tools
from policies.models import Agent, ToolDefinition

from ..grants import grants_for_run
from ..models import Run
from ..tools.registry import tool_definitions_for
from .driver_state import Driver


@dataclass
class RunConfig:
    stamp: str
    read_at: float
    agent: Agent
    policy: Policy
    grants: list[Grant]
    hooks: list[Binding]
    tools: ToolRows

    def definition(self, tool: str) -> ToolDefinition | None:
        """The enabled tool of that name (an eval tool only for an eval agent's runs)."""
        return self.tools.definitions.get(tool)

    def offered(self, task: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The tools the model is told about (``tool_definitions_for``)."""
        return tool_definitions_for(
            self.policy, for_evals=self.agent.for_evals, task=task, rows=self.tools
        )


def run_config(driver: Driver, run: Run) -> RunConfig:
    """The run's decision inputs, read again only when the stamp moved."""
    stamp = config_stamp()
    config: RunConfig | None = driver.config
    now = time.monotonic()
    if config is None or config.stamp != stamp or now > config.read_at + MAX_AGE_SECONDS:
        agent = Agent.objects.get(pk=run.agent_id) if config is not None else run.agent
        run.agent = agent
        config = RunConfig(
            stamp=stamp,
            read_at=now,
            agent=agent,
            policy=decision_policy(agent, stamp),
            grants=grants_for_run(run),
            hooks=decision_hooks(agent, stamp),
            tools=decision_tools(for_evals=agent.for_evals, stamp=stamp),
        )
        driver.config = config
    return config
