"""The tool calls the flow makes itself (verify's runValidation, commit's commitDraft),
through the same door as the model's and, like them, at most once: a resumed worker
reconciles a call it finds running instead of repeating it."""

from __future__ import annotations

import hashlib
from typing import Any

from policies.permissions import policy_for_agent

from ..events import run_event_append
from ..leases import LeaseLost, fenced
from ..models import Run, RunEvent, ToolCall
from ..tools.call import tool_call_run
from ..tools.journal import ToolCallStarted
from ..tools.recover import tool_call_recover
from .checkpoints import tool_event
from .driver_state import Driver


def harness_call(
    driver: Driver, run: Run, tool: str, arguments: dict[str, Any], tool_use_id: str, **extra: Any
) -> ToolCall:
    record = ToolCall.objects.filter(run=run, tool_use_id=tool_use_id).first()
    if record is not None and record.status == "running":
        if tool_call_recover(record=record) == "rerun":
            record = None
        else:
            record = ToolCall.objects.get(pk=record.pk)
    if record is None:
        try:
            record = tool_call_run(
                workspace=run.workspace,
                tool=tool,
                arguments=arguments,
                policy=policy_for_agent(run.agent),
                run=run,
                tool_use_id=tool_use_id,
                **extra,
            )
        except ToolCallStarted:
            raise LeaseLost(f"Another worker runs {tool_use_id} of run {run.pk}.") from None
    # Its event: once, even when the worker died between recording the call and the event.
    told = RunEvent.objects.filter(run=run, type="tool.call", payload__tool_call=str(record.pk))
    if not told.exists():
        with fenced(driver.lease):
            run_event_append(run_id=run.pk, type="tool.call", payload=tool_event(record))
    return record


def path_id(path: str) -> str:
    """A harness call's id part for a path: readable, and unique however long the path."""
    return f"{hashlib.sha256(path.encode()).hexdigest()[:16]}:{path[:120]}"
