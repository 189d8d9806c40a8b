"""A tool step of the loop (SPEC T3–T8, P3–P6): the model's next tool_use goes through the
one door of ``runs.tools.call`` under the task's boundaries, the policy and the hooks. A
call the policy asks about waits for a person; the decision comes back here
(``tool_decided``), and the call then runs under that approval, if it still holds."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.conf import settings
from django.utils import timezone

from approvals.asking import MAX_CONFIRM_CHARS
from approvals.fingerprint import fingerprint_now
from approvals.models import ApprovalRequest
from approvals.selectors import approval_in_force
from policies.core.tool_specs import SHELL_TOOL

from .. import run_hooks
from ..approval_outcomes import approval_ask
from ..conversation import (
    last_tool_use,
    message_append,
    message_new,
    tool_result_block,
    tool_use_position,
)
from ..core import loop
from ..core import status as run_status
from ..events import run_event_append
from ..leases import LeaseLost
from ..lifecycle import run_transition
from ..models import Run, ToolCall
from ..tools.call import tool_call_run
from ..tools.decide import builtin_of, tool_definition
from ..tools.journal import ToolCallStarted
from ..tools.record import tool_output
from .approval import approval_holds, edited_note
from .checkpoints import (
    checkpoint,
    defer_event,
    defer_fields,
    defer_row,
    pending_flush,
    run_fields_write,
    tool_event,
    username,
)
from .config import run_config
from .driver_state import Driver
from .harness_calls import running_call_recover
from .intake import boundary_check
from .outcomes import NEXT, StageOutcome, Waits

STRONG_CONFIRMATION = frozenset({"deleteFile", "renameFile"})


def tool_step(
    driver: Driver, run: Run, state: loop.LoopState, data: dict[str, Any]
) -> StageOutcome | loop.FinalOutput:
    """The pending tool_use: reconciled if a worker died in it, refused past the turn's
    limit, else decided and run (or asked about); its result goes back to the loop."""
    tool_use_id = state.pending[0]
    block = last_tool_use(driver.rows, tool_use_id)
    if block is None:
        raise loop.InvalidLoopEvent(f"No tool_use {tool_use_id} in the conversation.")
    record, finished = None, None
    if tool_use_id not in driver.fresh_uses:  # asked before this claim: maybe started
        record = running_call_recover(
            driver, run, ToolCall.objects.filter(run=run, tool_use_id=tool_use_id).first()
        )
    if record is None:
        limit = settings.HARNESS_MAX_TOOL_CALLS_PER_TURN
        position = tool_use_position(driver.rows, tool_use_id)
        if position >= limit:
            with checkpoint(driver):
                record = _over_the_turn_limit(driver, run, block, position, limit)
        else:

            def recorded(record: ToolCall) -> None:  # in the record's own transaction
                nonlocal finished
                finished = _tool_finished(driver, run, state, data, record)

            record = _tool_call(driver, run, block, data, recorded)
            if record is None:
                return Waits("approval")
    if finished is None:
        finished = _tool_finished(driver, run, state, data, record)
        pending_flush(driver)
    driver.current = True
    return finished


def _over_the_turn_limit(
    driver: Driver, run: Run, block: dict[str, Any], position: int, limit: int
) -> ToolCall:
    """A tool call past the turn's limit: refused before any check or effect, and recorded
    like every refusal, so the model hears why and the run's record shows the spam."""
    policy = run_config(driver, run).policy
    reason = (
        f"at most {limit} tool calls per model turn; this was call {position + 1}: "
        "make fewer calls, or continue in the next turn"
    )
    arguments = block.get("input")
    return ToolCall.objects.create(
        run=run,
        workspace=run.workspace,
        tool_use_id=block["id"][:200],
        tool=str(block.get("name", ""))[:120],
        arguments=arguments if isinstance(arguments, dict) else {"_": arguments},
        decision="deny",
        rule="tool-calls-per-turn",
        reason=reason,
        status="refused",
        error=f"deny: {reason}",
        policy_name=policy.name,
        policy_version=policy.version,
        finished_at=timezone.now(),
    )


