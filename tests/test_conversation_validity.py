"""What the Messages API accepts of a conversation (SPEC R10's rules compaction could
break), and a check that goes on from the last turn's, as the loop's does.

Pure: no database, no Django.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.core.compaction import Thresholds, compact
from runs.core.validity import check_valid
from tests.conversations import conversations, thresholds, tool_turn, valid


# --- validity --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("messages", "complaint"),
    [
        ([], "at least the task"),
        ([{"role": "assistant", "content": "hi"}], "roles alternate"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "roles alternate"),
        (
            [
                {"role": "user", "content": "task"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
                },
            ],
            "have no results",
        ),
        (
            [
                {"role": "user", "content": "task"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
                },
                {"role": "user", "content": "no result"},
            ],
            "each call needs exactly one result",
        ),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
            "each call needs exactly one result",
        ),
        (
            [
                {"role": "user", "content": "task"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "first"},
                        {"type": "tool_result", "tool_use_id": "t"},
                    ],
                },
            ],
            "must come before",
        ),
        ([{"role": "user", "content": 3}], "string or a list"),
    ],
)
def test_check_valid_names_what_the_api_would_refuse(messages, complaint):
    with pytest.raises(ValueError, match=complaint):
        check_valid(messages)
    with pytest.raises(ValueError, match="Cannot compact an invalid conversation"):
        compact(messages, Thresholds())


# --- a check that goes on from the last turn's ------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(conversations(), thresholds, st.data())
def test_a_check_from_an_earlier_turn_reads_only_what_came_after_and_agrees(messages, limits, data):
    """The loop checks its conversation every turn; going on from the last turn's check is
    the same as checking it all again, and so is the compaction that starts from it."""
    prefixes = [k for k in range(1, len(messages) + 1) if valid(messages[:k])]
    k = data.draw(st.sampled_from(prefixes))
    earlier = check_valid(messages[:k])
    assert earlier.count == k
    assert check_valid(messages, earlier) == check_valid(messages)
    assert compact(messages, limits, checked=earlier) == compact(messages, limits)


def test_going_on_from_an_earlier_check_still_refuses_a_repeated_tool_use_id():
    earlier = [{"role": "user", "content": "task"}, *tool_turn(1)]
    checked = check_valid(earlier)
    again = [*earlier, *tool_turn(1, said="Once more.")]  # toolu_0001 was made before
    with pytest.raises(ValueError, match="repeats the tool_use id 'toolu_0001'"):
        check_valid(again, checked)


def test_a_conversation_that_changed_where_the_check_stopped_is_read_again():
    """The last message read now holds more blocks: another conversation than the one
    checked, so it is read whole, and what is wrong before that point is found."""
    earlier = [{"role": "user", "content": "task"}, *tool_turn(1)]
    checked = check_valid(earlier)
    broken = [{"role": "user", "content": "task"}, *tool_turn(1), *tool_turn(2)]
    broken[0] = {"role": "assistant", "content": "not the task"}
    broken[2] = {**broken[2], "content": [*broken[2]["content"], {"type": "text", "text": "+"}]}
    with pytest.raises(ValueError, match="Message 0 is 'assistant'"):
        check_valid(broken, checked)
    # With the same blocks there again it is taken for the conversation checked: the
    # caller's promise (a loop's conversation only grows at its end), not read again.
    broken[2] = earlier[2]
    assert check_valid(broken, checked).count == len(broken)
