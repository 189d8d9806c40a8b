"""The paths a task text names, read as intake reads them (SPEC C5).

A run's instruction files are scoped to the paths of its structured task. The prompt preview
and ``assemble_prompt`` are given a task's text instead, and show the selection a run of that
text would get only if they read it the same way: so they ask intake, the one reader of
requests, rather than guess at paths themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

from runs.core.intake.boundaries import task_paths
from runs.core.intake.pipeline import intake


def paths_of_request(text: str) -> tuple[str, ...]:
    """The files, folders and globs ``text`` names; none for a text intake refuses."""
    if not text.strip():
        return ()
    try:
        task = intake(text)
    except ValueError:  # not a request at all (too long, control characters): no paths
        return ()
    return task_paths(task.to_json())


def scope_paths(text: str, given: Sequence[str]) -> tuple[str, ...]:
    """Paths given explicitly win; otherwise those the task text names."""
    named = tuple(dict.fromkeys(p.strip() for p in given if p.strip()))
    return named or paths_of_request(text)