def _tool_call(
    driver: Driver,
    run: Run,
    block: dict[str, Any],
    data: dict[str, Any],
    recorded: Callable[[ToolCall], None],
) -> ToolCall | None:
    """The call through the one door; None when it waits for a person. ``recorded``
    writes the call's result with its record (not after an approver's edit: the note
    about it is added to the record first)."""
    tool_use_id, tool, arguments = block["id"], block["name"], block.get("input") or {}
    config = run_config(driver, run)
    policy = config.policy
    approval = None
    if tool_use_id not in driver.fresh_uses:  # nobody can have approved a call just asked
        approval = _approval_for(driver, run, tool_use_id, policy.version)

    def before_run(tool: str, arguments: dict[str, Any]) -> tuple[str, str] | None:
        if driver.cancelled or driver.beat.cancelled:  # asked during the model call
            return "cancelled", "the run was cancelled before this call started"
        if _bound(config.hooks, "pre_tool_use"):
            pending_flush(driver)  # the turn's events before the hook's
        halted = run_hooks.pre_tool_use(run, tool, arguments, config.hooks)
        if halted is None:
            return None
        return f"hook:{halted.handler}", f"halted by the {halted.handler} hook: {halted.reason}"

    transform = run_hooks.post_tool_use_transform(run, tool, config.hooks)
    if _bound(config.hooks, "post_tool_use"):
        hooked = transform

        def transform(output: dict[str, Any]) -> dict[str, Any]:
            pending_flush(driver)
            return hooked(output)

    try:
        record = tool_call_run(
            workspace=run.workspace,
            tool=tool,
            arguments=arguments,
            policy=policy,
            run=run,
            grants=config.grants,
            tool_use_id=tool_use_id,
            hold_asks=True,
            approved_by=approval.decided_by if approval is not None else None,
            boundary=boundary_check(run),
            transform=transform,
            before_run=before_run,
            fence=partial(checkpoint, driver),
            recorded=recorded if approval is None or not approval.edited_diff else None,
            definition_of=config.definition,
            defer=partial(defer_row, driver),
            flush=partial(pending_flush, driver),
        )
    except ToolCallStarted:
        raise LeaseLost(f"Another worker runs tool call {tool_use_id} of run {run.pk}.") from None
    if approval is not None and approval.edited_diff and record.status == "ok":
        edited_note(record, approval)
    if record.status == "ask":
        problem = _preflight(run, record)
        if problem:  # never ask a person to approve what cannot happen
            record.status, record.error, record.finished_at = "refused", problem, timezone.now()
            with checkpoint(driver):
                record.save()
            return record
        _ask(driver, run, record, data)
        return None
    return record


def _bound(hooks: list[Any], phase: str) -> bool:
    return any(binding.phase == phase for binding in hooks)


def _approval_for(
    driver: Driver, run: Run, tool_use_id: str, policy_version: int
) -> ApprovalRequest | None:
    """The approval this call runs under, if a person approved it and it still holds."""
    approval = approval_in_force(
        run_id=run.pk, kind=ApprovalRequest.Kind.TOOL_CALL, tool_use_id=tool_use_id
    )
    if approval is None or approval.status != ApprovalRequest.Status.APPROVED:
        return None
    return approval if approval_holds(driver, run, approval, policy_version) is True else None


def _runs_as(tool: str) -> str:
    """The built-in a call runs (a custom tool may run deleteFile under another name)."""
    definition = tool_definition(tool)
    try:
        return (builtin_of(definition) if definition is not None else None) or tool
    except ValueError:
        return tool


def _preflight(run: Run, record: ToolCall) -> str:
    """What would make the call fail anyway, checked before an approver is asked."""
    root, drafts = run.workspace.root_path, run.workspace.drafts_path / str(run.pk)
    arguments = record.arguments
    runs_as = _runs_as(record.tool)
    if runs_as == SHELL_TOOL and len(str(arguments.get("command", ""))) > MAX_CONFIRM_CHARS:
        return (
            f"The command is over {MAX_CONFIRM_CHARS} characters: a person could not type it "
            "to approve it. Split it into shorter commands."
        )
    if runs_as == "deleteFile" and not (root / record.path).is_file():
        return f"{record.path} is not a file in the workspace; there is nothing to delete."
    if runs_as == "renameFile":
        source, target = str(arguments.get("source", "")), str(arguments.get("target", ""))
        if not (root / source).is_file():
            return f"{source} is not a file in the workspace; there is nothing to rename."
        if (root / target).exists():
            return f"{target} exists already; renaming never overwrites."
    if runs_as == "commitDraft" and not (drafts / record.path).is_file():
        return f"There is no draft of {record.path} to commit."
    return ""


