"""What the harness refused a run (issue 19): a call the policy denied, that fell outside
the task's boundaries, or whose input was bad, is recorded as a tool call with the status
``refused`` and its reason. A run that ends "completed" after the harness stopped an
injected publish must not look like a plain success: the list flags it, the run's page
says so at its top, and the operations dashboard lists the latest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.models import EvalTraffic

from .models import Run, ToolCall

REFUSED = "refused"
RECENT = 10


@dataclass(frozen=True)
class Refusal:
    """One refused action, as a person reads it: ``publish — outside the task's boundaries``."""

    tool: str
    reason: str
    denied: bool  # by the policy or the task's boundaries, not for a bad input


def refused_calls(run_ref: Any = None) -> EvalTraffic:
    calls = ToolCall.objects.filter(status=REFUSED)
    return calls if run_ref is None else calls.filter(run=run_ref)


def runs_refused(runs: EvalTraffic) -> EvalTraffic:
    """The runs with at least one refused action (the list's ``refused=1``). An IN over
    the refused calls, read once by ``tool_call_status_idx``: a correlated EXISTS let
    SQLite read every refused call again for each run."""
    return runs.filter(pk__in=refused_calls().filter(run__isnull=False).values("run_id"))


def _reason(call: ToolCall) -> str:
    """The reason without the decision's prefix the model is told (``deny: ...``)."""
    text = (call.reason or call.error or "").strip()
    for prefix in ("deny: ", "ask: ", "ask_strong: "):
        text = text.removeprefix(prefix)
    return text or "refused"


def run_refusals(run: Run) -> list[Refusal]:
    """The run's refused actions, in the order they were asked for."""
    return [
        Refusal(tool=call.tool, reason=_reason(call), denied=call.decision == "deny")
        for call in refused_calls(run).order_by("started_at", "pk")
    ]


def refusals_recent(limit: int = RECENT) -> list[dict[str, Any]]:
    """The latest refused actions outside the eval set, newest first: the operations
    dashboard's "Recent refusals" (read by ``tool_call_status_idx``)."""
    calls = (
        refused_calls()
        .without_evals()
        .filter(run__isnull=False)
        .select_related("run__agent")
        .order_by("-started_at")[:limit]
    )
    return [
        {
            "run_id": call.run_id,
            "agent": call.run.agent.slug,
            "tool": call.tool,
            "reason": _reason(call),
            "run_status": call.run.shown_status,
            "at": call.started_at,
        }
        for call in calls
    ]
