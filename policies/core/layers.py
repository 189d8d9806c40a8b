"""The default layers, in code (SPEC C1; ADR 0006 and the partitions of seed 004).

Admins override order, budget and strategy per agent; a layer not overridden keeps these.
Budgets are in tokens of the configured tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .assembler import Strategy

MAX_BUDGET: Final = 1_000_000  # no model reads more; a larger figure is a typo


@dataclass(frozen=True)
class LayerSpec:
    name: str
    position: int
    strategy: Strategy
    budget: int
    description: str


DEFAULT_LAYERS: Final[tuple[LayerSpec, ...]] = (
    LayerSpec("identity", 1, "keep_or_drop", 2_000, "Who the agent is."),
    # Sized on a real repository (bytedance/deer-flow: 24 AGENTS.md files, 97,000 tokens
    # in all, 60 to 10,200 each): the files on the longest path from its root to a source
    # file come to 19,400 tokens, so 24,000 holds every path there with the database's
    # instructions beside them. Only the files on the task's path are candidates (C5).
    LayerSpec(
        "instruction_files",
        2,
        "drop_whole_units",
        24_000,
        "AGENTS.md files on the task's path, root first, then deeper folders, then the database's.",
    ),
    LayerSpec(
        "project_context",
        3,
        "truncate_tail",
        4_000,
        "The workspace's context file (its README, say).",
    ),
    LayerSpec("business_rules", 4, "drop_whole_units", 2_000, "Rules, oldest first."),
    LayerSpec("task_state", 5, "truncate_tail", 4_000, "The task at hand."),
    LayerSpec(
        "retrieved_context",
        6,
        "drop_whole_units",
        6_000,
        "Retrieved material, least trusted and least relevant first.",
    ),
    LayerSpec("memory", 7, "drop_whole_units", 2_000, "What earlier runs left to remember."),
    LayerSpec("working_state", 8, "truncate_tail", 2_000, "Notes of the current run."),
    LayerSpec("tool_results", 9, "drop_whole_units", 8_000, "Results of tool calls, oldest first."),
    LayerSpec("output_schema", 10, "keep_or_drop", 1_000, "The shape the answer must have."),
)
LAYER_NAMES: Final[tuple[str, ...]] = tuple(spec.name for spec in DEFAULT_LAYERS)
DEFAULTS_BY_NAME: Final = {spec.name: spec for spec in DEFAULT_LAYERS}


def effective_layers(overrides: dict[str, tuple[int, Strategy, int]]) -> list[LayerSpec]:
    """Defaults with an agent's overrides (name → (position, strategy, budget)), in order.

    Ties in position keep the default order, so the result is always deterministic.
    """
    specs = []
    for spec in DEFAULT_LAYERS:
        if spec.name in overrides:
            position, strategy, budget = overrides[spec.name]
            spec = LayerSpec(spec.name, position, strategy, budget, spec.description)
        specs.append(spec)
    order = {name: index for index, name in enumerate(LAYER_NAMES)}
    return sorted(specs, key=lambda spec: (spec.position, order[spec.name]))
