"""What a run used, recorded when it starts (SPEC C8; issue 20): the agent, the instruction
sources the prompt was built from (the sha256 of each file's text as the model was sent it,
under its header; the console instructions' version), the policy's
version and the hook bindings. Stored with the run, so a later edit of any of them never
changes what a past run says it used. Hook settings are left out: they may hold secrets."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db.models import Q

from .context import BuiltContext
from .core.instructions import DATABASE_SOURCE
from .core.permissions import Policy
from .models import Agent, HookBinding


def effective_config(*, agent: Agent, built: BuiltContext, policy: Policy) -> dict[str, Any]:
    layer = built.assembly.layer("instruction_files")
    units = {u.source_id: u for u in layer._units}
    sources: list[dict[str, Any]] = []
    for kept in layer.kept:
        if kept.source_id == DATABASE_SOURCE:
            sources.append({"source": kept.source_id, "version": built.instruction_version})
            continue
        unit = units[kept.source_id]
        digest = hashlib.sha256(unit.text.encode("utf-8", "surrogatepass")).hexdigest()
        sources.append({"source": kept.source_id, "path": unit.path, "sha256": digest})
    hooks = HookBinding.objects.filter(Q(agent__isnull=True) | Q(agent=agent), enabled=True)
    return {
        "agent": {"slug": agent.slug, "model": agent.model, "max_turns": agent.max_turns},
        "instructions": sources,
        "instructions_scoped_to": list(built.paths),
        "instructions_left_out": len(layer.dropped),
        "policy": {"name": policy.name, "version": policy.version},
        "hooks": [
            {"phase": h.phase, "handler": h.handler, "order": h.order, "fail_open": h.fail_open}
            for h in hooks.order_by("phase", "order", "id")
        ],
        "tokenizer": built.tokenizer,
    }
