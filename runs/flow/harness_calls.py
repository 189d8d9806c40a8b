"""The tool calls the flow makes itself (verify's runValidation, commit's commitDraft),
through the same door as the model's and, like them, at most once: a resumed worker
reconciles a call it finds running instead of repeating it."""

from __future__ import annotations

import hashlib
from functools import partial
from typing import Any

from ..events import run_event_append
from ..leases import LeaseLost
from ..models import Run, RunEvent, ToolCall
from ..tools.call import tool_call_run
from ..tools.journal import ToolCallStarted
from ..tools.recover import tool_call_recover
from .checkpoints import checkpoint, tool_event
from .config import run_config
from .driver_state import Driver


def harness_call(
    driver: Driver, run: Run, tool: str, arguments: dict[str, Any], tool_use_id: str, **extra: Any
) -> ToolCall:
    record = running_call_recover(
        driver, run, ToolCall.objects.filter(run=run, tool_use_id=tool_use_id).first()
    )
    if record is None:
        config = run_config(driver, run)
        try:
            record = tool_call_run(
                workspace=run.workspace,
                tool=tool,
                arguments=arguments,
                policy=config.policy,
                run=run,
                grants=config.grants,
                definition_of=config.definition,
                tool_use_id=tool_use_id,
                fence=partial(checkpoint, driver),
                **extra,
            )
        except ToolCallStarted:
            raise LeaseLost(f"Another worker runs {tool_use_id} of run {run.pk}.") from None
    # Its event: once, even when the worker died between recording the call and the event.
    told = RunEvent.objects.filter(run=run, type="tool.call", payload__tool_call=str(record.pk))
    if not told.exists():
        with checkpoint(driver):
            run_event_append(run_id=run.pk, type="tool.call", payload=tool_event(record))
    return record


def running_call_recover(driver: Driver, run: Run, record: ToolCall | None) -> ToolCall | None:
    """A call found running when this worker took the run over: reconciled from its journal
    (``runs.tools.recover``) under the fence, and said on the timeline; None when it is to
    run (again). The fence comes first: a worker that lost the run meanwhile touches
    nothing, and the one that holds it knows the previous holder can no longer write."""
    if record is None or record.status != "running":
        return record
    with checkpoint(driver):
        outcome = tool_call_recover(record=record)
        run_event_append(
            run_id=run.pk,
            type="tool.recovered",
            payload={"tool_use_id": record.tool_use_id, "tool": record.tool, "outcome": outcome},
        )
    return None if outcome == "rerun" else ToolCall.objects.get(pk=record.pk)


def path_id(path: str) -> str:
    """A harness call's id part for a path: readable, and unique however long the path."""
    return f"{hashlib.sha256(path.encode()).hexdigest()[:16]}:{path[:120]}"
