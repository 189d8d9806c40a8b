"""What the harness refused a run (issue 19): a call the policy denied, that fell outside
the task's boundaries, or whose input was bad, is recorded as a tool call with the status
``refused`` and its reason. A run that ends "completed" after the harness stopped an
injected publish must not look like a plain success: the runs list flags it.
"""

from __future__ import annotations

from typing import Any

from policies.models import EvalTraffic

from .models import ToolCall

REFUSED = "refused"


def refused_calls(run_ref: Any = None) -> EvalTraffic:
    """The refused calls, of one run when ``run_ref`` names it (a run or an OuterRef)."""
    calls = ToolCall.objects.filter(status=REFUSED)
    return calls if run_ref is None else calls.filter(run=run_ref)
