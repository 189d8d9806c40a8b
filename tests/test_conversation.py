"""The conversation as the Messages API wants it, kept as a claim's rows grow (SPEC R9):
what the loop sends each turn is what converting every row afresh would give."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from runs.conversation import ApiMessages
from runs.models import Message

ROWS = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant"]),
        st.one_of(
            st.text(max_size=5),
            st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}),
            st.lists(
                st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)}),
                max_size=3,
            ),
        ),
    ),
    max_size=12,
)


def rows_of(pairs) -> list[Message]:
    return [Message(index=i, role=role, content=content) for i, (role, content) in enumerate(pairs)]


@settings(max_examples=150, deadline=None)
@given(ROWS, st.lists(st.integers(min_value=0, max_value=12), max_size=6))
def test_rows_added_between_turns_give_what_converting_them_all_gives(pairs, cuts):
    """Rows of one role in a row join into one message, whether they came in one turn or
    across several; the rows themselves are never changed."""
    rows = rows_of(pairs)
    kept, held = ApiMessages(), []
    before = copy.deepcopy([row.content for row in rows])
    for cut in [*sorted(cuts), len(rows)]:
        held.extend(rows[len(held) : max(cut, len(held))])
        assert kept.of(held) == ApiMessages().of(held)
    assert [row.content for row in rows] == before


def test_another_list_of_rows_is_converted_whole():
    """A claim that read its rows again holds other objects: nothing of the old list stays."""
    kept = ApiMessages()
    kept.of(rows_of([("user", "task"), ("assistant", "first answer")]))
    again = rows_of([("user", "task"), ("assistant", "read again"), ("user", "more")])
    assert kept.of(again) == [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "read again"}]},
        {"role": "user", "content": [{"type": "text", "text": "more"}]},
    ]
    assert kept.of(again[:1]) == [{"role": "user", "content": [{"type": "text", "text": "task"}]}]


def test_a_message_returned_once_is_never_changed_afterwards():
    """A turn's messages were sent (and a compaction may hold them): the next row of the
    same role makes a new last message instead of growing the one returned."""
    kept = ApiMessages()
    rows = rows_of([("user", "task"), ("assistant", "call"), ("user", "first result")])
    sent = kept.of(rows)[-1]
    before = copy.deepcopy(sent)
    rows.append(Message(index=3, role="user", content="second result"))
    grown = kept.of(rows)[-1]
    assert sent == before
    assert [b["text"] for b in grown["content"]] == ["first result", "second result"]
