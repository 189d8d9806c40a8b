"""A timeline value as a person reads it (issue 19): a list as its items joined, a mapping
as ``key: value`` pairs, a truth value as yes or no, nothing as a dash — never a Python
repr such as ``['docs/guide.md changed since the request']``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template

register = template.Library()

MAX_CHARS = 300


def _text(value: Any, depth: int = 0) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        if depth > 1:
            return "…"
        return ", ".join(f"{k}: {_text(v, depth + 1)}" for k, v in value.items()) or "—"
    if isinstance(value, list | tuple):
        if depth > 1:
            return "…"
        return "; ".join(_text(v, depth + 1) for v in value) or "—"
    return str(value)


@register.filter
def event_value(value: Any) -> str:
    """One payload value as text, at most MAX_CHARS characters."""
    text = " ".join(_text(value).split())  # one line: no unindented wraps
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"
