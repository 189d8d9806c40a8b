"""Hook bindings as the agent loop uses them (SPEC C7): load an agent's bindings once per run,
then run a phase's with the event of the moment.

    bindings = hook_bindings_for(agent)
    outcome = hooks_run(bindings, "pre_tool_use", {"run_id": ..., "tool": ..., "now": ...})
    if isinstance(outcome, HooksHalted): ...  # outcome.handler, outcome.reason

Event keys the shipped handlers read: ``now`` (aware datetime), ``tool``, ``side_effect``
(change-freeze); ``output`` (secret-redaction, which returns it redacted in
``outcome.event["output"]``); ``run_id``, ``agent``, ``tool``, ``decision``, ``status``,
``now`` (webhook-notifier). ``phase`` is set by the runner.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import Q

from .core.hook_runner import (
    Binding,
    HandlerReport,
    HookHandler,
    HooksCompleted,
    HooksHalted,
    HooksOutcome,
    hooks_run_chain,
)
from .core.hooks import HookSettingsError, Phase
from .hook_handlers import handler_build
from .hook_threads import call_in_thread
from .models import Agent, HookBinding

__all__ = [
    "Binding",
    "HandlerReport",
    "HooksCompleted",
    "HooksHalted",
    "HooksOutcome",
    "hook_bindings_for",
    "hooks_run",
]


def hook_bindings_for(agent: Agent | None) -> list[Binding]:
    """The enabled bindings for ``agent`` (its own and those for every agent; ``None``: only
    those for every agent), by phase then order. A row whose settings no longer build its
    handler (edited outside the admin, or a handler since removed) becomes a handler that
    fails, so the chain halts on it unless the row says fail-open: never silently dropped."""
    scope = Q(agent__isnull=True)
    if agent is not None:
        scope |= Q(agent=agent)
    rows = HookBinding.objects.filter(scope, enabled=True).order_by("phase", "order", "id")
    # Built handlers are kept per process, keyed by which rows exist and when each was
    # last saved: an edit applies to the very next call, without rebuilding every time.
    fields = ("pk", "updated_at", "phase", "handler", "settings", "time_limit_seconds", "fail_open")
    key = (
        getattr(agent, "pk", None),
        json.dumps(list(rows.values_list(*fields)), sort_keys=True, default=str),
    )
    cached = _BUILT.get(key)
    if cached is None:
        cached = [_binding(row) for row in rows]
        if len(_BUILT) > 256:
            _BUILT.clear()
        _BUILT[key] = cached
    return list(cached)


_BUILT: dict[Any, list[Binding]] = {}


def _binding(row: HookBinding) -> Binding:
    try:
        handler = handler_build(row.handler, row.settings)
    except HookSettingsError as error:
        handler = _broken(f"binding #{row.pk} has bad settings: {error}")
    return Binding(
        name=row.handler,
        phase=row.phase,  # type: ignore[arg-type]  # a choice of PHASES
        handler=handler,
        time_limit=row.time_limit_seconds,
        fail_open=row.fail_open,
        binding_id=row.pk,
    )


def _broken(message: str) -> HookHandler:
    def handler(event: Mapping[str, Any]) -> None:
        raise HookSettingsError(message)

    return handler


def hooks_run(bindings: Sequence[Binding], phase: Phase, event: Mapping[str, Any]) -> HooksOutcome:
    """Run the bindings of ``phase`` in order (others are left out) on ``event``, each in a
    worker thread under its time limit. Reads no rows, so it is safe in any thread."""
    return hooks_run_chain(bindings, phase=phase, event=event, call=call_in_thread)
