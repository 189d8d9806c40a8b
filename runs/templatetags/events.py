"""A timeline value as a person reads it (issue 19): a list as its items joined, a mapping
as ``key: value`` pairs, a truth value as yes or no, nothing as a dash — never a Python
repr such as ``['docs/guide.md changed since the request']``. Every value is one line: a
long one is cut in the line, its whole text in the title, and shown in the line when the
cut is clicked (run_live.js): the event stays one line, whose wrap the page's CSS hangs
under the values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

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
        return ", ".join(f"{k}: {_text(v, depth + 1)}" for k, v in event_items(value)) or "—"
    if isinstance(value, list | tuple):
        if depth > 1:
            return "…"
        return "; ".join(_text(v, depth + 1) for v in value) or "—"
    return str(value)


@register.filter
def event_items(value: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A mapping's pairs by key: PostgreSQL's jsonb keeps no key order, so the page (read
    back) and the live feed (as written) would otherwise list them differently."""
    return sorted(value.items(), key=lambda pair: str(pair[0]))


def event_line(value: Any) -> str:
    """One payload value as text on one line: no unindented wraps, no reprs."""
    return " ".join(_text(value).split())


@register.filter
def event_value(value: Any, limit: int = MAX_CHARS) -> SafeString:
    """One payload value as one line of at most ``limit`` characters; a longer one is cut
    with an ellipsis and keeps its whole text in the title (a text's own lines kept)."""
    line = event_line(value)
    if len(line) <= limit:
        return format_html("{}", line)
    whole = value.strip() if isinstance(value, str) else line
    return format_html(
        '<span class="cut" title="{}" tabindex="0" role="button" aria-expanded="false">{}…</span>',
        whole,
        line[: limit - 1],
    )
