"""The context builder: gathers each layer's units for an agent and a workspace, then hands
them to the pure assembler (SPEC C1, C3, C5, C9). All I/O of context assembly is here."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from .core.assembler import Assembly, Layer, Rejected, Strategy, Unit, assemble
from .core.instructions import DROP_ORDER, decode_instruction, scope_to_task
from .core.layers import DEFAULTS_BY_NAME, MAX_BUDGET, effective_layers
from .core.retrieval import Conflict, RetrievalPolicy, Segment, retrieved_units
from .core.tokenizer import Tokenizer
from .instruction_cache import instructions_load
from .instruction_files import read_file_within
from .models import Agent, BusinessRule, LayerConfig, Workspace


class ContextError(ValueError):
    """Bad input to the builder (an unknown layer, a bad budget); the message says which."""


@dataclass(frozen=True)
class BuiltContext:
    assembly: Assembly
    conflicts: tuple[Conflict, ...]
    tokenizer: str
    workspace_root: str
    paths: tuple[str, ...] = ()  # what the instruction files were scoped to
    instruction_version: int | None = None  # the console's instructions, when there are


@cache
def _tokenizer(path: str) -> Tokenizer:
    tokenizer = import_string(path)()
    if not isinstance(tokenizer, Tokenizer):
        raise ContextError(f"HARNESS_TOKENIZER {path} lacks count, size or tokens_for_size.")
    return tokenizer


def tokenizer() -> Tokenizer:
    return _tokenizer(settings.HARNESS_TOKENIZER)


def parse_budgets(items: Sequence[str]) -> dict[str, int]:
    """``LAYER=TOKENS`` pairs, as the command line gives them, checked one by one."""
    budgets: dict[str, int] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ContextError(f"Budget {item!r}: write LAYER=TOKENS, like task_state=500.")
        if not raw.strip().isdigit():
            raise ContextError(f"Budget {item!r}: TOKENS must be a whole number ≥ 0.")
        budgets[name.strip()] = int(raw)
    return budgets


def _layer_specs(agent: Agent, budgets: Mapping[str, int]) -> list:
    unknown = sorted(set(budgets) - set(DEFAULTS_BY_NAME))
    if unknown:
        raise ContextError(
            f"Unknown layer {', '.join(unknown)}; layers are {', '.join(DEFAULTS_BY_NAME)}."
        )
    for name, budget in budgets.items():
        if not 0 <= budget <= MAX_BUDGET:
            raise ContextError(f"The budget of {name} must be between 0 and {MAX_BUDGET:,}.")
    overrides: dict[str, tuple[int, Strategy, int]] = {}
    for config in LayerConfig.objects.filter(agent=agent):
        default = DEFAULTS_BY_NAME[config.name]
        overrides[config.name] = (
            config.position if config.position is not None else default.position,
            cast(Strategy, config.strategy) if config.strategy else default.strategy,
            config.budget if config.budget is not None else default.budget,
        )
    specs = effective_layers(overrides)
    return [(spec, budgets.get(spec.name, spec.budget)) for spec in specs]


def _project_context(workspace: Workspace | None, root: str) -> tuple[tuple[Unit, ...], tuple]:
    name = workspace.context_file if workspace else "README.md"
    if not name:
        return (), ()
    full = os.path.join(root, name)
    if not os.path.exists(full):
        return (), (Rejected(f"file:{name}", "the context file does not exist", name),)
    text, problem = decode_instruction(read_file_within(root, full, name))
    if text is None:
        return (), (Rejected(f"file:{name}", problem, name),)
    return (Unit(f"file:{name}", text, title=name, path=name),), ()


def _business_rules(agent: Agent) -> tuple[Unit, ...]:
    rules = BusinessRule.objects.filter(agent=agent, active=True).order_by("created_at", "id")
    return tuple(Unit(f"rule:{rule.pk}", f"- {rule.text.strip()}") for rule in rules)


def context_build(
    *,
    agent: Agent,
    workspace: Workspace | None = None,
    workspace_path: Path | str | None = None,
    task: str = "",
    paths: Sequence[str] | None = (),
    retrieved: Sequence[Segment] = (),
    memory: Sequence[Unit] = (),
    working_state: str = "",
    tool_results: Sequence[Unit] = (),
    output_schema: str = "",
    budgets: Mapping[str, int] | None = None,
    now: datetime | None = None,
) -> BuiltContext:
    """Gather every layer for ``agent`` working in ``workspace`` and assemble the prompt.

    ``paths``: what the task may touch (files, folders or globs relative to the workspace);
    only the instruction files on the way to them are candidates (SPEC C5).
    """
    if isinstance(paths, str) or not all(isinstance(p, str) for p in paths or ()):
        raise ContextError("Give the task's paths as a list of strings, not one string.")
    paths = tuple(dict.fromkeys(p.strip() for p in paths or () if p.strip()))
    if (workspace is None) == (workspace_path is None):
        raise ContextError("Give a workspace or a workspace folder, not both or neither.")
    folder = workspace.root if workspace is not None else workspace_path
    assert folder is not None
    root = str(Path(folder).resolve())
    if not os.path.isdir(root):
        raise ContextError(f"The workspace folder {root} does not exist.")
    loaded = instructions_load(agent=agent, root=root)
    instruction_units, instruction_rejected = scope_to_task(loaded.units, loaded.rejected, paths)
    project_units, project_rejected = _project_context(workspace, root)
    retrieved_u, retrieved_rejected, conflicts = retrieved_units(
        retrieved, now=now or timezone.now(), policy=RetrievalPolicy()
    )

    def units(text: str, source: str) -> tuple[Unit, ...]:
        return (Unit(source, text.strip()),) if text.strip() else ()

    sources: dict[str, tuple[tuple[Unit, ...], tuple[Rejected, ...]]] = {
        "identity": (units(agent.identity, f"agent:{agent.slug}:identity"), ()),
        "instruction_files": (instruction_units, instruction_rejected),
        "project_context": (project_units, project_rejected),
        "business_rules": (_business_rules(agent), ()),
        "task_state": (units(task, "task"), ()),
        "retrieved_context": (retrieved_u, retrieved_rejected),
        "memory": (tuple(memory), ()),
        "working_state": (units(working_state, "working_state"), ()),
        "tool_results": (tuple(tool_results), ()),
        "output_schema": (units(output_schema, "output_schema"), ()),
    }
    drop_order = {"instruction_files": DROP_ORDER}
    layers = [
        Layer(spec.name, spec.strategy, budget, *sources[spec.name], drop_order.get(spec.name, ""))
        for spec, budget in _layer_specs(agent, budgets or {})
    ]
    return BuiltContext(
        assembly=assemble(layers, tokenizer()),
        conflicts=conflicts,
        tokenizer=settings.HARNESS_TOKENIZER,
        workspace_root=root,
        paths=paths,
        instruction_version=loaded.database_version,
    )


def context_report(built: BuiltContext) -> dict[str, Any]:
    """The inspection of SPEC C8 as one JSON-ready object (the command's ``--json``)."""
    assembly = built.assembly
    return {
        "layers": [
            {
                "name": layer.name,
                "position": layer.position,
                "strategy": layer.strategy,
                "budget": layer.budget,
                "tokens": layer.tokens,
                "estimated": layer.estimated,
                "truncated": layer.truncated,
                "text": layer.text,
                "kept": [
                    {"source_id": k.source_id, "tokens": k.tokens, "truncated": k.truncated}
                    for k in layer.kept
                ],
                "dropped": [
                    {"source_id": d.source_id, "tokens": d.tokens, "reason": d.reason}
                    for d in layer.dropped
                ],
            }
            for layer in assembly.layers
        ],
        "prompt": assembly.prompt,
        "tokens": assembly.tokens,
        "estimated": assembly.estimated,
        "tokenizer": built.tokenizer,
        "workspace": built.workspace_root,
        "paths": list(built.paths),
        "conflicts": [
            {"location": c.location, "source_ids": list(c.source_ids)} for c in built.conflicts
        ],
    }
