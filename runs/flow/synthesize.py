"""Synthesize (SPEC R5, R10, R11): the model loop. Each model turn is one checkpoint — the
model call with its usage and cost (unique per turn), the assistant message, the loop's
next state, the events — and each tool call another (``tool_step.py``). The loop's state
machine is ``runs.core.loop``; this module drives it."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from policies.context import context_build
from policies.core.tokenizer import ByteEstimate, utf8_length
from policies.core.tool_specs import BUILTIN_TOOLS
from policies.effective_config import effective_config

from ..connections import connection_return
from ..conversation import message_append, message_new
from ..core import loop
from ..core import status as run_status
from ..core.compaction import Compacted, Thresholds, compact, estimate_tokens
from ..core.intake.boundaries import task_paths
from ..core.model_turns import OFFLINE_REPLAY, ModelError, ModelTurn, Usage
from ..core.turn_figures import layer_figures, turn_context
from ..model_clients import ReplayModel, model_for_run, system_blocks
from ..models import ModelCall, Run, Step
from ..observability import telemetry
from ..observability.core.cost import Tokens, run_basis
from ..observability.pricing import CallCost, call_cost
from ..run_hooks import session_start
from .checkpoints import (
    checkpoint,
    defer_added,
    defer_event,
    defer_fields,
    defer_transition,
    drafts_of,
    pending_flush,
    run_fail,
    run_fields_write,
    step_begin,
    step_end,
)
from .config import run_config
from .driver_state import Driver
from .intake import task_text
from .outcomes import NEXT, StageOutcome
from .tool_step import tool_decided, tool_step

_TOKENS = ByteEstimate()  # the tool definitions' estimate, as compaction counts messages
STABLE_LAYERS = frozenset({"identity", "instruction_files", "project_context", "business_rules"})


def synthesize_stage(driver: Driver, run: Run) -> StageOutcome:
    data = dict(run.loop or {})
    if "state" not in data:
        return _session_start(driver, run)
    state = loop.state_from_json(data["state"])
    if not driver.rows:
        driver.rows = list(run.messages.order_by("index"))
    if state.phase == loop.REQUEST:
        action = _model_turn(driver, run, state, data)
    elif state.phase == loop.TOOL_EXEC:
        action = tool_step(driver, run, state, data)
    elif state.phase == loop.WAITING:
        action = tool_decided(driver, run, state, data)
    else:
        raise loop.InvalidLoopEvent(f"The loop is in {state.phase} inside Synthesize.")
    if isinstance(action, loop.FinalOutput):
        return _loop_ended(driver, run, action)
    return action


def _session_start(driver: Driver, run: Run) -> StageOutcome:
    """The session_start hooks, then the loop's first state and the task's message."""
    halted = session_start(run, run_config(driver, run).hooks)
    if halted is not None:
        return run_fail(driver, f"halted by the {halted.handler} hook: {halted.reason}")
    state, _ = loop.start(run.agent.max_turns)
    with checkpoint(driver):
        step = step_begin(run, "synthesize", {"max_turns": run.agent.max_turns})
        data = {"state": loop.state_to_json(state), "step": step.pk, "verify_rounds": 0}
        run_fields_write(run, loop=data)
        # The conversation's first message: a session starts once, before any other.
        task = message_append(run=run, role="user", kind="task", content=task_text(run), after=[])
    driver.rows, driver.current = [task], True  # the run in memory is as just written
    return NEXT


def _prompt(driver: Driver, run: Run) -> None:
    """The system prompt and the tools, once per claim: the stable layers in the block
    marked for prompt caching, the rest after it; only tools the task may use."""
    if driver.system is not None:
        return
    built = context_build(
        agent=run.agent,
        workspace=run.workspace,
        task=task_text(run),
        paths=task_paths(run.task or {}),
    )
    layers = built.assembly.layers
    stable = "\n\n".join(
        layer.text for layer in layers if layer.name in STABLE_LAYERS and layer.text
    )
    variable = "\n\n".join(
        layer.text
        for layer in layers
        if layer.name not in STABLE_LAYERS and layer.name != "task_state" and layer.text
    )
    driver.system = system_blocks(stable, variable)
    driver.layers = layer_figures(layers)
    config = run_config(driver, run)
    policy = config.policy
    if not run.effective_config:  # the first prompt's: a takeover keeps what was used
        used = effective_config(agent=run.agent, built=built, policy=policy)
        defer_fields(driver, run, effective_config=used)
    allowed = set(((run.task or {}).get("boundaries") or {}).get("tools") or ())
    driver.tools = [
        t
        for t in config.offered(run.task or {})
        if t["name"] not in BUILTIN_TOOLS or t["name"] in allowed
    ]
    driver.tool_tokens = _TOKENS.tokens_for_size(utf8_length(json.dumps(driver.tools)))


def _sizes(driver: Driver, messages: list[dict[str, Any]]) -> list[int]:
    """Each message's token estimate, kept across turns: the conversation only grows at
    its end, so a message at the same place with as many blocks is the same message."""
    sizes = []
    for index, message in enumerate(messages):
        key = (index, len(message["content"]))
        if key not in driver.sizes:
            driver.sizes[key] = estimate_tokens(message)
        sizes.append(driver.sizes[key])
    return sizes


def _usage_counted(
    reply: Any, system: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> Usage:
    """The provider's usage report, or (when it sent none) the tokens counted here, marked
    as not reported so that their cost is shown as an estimate."""
    if reply.usage.reported:
        return reply.usage
    prompt = sum(estimate_tokens(m) for m in messages)
    prompt += estimate_tokens({"role": "user", "content": system}) if system else 0
    answer = estimate_tokens({"role": "assistant", "content": list(reply.content)})
    return Usage(input_tokens=prompt, output_tokens=answer, reported=False)


def _model_turn(
    driver: Driver, run: Run, state: loop.LoopState, data: dict[str, Any]
) -> StageOutcome | loop.FinalOutput:
    """1. Build the prompt once per claim; 2. compact the conversation (R10); 3. call the
    model under its timeout; 4. price and checkpoint the turn; 5. the loop's next step."""
    _prompt(driver, run)
    if driver.model is None:
        try:
            # Only a replay resumes at a position: the calls it already played.
            played = run.model_calls.count() if run.replay_script else 0
            driver.model = model_for_run(run, position=played)
        except ModelError as error:
            return run_fail(driver, str(error))
    agent = run.agent
    messages = driver.api.of(driver.rows)
    compacted = compact(
        messages,
        Thresholds(
            whole_tokens=agent.compaction_whole_tokens,
            summary_tokens=agent.compaction_summary_tokens,
            keep_recent_turns=agent.compaction_keep_turns,
        ),
        _sizes(driver, messages),
        driver.checked,
        driver.summaries,
    )
    driver.checked = compacted.checked
    span = telemetry.chat_started(
        run, model=driver.model, step_id=data.get("step"), turn=state.turn
    )
    if not isinstance(driver.model, ReplayModel):
        # Seconds on the network: the connection goes back to the pool meanwhile (a run
        # waiting on the model holds no database connection); the next query takes one,
        # checked on the server: a restart meanwhile never reaches the run.
        connection_return(recheck=True)
    started = time.monotonic()
    try:
        reply = driver.model.complete(
            system=driver.system or [], messages=compacted.messages, tools=driver.tools or []
        )
    except ModelError as error:
        telemetry.chat_failed(span, error)
        return run_fail(driver, f"model call failed: {error}")
    latency = int((time.monotonic() - started) * 1000)
    new_state, action = loop.step(
        state, loop.ModelReplied(reply.stop_reason, tuple(u.id for u in reply.tool_uses))
    )
    usage = _usage_counted(reply, driver.system or [], compacted.messages)
    priced = call_cost(
        model=reply.model,
        tokens=Tokens(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
        ),
        reported=usage.reported,
        at=timezone.now(),
        replayed=reply.label == OFFLINE_REPLAY,
    )
    turn = _Turn(state, new_state, reply, usage, priced, compacted, latency)
    _turn_checkpoint(driver, run, data, turn)
    telemetry.chat_ended(span, reply=reply, usage=usage, priced=priced)
    return action if isinstance(action, loop.FinalOutput) else NEXT


