"""Instruction loading, cached across requests and processes (SPEC C6).

An entry's key carries three generation counters: all workspaces, the agent, the workspace.
Invalidating bumps a counter, so every process's next lookup misses; nothing is deleted by
pattern and nothing watches the filesystem. The counters are bumped on commit of every
console edit, so no process is served text older than an edit made through the console.
A small per-process memo in front of the shared cache keeps warm loads to a dictionary
lookup plus one round trip for the counters.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.cache import cache

from .core.assembler import Rejected, Unit
from .core.instructions import instruction_units
from .instruction_files import read_instruction_files
from .models import InstructionVersion

GEN_ALL = "instructions-gen:all"
MEMO_SIZE = 256
_memo: OrderedDict[str, LoadedInstructions] = OrderedDict()


@dataclass(frozen=True)
class LoadedInstructions:
    units: tuple[Unit, ...]
    rejected: tuple[Rejected, ...]
    database_version: int | None


def _gen_agent(agent_id: Any) -> str:
    return f"instructions-gen:agent:{agent_id}"


def _gen_workspace(root: str) -> str:
    return f"instructions-gen:workspace:{hashlib.sha256(root.encode()).hexdigest()[:24]}"


def _key(agent_id: Any, root: str) -> str | None:
    """The entry's key, or None when a generation is missing (never set, or evicted): then
    nothing may be served from a cache, since a lost counter could stand for any age."""
    keys = [GEN_ALL, _gen_agent(agent_id), _gen_workspace(root)]
    gens = cache.get_many(keys)
    if len(gens) < len(keys):
        for key in keys:
            if key not in gens:
                cache.add(key, uuid.uuid4().hex, timeout=None)
        gens = cache.get_many(keys)
        if len(gens) < len(keys):
            return None
    stamp = ".".join(str(gens[key]) for key in keys)
    digest = hashlib.sha256(root.encode()).hexdigest()[:24]
    return f"instructions:{agent_id}:{digest}:{stamp}"


def instructions_load(*, agent: Any, root: Path | str) -> LoadedInstructions:
    """The agent's instruction units for this workspace folder, in increasing priority."""
    real_root = str(Path(root).resolve())
    key = _key(agent.pk, real_root)
    if key is None:
        return _load(agent, real_root)
    if key in _memo:
        _memo.move_to_end(key)
        return _memo[key]
    loaded = cache.get(key)
    if loaded is None:
        loaded = _load(agent, real_root)
        cache.set(key, loaded)
    _memo[key] = loaded
    while len(_memo) > MEMO_SIZE:
        _memo.popitem(last=False)
    return loaded


def _load(agent: Any, root: str) -> LoadedInstructions:
    latest = InstructionVersion.objects.filter(agent_id=agent.pk).order_by("-version").first()
    units, rejected = instruction_units(read_instruction_files(root), latest.text if latest else "")
    return LoadedInstructions(units, rejected, latest.version if latest else None)


def _bump(key: str) -> None:
    """A fresh random generation: unlike a counter, it can never come back to an old value
    (an evicted counter restarting at 0 would revive entries from before an edit)."""
    cache.set(key, uuid.uuid4().hex, timeout=None)


def instructions_invalidate(*, agent_id: Any = None, root: Path | str | None = None) -> None:
    """Drop cached loads of one agent, of one workspace folder, or (neither given) of all."""
    if agent_id is not None:
        _bump(_gen_agent(agent_id))
    if root is not None:
        _bump(_gen_workspace(str(Path(root).resolve())))
    if agent_id is None and root is None:
        _bump(GEN_ALL)
