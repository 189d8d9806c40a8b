"""The agent loop's state machine (SPEC R5), pure: the worker feeds it what happened and it
answers what to do next, so every turn can be checkpointed and resumed from its state.

REQUEST →(tool_use)→ TOOL_EXEC →(ok or recoverable error)→ CONTINUE → REQUEST;
REQUEST →(end_turn)→ TERMINATE; TOOL_EXEC →(unrecoverable)→ TERMINATE.
``max_turns`` bounds the model requests; a call waiting for a person interrupts the loop
(the run frees its worker) and the decision resumes it in TOOL_EXEC.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal

Phase = Literal["request", "tool_exec", "continue", "waiting", "terminate"]
REQUEST: Final = "request"
TOOL_EXEC: Final = "tool_exec"
CONTINUE: Final = "continue"
WAITING: Final = "waiting"
TERMINATE: Final = "terminate"


@dataclass(frozen=True)
class LoopState:
    phase: Phase = REQUEST
    turn: int = 0  # model requests made so far
    max_turns: int = 50
    pending: tuple[str, ...] = ()  # tool_use ids still to execute
    outcome: str = ""  # why it terminated


# --- what happened ------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelReplied:
    stop_reason: str
    tool_use_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolFinished:
    tool_use_id: str
    ok: bool
    recoverable: bool = True  # a tool error the model can read and work around


@dataclass(frozen=True)
class NeedsPerson:
    tool_use_id: str
    reason: str


@dataclass(frozen=True)
class PersonDecided:
    tool_use_id: str
    approved: bool


Event = ModelReplied | ToolFinished | NeedsPerson | PersonDecided


# --- what to do next ----------------------------------------------------------------------
@dataclass(frozen=True)
class RunAgain:
    """Ask the model again (after the tool results were added to the conversation)."""


@dataclass(frozen=True)
class ExecuteTool:
    tool_use_id: str


@dataclass(frozen=True)
class Interruption:
    """Wait for a person; the worker is freed and the decision resumes the loop."""

    tool_use_id: str
    reason: str


@dataclass(frozen=True)
class FinalOutput:
    outcome: Literal["completed", "failed"]
    reason: str


NextStep = RunAgain | ExecuteTool | Interruption | FinalOutput


class InvalidLoopEvent(ValueError):
    """An event that cannot happen in the loop's current phase (a bug or a replay mismatch)."""


def start(max_turns: int = 50) -> tuple[LoopState, NextStep]:
    if max_turns < 1:
        raise ValueError("max_turns must be at least 1.")
    return LoopState(max_turns=max_turns, turn=1), RunAgain()


def _terminate(
    state: LoopState, outcome: Literal["completed", "failed"], reason: str
) -> tuple[LoopState, NextStep]:
    return replace(state, phase=TERMINATE, pending=(), outcome=reason), FinalOutput(outcome, reason)


def _after_tools(state: LoopState) -> tuple[LoopState, NextStep]:
    if state.pending:
        return replace(state, phase=TOOL_EXEC), ExecuteTool(state.pending[0])
    if state.turn >= state.max_turns:
        return _terminate(state, "failed", f"max_turns ({state.max_turns}) reached")
    return replace(state, phase=REQUEST, turn=state.turn + 1), RunAgain()


def step(state: LoopState, event: Event) -> tuple[LoopState, NextStep]:
    """The next state and what the worker must do now."""
    if state.phase == TERMINATE:
        raise InvalidLoopEvent(f"The loop has terminated ({state.outcome}); {event} is late.")
    if isinstance(event, ModelReplied):
        if state.phase != REQUEST:
            raise InvalidLoopEvent(f"A model reply while the loop is in {state.phase}.")
        if event.stop_reason == "tool_use" and event.tool_use_ids:
            pending = tuple(event.tool_use_ids)
            return replace(state, phase=TOOL_EXEC, pending=pending), ExecuteTool(pending[0])
        if event.stop_reason in ("end_turn", "stop_sequence"):
            return _terminate(state, "completed", "the model ended its turn")
        if event.stop_reason == "max_tokens":
            return _terminate(state, "failed", "the model's answer was cut at max_tokens")
        return _terminate(state, "failed", f"the model stopped: {event.stop_reason}")
    if state.phase not in (TOOL_EXEC, WAITING) or not state.pending:
        raise InvalidLoopEvent(f"{type(event).__name__} while the loop is in {state.phase}.")
    if event.tool_use_id != state.pending[0]:
        raise InvalidLoopEvent(
            f"{event.tool_use_id} is not the tool call running ({state.pending[0]})."
        )
    if isinstance(event, NeedsPerson):
        return replace(state, phase=WAITING), Interruption(event.tool_use_id, event.reason)
    if isinstance(event, PersonDecided):
        if state.phase != WAITING:
            raise InvalidLoopEvent("A decision arrived, but nothing was waiting for one.")
        # Approved: run the call; rejected: the model hears of it as a tool result.
        if event.approved:
            return replace(state, phase=TOOL_EXEC), ExecuteTool(event.tool_use_id)
        return _after_tools(replace(state, pending=state.pending[1:]))
    if state.phase != TOOL_EXEC:
        raise InvalidLoopEvent("A tool finished while the loop waits for a person.")
    if not event.ok and not event.recoverable:
        return _terminate(state, "failed", f"tool call {event.tool_use_id} failed for good")
    return _after_tools(replace(state, pending=state.pending[1:]))


def state_to_json(state: LoopState) -> dict[str, object]:
    """The checkpointed form of the loop (SPEC R9): plain JSON, restored by state_from_json."""
    return {
        "phase": state.phase,
        "turn": state.turn,
        "max_turns": state.max_turns,
        "pending": list(state.pending),
        "outcome": state.outcome,
    }


def state_from_json(data: dict[str, object]) -> LoopState:
    phase = data.get("phase")
    if phase not in (REQUEST, TOOL_EXEC, CONTINUE, WAITING, TERMINATE):
        raise InvalidLoopEvent(f"A checkpoint with an unknown phase {phase!r}.")
    pending = data.get("pending") or []
    if not isinstance(pending, list) or not all(isinstance(p, str) for p in pending):
        raise InvalidLoopEvent("A checkpoint whose pending tool calls are not a list of ids.")
    return LoopState(
        phase=phase,
        turn=int(data.get("turn", 0)),  # type: ignore[call-overload]
        max_turns=int(data.get("max_turns", 50)),  # type: ignore[call-overload]
        pending=tuple(pending),
        outcome=str(data.get("outcome", "")),
    )
