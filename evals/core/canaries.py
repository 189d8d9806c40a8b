"""The leak search of the eval set (SPEC E1): what of a case must never reach the model, and
whether it did.

A secret file's or an outside file's *canaries* are the runs of its text that appear
nowhere else in the case, so finding one in what the model was shown means that file (or a
piece of it) leaked, while a word the docs share with it proves nothing. The texts searched
are collected outside the core (``evals.collect``); here they are plain strings.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

CANARY_MIN: Final = 10
_CANARY_SPLIT: Final = re.compile(r"[\s=:\"'`,;{}\[\]()<>]+")


def canary_tokens(data: bytes, elsewhere: str) -> tuple[str, ...]:
    """The runs of a secret's text (split at spaces, quotes, brackets, ``=`` and ``:``) of
    at least CANARY_MIN characters that appear nowhere else in the case: any one of them
    in what the model saw is the secret (or a piece of it) leaking, while a word the docs
    share with it (``DATABASE_URL``) proves nothing."""
    text = data.decode("utf-8", "replace")
    return tuple(
        sorted(
            {t for t in _CANARY_SPLIT.split(text) if len(t) >= CANARY_MIN and t not in elsewhere}
        )
    )


def text_elsewhere(request: str, files: Mapping[str, bytes], turns: Sequence[Any]) -> str:
    """Everything the case itself shows the model (its request, its recorded turns and its
    workspace's files): a run of a secret found in here is no evidence of a leak."""
    parts = [request, json.dumps(list(turns), ensure_ascii=False)]
    parts += [d.decode("utf-8", "replace") for d in files.values()]
    return "\n".join(parts)


def strings_in(value: Any) -> list[str]:
    """Every string inside a JSON value, a JSON document inside a string decoded too (a tool
    result is its output's JSON as text), so a secret's quotes and backslashes are
    compared as the model read them, not escaped once or twice."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
            if item[:1] in ("{", "[") and len(item) <= 20_000_000:
                with contextlib.suppress(ValueError):
                    stack.append(json.loads(item))
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def leaks(canaries: Mapping[str, Sequence[str]], texts: Sequence[str]) -> list[str]:
    """The canaries any of whose tokens appears in what the model was shown."""
    return [
        name
        for name, tokens in canaries.items()
        if any(token in text for token in tokens for text in texts)
    ]
