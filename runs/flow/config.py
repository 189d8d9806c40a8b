"""What a run's tool calls are decided by, read once per claim and kept fresh (SPEC P3–P7).

Before, every tool call read the agent's policy and rules, the tool's definition, the hook
bindings and the run's grants again: five queries of rows that almost never change. Here
the driver keeps them for the claim and reads one stamp before each call
(``policies.config_stamp``): when an admin saved any of them, or a person granted or
revoked something, the stamp moved and the rows are read again, so an edit still applies
to the very next call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from policies.config_stamp import MAX_AGE_SECONDS, config_stamp
from policies.core.hook_runner import Binding
from policies.core.permissions import Grant, Policy
from policies.hooks import hook_bindings_for
from policies.models import Agent, ToolDefinition
from policies.permissions import policy_for_agent

from ..grants import grants_for_run
from ..models import Run
from ..tools.decide import tool_definition
from .driver_state import Driver


@dataclass
class RunConfig:
    stamp: str
    read_at: float
    agent: Agent
    policy: Policy
    grants: list[Grant]
    hooks: list[Binding]
    definitions: dict[str, ToolDefinition | None] = field(default_factory=dict)

    def definition(self, tool: str) -> ToolDefinition | None:
        """The enabled tool of that name (an eval tool only for an eval agent's runs)."""
        if tool not in self.definitions:
            self.definitions[tool] = tool_definition(tool, for_evals=self.agent.for_evals)
        return self.definitions[tool]


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
            policy=policy_for_agent(agent),
            grants=grants_for_run(run),
            hooks=hook_bindings_for(agent),
        )
        driver.config = config
    return config