@dataclass(frozen=True)
class _Turn:
    """One model turn's results, carried from the call to its checkpoint."""

    state: loop.LoopState
    new_state: loop.LoopState
    reply: ModelTurn
    usage: Usage
    priced: CallCost
    compacted: Compacted
    latency: int


def _turn_checkpoint(driver: Driver, run: Run, data: dict[str, Any], turn: _Turn) -> None:
    """The model call, its assistant message, the run's usage and cost, the loop's next
    state and the events, all or nothing. A turn that asks for tools is held for the
    checkpoint of its first call (it commits with the call's journal or its result, in one
    transaction), the model's last for the run's end (Verify, Approval and the completion
    follow with no wait); any other is written now. A worker that dies before that
    checkpoint asks the model again on resume: the turn is recorded once or not at all."""
    reply, usage, priced, compacted = turn.reply, turn.usage, turn.priced, turn.compacted
    driver.pending.rows.append(
        ModelCall(
            run=run,
            turn=turn.state.turn,
            label=reply.label,
            model=reply.model,
            request_id=reply.request_id[:200],
            stop_reason=reply.stop_reason[:32],
            text=reply.text,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
            latency_ms=turn.latency,
            context=turn_context(
                driver.layers,
                compacted,
                whole_tokens=run.agent.compaction_whole_tokens,
                summary_tokens=run.agent.compaction_summary_tokens,
                tools=len(driver.tools or ()),
                tool_tokens=driver.tool_tokens,
            ),
            cost_usd=priced.cost_usd,
            cost_basis=priced.basis,
            price_id=priced.price_id,
        )
    )
    row = message_new(
        run=run,
        after=driver.rows,
        role="assistant",
        kind="assistant",
        content=list(reply.content) or [{"type": "text", "text": reply.text or "(empty)"}],
        turn=turn.state.turn,
    )
    driver.pending.rows.append(row)
    defer_added(
        driver,
        run,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cost_usd=priced.cost_usd or 0,
    )
    defer_fields(driver, run, loop={**data, "state": loop.state_to_json(turn.new_state)})
    if (basis := run_basis(run.cost_basis, priced.basis)) != run.cost_basis:
        defer_fields(driver, run, cost_basis=basis)
    if compacted.tier > 1 and (brief := compacted.brief()) != run.compaction:
        defer_event(driver, "compaction", compacted.since(run.compaction))
        defer_fields(driver, run, compaction=brief)
    defer_event(driver, "model.turn", _turn_event(turn))
    driver.rows.append(row)
    driver.fresh_uses.update(u.id for u in reply.tool_uses)
    # Held for the next checkpoint when one follows at once: the first tool call's, or
    # (the model is done) the run's end; a turn the model continues is written now.
    if turn.new_state.phase not in (loop.TOOL_EXEC, loop.TERMINATE):
        pending_flush(driver)
    driver.current = True


