"""The loop's state machine (SPEC R5): pure, bounded by max_turns, terminal is final."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runs.core.loop import (
    TERMINATE,
    ExecuteTool,
    FinalOutput,
    Interruption,
    InvalidLoopEvent,
    ModelReplied,
    NeedsPerson,
    PersonDecided,
    RunAgain,
    ToolFinished,
    start,
    step,
)


def test_request_tool_exec_continue_request_then_terminate():
    state, action = start(max_turns=5)
    assert action == RunAgain()
    state, action = step(state, ModelReplied("tool_use", ("t1", "t2")))
    assert action == ExecuteTool("t1")
    state, action = step(state, ToolFinished("t1", ok=True))
    assert action == ExecuteTool("t2")
    state, action = step(state, ToolFinished("t2", ok=False, recoverable=True))
    assert action == RunAgain() and state.turn == 2
    state, action = step(state, ModelReplied("end_turn"))
    assert action == FinalOutput("completed", "the model ended its turn")
    assert state.phase == TERMINATE


def test_an_unrecoverable_tool_error_terminates():
    state, _ = start()
    state, _ = step(state, ModelReplied("tool_use", ("t1",)))
    _, action = step(state, ToolFinished("t1", ok=False, recoverable=False))
    assert action == FinalOutput("failed", "tool call t1 failed for good")


def test_max_turns_stops_a_model_that_never_ends():
    state, _ = start(max_turns=3)
    requests = 1
    while True:
        state, action = step(state, ModelReplied("tool_use", (f"t{requests}",)))
        state, action = step(state, ToolFinished(f"t{requests}", ok=True))
        if isinstance(action, FinalOutput):
            break
        requests += 1
    assert requests == 3 and action == FinalOutput("failed", "max_turns (3) reached")


def test_waiting_for_a_person_interrupts_and_the_decision_resumes():
    state, _ = start()
    state, _ = step(state, ModelReplied("tool_use", ("t1",)))
    state, action = step(state, NeedsPerson("t1", "commitDraft asks"))
    assert action == Interruption("t1", "commitDraft asks")
    _, action = step(state, PersonDecided("t1", approved=True))
    assert action == ExecuteTool("t1")
    _, action = step(state, PersonDecided("t1", approved=False))
    assert action == RunAgain()


@pytest.mark.parametrize(
    "events",
    [
        [ToolFinished("t1", ok=True)],  # no tool is running
        [ModelReplied("tool_use", ("t1",)), ModelReplied("end_turn")],
        [ModelReplied("tool_use", ("t1",)), ToolFinished("t9", ok=True)],
        [ModelReplied("tool_use", ("t1",)), PersonDecided("t1", approved=True)],
        [ModelReplied("end_turn"), ModelReplied("end_turn")],
    ],
)
def test_an_event_out_of_place_is_refused(events):
    state, _ = start()
    with pytest.raises(InvalidLoopEvent):
        for event in events:
            state, _ = step(state, event)


@given(
    st.integers(min_value=1, max_value=8),
    st.lists(
        st.tuples(
            st.sampled_from(["tool_use", "end_turn", "max_tokens"]),
            st.integers(min_value=1, max_value=3),
            st.booleans(),
            st.booleans(),
        ),
        max_size=30,
    ),
)
def test_the_loop_never_exceeds_max_turns_and_terminate_is_final(max_turns, script):
    state, action = start(max_turns)
    for stop_reason, tools, ok, recoverable in script:
        if isinstance(action, FinalOutput):
            break
        assert isinstance(action, RunAgain)
        ids = tuple(f"t{state.turn}-{i}" for i in range(tools))
        state, action = step(state, ModelReplied(stop_reason, ids))
        while isinstance(action, ExecuteTool):
            state, action = step(state, ToolFinished(action.tool_use_id, ok, recoverable or ok))
        assert state.turn <= max_turns
    if isinstance(action, FinalOutput):
        assert state.phase == TERMINATE
        with pytest.raises(InvalidLoopEvent):
            step(state, ModelReplied("end_turn"))
