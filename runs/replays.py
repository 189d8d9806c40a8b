"""Offline replay scripts (SPEC R11): recorded model turns for one request.

A script is a JSON file in one of ``settings.HARNESS_REPLAY_DIRS``::

    {"title": "...", "request": "...", "agent": "<slug>", "workspace": "<slug>",
     "model": "claude-...", "turns": [{"stop_reason": ..., "content": [...], "usage": {...}}]}

A run whose agent and workspace are the script's, and whose request is the script's in
any case and spacing (:func:`request_key`), is answered by it and labelled "offline
replay"; the task form offers the scripts as examples, so the demo works without a network
or a key, and a request no script answers is refused, without a key, with one sentence
saying what does run (:func:`offline_refusal`). A script recorded after the intake's
questions keeps their answers in ``"answers"`` (name → text), for its tests and eval case.
"""

from __future__ import annotations

import json
import logging
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


def request_key(request: str) -> str:
    """What a request is matched against the recordings by: case folded, every run of
    whitespace (line breaks, tabs, no-break spaces) one space, none at either end. So
    "  which PORT does…" plays the recording of "Which port does…"."""
    return " ".join((request or "").split()).casefold()


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
        request=fields["request"].strip(),
        agent=fields["agent"],
        workspace=fields["workspace"],
        turns=len(turns),
    )


# Each script as last read, by path, with the size and time of change it was read at: every
# submitted run looks its request up here, and reading every script again each time cost
# more than the rest of the submission.
_read: dict[Path, tuple[tuple[int, int], ReplayScript | None]] = {}


def replay_scripts() -> list[ReplayScript]:
    """Every valid script, in folder then file name order (a broken one is logged, skipped);
    a file is read again only when its size or time of change moved."""
    scripts = []
    for folder in settings.HARNESS_REPLAY_DIRS:
        if Path(folder).is_dir():
            for path in sorted(Path(folder).glob("*.json")):
                if (script := _script(path)) is not None:
                    scripts.append(script)
    return scripts


def _script(path: Path) -> ReplayScript | None:
    try:
        found = path.stat()
    except OSError:
        return None
    seen = (found.st_size, found.st_mtime_ns)
    kept = _read.get(path)
    if kept is not None and kept[0] == seen:
        return kept[1]
    script = _load(path)
    _read[path] = (seen, script)
    return script


def replay_for(*, agent: str, workspace: str, request: str) -> ReplayScript | None:
    """The script recorded for this request (in any case and spacing), agent and workspace:
    the one place recordings are looked up."""
    wanted = request_key(request)
    return next(
        (
            s
            for s in replay_scripts()
            if s.agent == agent and s.workspace == workspace and request_key(s.request) == wanted
        ),
        None,
    )


KEY_HOWTO = (
    "set ANTHROPIC_API_KEY in the environment of the console and its workers "
    "(for the demo: ANTHROPIC_API_KEY=sk-ant-… make run) to send {what} to the Anthropic API"
)


def offline_refusal(*, agent: str, workspace: str) -> str:
    """The one sentence a request no script answers gets when no key is set: what runs
    offline (this agent and workspace's recorded examples, by title) and how to set a key."""
    scripts = replay_scripts()
    here = [s.title for s in scripts if s.agent == agent and s.workspace == workspace]
    if here:
        offline = "offline only the recorded examples run ({})".format(
            ", ".join(f"“{title}”" for title in here)
        )
        how = KEY_HOWTO.format(what="any other request")
    elif scripts:
        pairs = sorted({f"{s.agent} in {s.workspace}" for s in scripts})
        offline = (
            "no recorded example runs offline with this agent and workspace "
            f"(the examples are for {', '.join(pairs)})"
        )
        how = KEY_HOWTO.format(what="this request")
    else:
        offline = "no offline example is recorded (HARNESS_REPLAY_DIRS)"
        how = KEY_HOWTO.format(what="this request")
    return f"No model can answer this request: ANTHROPIC_API_KEY is not set, and {offline}; {how}."