def _turn_event(turn: _Turn) -> dict[str, Any]:
    reply, usage, priced = turn.reply, turn.usage, turn.priced
    return {
        "turn": turn.state.turn,
        "max_turns": turn.state.max_turns,
        "label": reply.label,
        "model": reply.model,
        "stop_reason": reply.stop_reason,
        "text": reply.text[:4000],
        "tool_uses": [{"id": u.id, "name": u.name} for u in reply.tool_uses],
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
        },
        "cost_usd": None if priced.cost_usd is None else str(priced.cost_usd),
        "cost_basis": priced.basis,
        "latency_ms": turn.latency,
        "compaction_tier": turn.compacted.tier,
    }


def _loop_ended(driver: Driver, run: Run, action: loop.FinalOutput) -> StageOutcome:
    """The model is done: the loop's outcome, then on to Verify."""
    if action.outcome == "failed":
        return run_fail(driver, action.reason)
    # Held for Verify's first checkpoint: the run in memory stays as it will be written.
    step_id = (run.loop or {}).get("step")
    step = Step.objects.filter(pk=step_id).first() if step_id else None
    if step is not None and step.status == "running":
        # The last turn's call is held for the checkpoint this one joins: it counts too.
        held = sum(1 for row in driver.pending.rows if isinstance(row, ModelCall))
        step_end(
            step,
            output={"turns": run.model_calls.count() + held, "outcome": action.reason},
            input_artifacts=["structured_task"],
            output_artifacts=[f"draft:{path}" for path in drafts_of(run)],
            driver=driver,
        )
    defer_fields(driver, run, stage="verify")
    defer_transition(driver, run, run_status.VERIFYING)
    driver.current = True
    return NEXT
