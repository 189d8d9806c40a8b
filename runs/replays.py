"""Offline replay scripts (SPEC R11): recorded model turns for one exact request.

A script is a JSON file in one of ``settings.HARNESS_REPLAY_DIRS``::

    {"title": "...", "request": "...", "agent": "<slug>", "workspace": "<slug>",
     "model": "claude-...", "turns": [{"stop_reason": ..., "content": [...], "usage": {...}}]}

A run whose request (whitespace-normalised), agent and workspace match a script is
answered by it and labelled "offline replay"; the task form offers the scripts as
examples, so the demo works without a network or a key.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

MAX_SCRIPT_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class ReplayScript:
    path: Path
    title: str
    request: str
    agent: str
    workspace: str
    turns: int


def normalise(request: str) -> str:
    return re.sub(r"\s+", " ", request or "").strip()


def _load(path: Path) -> ReplayScript | None:
    try:
        if path.stat().st_size > MAX_SCRIPT_BYTES:
            raise ValueError(f"larger than {MAX_SCRIPT_BYTES} bytes")
        data: Any = json.loads(path.read_text("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        turns = data.get("turns")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, dict) for t in turns):
            raise ValueError("needs a non-empty list of turns")
        given = {k: data.get(k) for k in ("request", "agent", "workspace")}
        missing = [k for k, v in given.items() if not isinstance(v, str) or not v.strip()]
        if missing:
            raise ValueError(f"needs {', '.join(missing)}")
        fields = {k: str(v) for k, v in given.items()}
    except (OSError, ValueError) as error:
        logger.warning("Ignoring the replay script %s: %s", path, error)
        return None
    return ReplayScript(
        path=path,
        title=str(data.get("title") or fields["request"])[:200],
        request=normalise(fields["request"]),
        agent=fields["agent"],
        workspace=fields["workspace"],
        turns=len(turns),
    )


def replay_scripts() -> list[ReplayScript]:
    """Every valid script, in folder then file name order (a broken one is logged, skipped)."""
    scripts = []
    for folder in settings.HARNESS_REPLAY_DIRS:
        if Path(folder).is_dir():
            for path in sorted(Path(folder).glob("*.json")):
                if (script := _load(path)) is not None:
                    scripts.append(script)
    return scripts


def replay_for(*, agent: str, workspace: str, request: str) -> ReplayScript | None:
    wanted = normalise(request)
    return next(
        (
            s
            for s in replay_scripts()
            if s.agent == agent and s.workspace == workspace and s.request == wanted
        ),
        None,
    )
