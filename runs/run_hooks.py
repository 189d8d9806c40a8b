"""The admin's hook bindings, wired into a run (SPEC C7): ``session_start`` and
``session_end`` around the run, ``pre_tool_use`` and ``post_tool_use`` around each tool call
(after the permission check has allowed it, before and after it runs).

Every handler that halts, fails or replaces something leaves an event on the run, so the
run page shows which handler did what and why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from policies.core.hook_runner import Binding
from policies.core.tool_specs import BUILTIN_TOOLS
from policies.hooks import HooksHalted, HooksOutcome, hook_bindings_for, hooks_run
from policies.models import ToolDefinition

from .events import run_event_append
from .models import Run

logger = logging.getLogger(__name__)


def _event(run: Run, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": str(run.pk),
        "agent": run.agent.slug,
        "workspace": run.workspace.slug,
        "now": timezone.now(),
        **extra,
    }


def _run(
    run: Run, phase: str, event: dict[str, Any], bound: list[Binding] | None = None
) -> HooksOutcome | None:
    """``bound``: the bindings the caller holds (a driver keeps them for its claim)."""
    every = bound if bound is not None else hook_bindings_for(run.agent)
    bindings = [b for b in every if b.phase == phase]
    if not bindings:
        return None
    outcome = hooks_run(bindings, phase, event)  # type: ignore[arg-type]
    noteworthy = [r for r in outcome.reports if r.verdict != "went_on" or r.skipped]
    if noteworthy or isinstance(outcome, HooksHalted):
        run_event_append(
            run_id=run.pk,
            type="hook.halted" if isinstance(outcome, HooksHalted) else "hook.ran",
            payload={
                "phase": phase,
                "tool": event.get("tool", ""),
                "handler": getattr(outcome, "handler", ""),
                "reason": getattr(outcome, "reason", ""),
                "reports": [
                    {
                        "handler": r.handler,
                        "verdict": r.verdict,
                        "reason": r.reason,
                        "skipped": r.skipped,
                    }
                    for r in outcome.reports
                ],
            },
        )
    return outcome


def _side_effect(tool: str) -> str:
    spec = BUILTIN_TOOLS.get(tool)
    if spec is not None:
        return spec.side_effect

    definition = ToolDefinition.objects.filter(name=tool).first()
    return definition.side_effect if definition else "external_api"


def session_start(run: Run, bound: list[Binding] | None = None) -> HooksHalted | None:
    """A halting session_start handler stops the run before the model is asked anything."""
    outcome = _run(run, "session_start", _event(run, request=run.request[:2000]), bound)
    return outcome if isinstance(outcome, HooksHalted) else None


def session_end(run: Run, *, outcome: str, reason: str, bound: list[Binding] | None = None) -> None:
    """The run has ended whatever a handler says; halts and failures are only recorded."""
    try:
        event = _event(run, outcome=outcome, status=outcome, reason=reason[:2000])
        _run(run, "session_end", event, bound)
    except Exception:
        logger.exception("session_end hooks of run %s failed", run.pk)


def pre_tool_use(
    run: Run, tool: str, arguments: Any, bound: list[Binding] | None = None
) -> HooksHalted | None:
    every = bound if bound is not None else hook_bindings_for(run.agent)
    if not any(b.phase == "pre_tool_use" for b in every):
        return None  # no event to build (its side effect may need a query)
    outcome = _run(
        run,
        "pre_tool_use",
        _event(run, tool=tool, arguments=arguments, side_effect=_side_effect(tool)),
        every,
    )
    return outcome if isinstance(outcome, HooksHalted) else None


def post_tool_use_transform(
    run: Run, tool: str, bound: list[Binding] | None = None
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The post_tool_use chain as a transform of the tool's output, applied before the
    output is stored, truncated or shown. A halting chain withholds the output (fail
    closed: a redaction handler that crashed must not let a secret through)."""

    def transform(output: dict[str, Any]) -> dict[str, Any]:
        outcome = _run(
            run,
            "post_tool_use",
            _event(
                run,
                tool=tool,
                output=output,
                status="ok" if output.get("ok") else "error",
                decision="allow",
            ),
            bound,
        )
        if outcome is None:
            return output
        if isinstance(outcome, HooksHalted):
            return {
                "ok": False,
                "error": f"The output was withheld by the {outcome.handler} hook: {outcome.reason}",
                "withheld": True,
            }
        changed = outcome.event.get("output", output)
        return dict(changed) if isinstance(changed, dict) else output

    return transform
