"""The runs list's cells that are more than a field: how long a run took, its tokens, the
label of its failure's kind."""

from __future__ import annotations

from typing import Any

from django import template

from runs.core.failures import LABELS, OTHER
from runs.observability.dashboards.plot import human_ms

register = template.Library()


@register.filter
def run_duration(run: Any) -> str:
    """Created to finished, as the retrospective's durations are; "—" while it runs."""
    if run.finished_at is None:
        return "—"
    return human_ms((run.finished_at - run.created_at).total_seconds() * 1000)


@register.filter
def run_tokens(run: Any) -> str:
    total = (
        run.input_tokens
        + run.output_tokens
        + run.cache_creation_input_tokens
        + run.cache_read_input_tokens
    )
    return f"{total:,}"


@register.filter
def failure_label(run: Any) -> str:
    """A failure of no recorded kind is "Other", as the rollups count it."""
    return LABELS.get(run.failure_kind or OTHER, run.failure_kind)