def _ask(driver: Driver, run: Run, record: ToolCall, data: dict[str, Any]) -> None:
    tool = record.tool
    paths = [p for p in [record.path] if p]
    if tool == "renameFile":
        paths = [str(record.arguments.get("source", "")), str(record.arguments.get("target", ""))]
    state = loop.state_from_json(data["state"])
    new_state, _ = loop.step(state, loop.NeedsPerson(record.tool_use_id, record.reason))
    # Files read and diffed before the checkpoint's transaction, not under its lock.
    fingerprint = fingerprint_now(
        run=run,
        kind=ApprovalRequest.Kind.TOOL_CALL,
        tool=tool,
        arguments=record.arguments,
        paths=paths,
        policy_version=record.policy_version,
    )
    with checkpoint(driver):
        approval = approval_ask(
            run=run,
            fingerprint=fingerprint,
            tool_use_id=record.tool_use_id,
            paths=paths,
            summary=f"{tool} {', '.join(paths)}".strip(),
            rule=record.rule,
            reason=record.reason,
            strong_confirmation=record.decision == "ask_strong"
            or _runs_as(tool) in STRONG_CONFIRMATION,
        )
        run_fields_write(run, loop={**data, "state": loop.state_to_json(new_state)})
        run_transition(
            run_id=run.pk,
            to=run_status.WAITING_FOR_APPROVAL,
            detail={"waiting_for": "approval", "approval": str(approval.pk)},
        )


def tool_decided(
    driver: Driver, run: Run, state: loop.LoopState, data: dict[str, Any]
) -> StageOutcome:
    """Back from waiting: feed the person's decision to the loop. A rejection (or an
    expiry) is recorded as the call's refusal, and the model hears who said no and why."""
    tool_use_id = state.pending[0]
    approval = approval_in_force(
        run_id=run.pk, kind=ApprovalRequest.Kind.TOOL_CALL, tool_use_id=tool_use_id
    )
    if approval is None or approval.is_pending:
        raise loop.InvalidLoopEvent(f"Run {run.pk} resumed, but {tool_use_id} is undecided.")
    approved = approval.status == ApprovalRequest.Status.APPROVED
    new_state, _ = loop.step(state, loop.PersonDecided(tool_use_id, approved))
    with checkpoint(driver):
        if not approved:
            _refusal_record(driver, run, state, approval)
        run_fields_write(run, loop={**data, "state": loop.state_to_json(new_state)})
    return NEXT


def _refusal_record(
    driver: Driver, run: Run, state: loop.LoopState, approval: ApprovalRequest
) -> None:
    """The check and its answer are part of the record too (SPEC P6)."""
    tool_use_id = approval.tool_use_id
    who = username(approval.decided_by)
    error = f"{approval.status} by {who}: {approval.comment or 'no reason given'}"
    output = {"ok": False, "error": error, "decision": "ask", "approval": approval.status}
    refused = ToolCall.objects.create(
        run=run,
        workspace=run.workspace,
        tool_use_id=tool_use_id,
        tool=approval.tool[:120],
        arguments=approval.arguments,
        path=(approval.paths[0] if approval.paths else "")[:1024],
        decision="ask",
        rule=approval.rule,
        reason=approval.reason,
        status="refused",
        error=error,
        policy_version=approval.policy_version,
        finished_at=timezone.now(),
    )
    run_event_append(run_id=run.pk, type="tool.call", payload=tool_event(refused))
    row = message_append(
        run=run,
        after=driver.rows,
        role="user",
        kind="tool_result",
        content=tool_result_block(tool_use_id, output),
        turn=state.turn,
        tool_use_id=tool_use_id,
    )
    driver.rows.append(row)


def _tool_finished(
    driver: Driver, run: Run, state: loop.LoopState, data: dict[str, Any], record: ToolCall
) -> StageOutcome | loop.FinalOutput:
    """The call's result as the model's next message, the loop's next state, the event:
    held for the checkpoint the caller is in, or opens next."""
    output = tool_output(record)
    new_state, action = loop.step(
        state,
        loop.ToolFinished(record.tool_use_id, ok=record.status == "ok", recoverable=True),
    )
    row = message_new(
        run=run,
        after=driver.rows,
        role="user",
        kind="tool_result",
        content=tool_result_block(record.tool_use_id, output),
        turn=state.turn,
        tool_use_id=record.tool_use_id,
    )
    driver.pending.rows.append(row)
    defer_fields(driver, run, loop={**data, "state": loop.state_to_json(new_state)})
    defer_event(driver, "tool.call", tool_event(record))
    driver.rows.append(row)
    return action if isinstance(action, loop.FinalOutput) else NEXT
