"""Message compaction (SPEC R10): three tiers, always a conversation the API accepts.

Pure: no database, no Django. The properties run over random conversations (text turns and
tool-call turns, failures included) and random thresholds (tests/conversations.py); the
rules a compaction must keep are tests/test_conversation_validity.py's.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.core.compaction import (
    BRIDGE_TEXT,
    MAX_SUMMARY_CHARS,
    SUMMARY_HEADER,
    Compacted,
    Thresholds,
    compact,
    estimate_tokens,
    summarize_turn,
)
from runs.core.validity import check_valid
from tests.conversations import (
    conversation,
    conversations,
    recent_length,
    thresholds,
    tool_turn,
    total,
    valid,
)


# --- properties ------------------------------------------------------------------------------
def tightened(limits: Thresholds, factor: float) -> Thresholds:
    whole = max(1, int(limits.whole_tokens * factor))
    return Thresholds(
        whole_tokens=whole,
        summary_tokens=max(whole + 1, int(limits.summary_tokens * factor)),
        keep_recent_turns=limits.keep_recent_turns,
    )


@settings(max_examples=200, deadline=None)
@given(conversations(), thresholds, st.floats(min_value=0.05, max_value=1.0))
def test_the_result_is_always_a_valid_smaller_conversation_that_keeps_task_and_recent_turns(
    messages, limits, factor
):
    check_valid(messages)  # the generator's own promise
    original = copy.deepcopy(messages)
    result = compact(messages, limits)

    assert messages == original  # the input is never changed
    assert compact(original, limits) == result  # deterministic
    # Sizes kept from earlier turns (the driver's) give the same result as sizes measured.
    assert compact(messages, limits, [estimate_tokens(m) for m in messages]) == result
    # Tightening the thresholds is the conversation growing relative to them: the tier
    # never falls, and the prompt never grows.
    tight = compact(messages, tightened(limits, factor))
    assert tight.tier >= result.tier and tight.tokens_after <= result.tokens_after
    check_valid(result.messages)
    assert result.tokens_before == total(messages)
    assert result.tokens_after == total(result.messages)
    assert result.tokens_after <= result.tokens_before
    assert result.messages[0] == messages[0]
    keep = recent_length(messages, limits.keep_recent_turns)
    assert result.messages[len(result.messages) - keep :] == messages[len(messages) - keep :]

    if result.tier == 1:
        assert result.messages == messages and not result.summarized and not result.dropped
        return
    # Compacted turns are a prefix of the turns, each either summarized or dropped, and the
    # rest follows untouched after the bridge and the summary message.
    spans = sorted([*result.dropped, *((s.first_index, s.last_index) for s in result.summarized)])
    assert [first for first, _ in spans] == list(range(1, 2 * len(spans), 2))
    assert result.messages[1] == {"role": "assistant", "content": BRIDGE_TEXT}
    assert result.messages[2]["content"].startswith(SUMMARY_HEADER)
    assert result.messages[3:] == messages[spans[-1][1] + 1 :]
    for summary in result.summarized:
        assert summary.text == "; ".join(summary.facts)
        assert len(summary.text) <= MAX_SUMMARY_CHARS
        assert summary.text in result.messages[2]["content"]
    unsummarized_old = (len(result.messages) - 3 - keep) // 2
    if result.tier == 2:
        assert not result.dropped
        assert result.tokens_after <= limits.whole_tokens or unsummarized_old == 0
    else:
        assert result.dropped and unsummarized_old == 0
        assert result.tokens_after <= limits.summary_tokens or not result.summarized
        assert f"{len(result.dropped)} older turn" in result.messages[2]["content"]


# --- the tiers, by example -------------------------------------------------------------------
def test_below_the_threshold_every_message_stays_whole():
    messages = conversation(turns=6, filler=2)
    result = compact(messages, Thresholds())
    assert result.tier == 1
    assert result.messages == messages and result.messages is not messages
    assert result.tokens_after == result.tokens_before == total(messages)
    assert result.to_json()["summarized"] == [] and result.to_json()["dropped"] == []


def test_tier_2_summarizes_the_oldest_turns_and_keeps_their_facts():
    messages = conversation(turns=8)
    messages[1:3] = tool_turn(
        900,
        said="I will read the settings first. Then the views.",
        path="harness_console/settings.py",
        error="FileNotFoundError: harness_console/settings.py\nTraceback (most recent call last):",
    )
    limits = Thresholds(whole_tokens=total(messages) - 100, summary_tokens=10**6)
    result = compact(messages, limits)

    assert result.tier == 2 and not result.dropped
    assert result.tokens_after <= limits.whole_tokens < result.tokens_before
    first = result.summarized[0]
    assert (first.first_index, first.last_index) == (1, 2)
    summary_text = result.messages[2]["content"]
    assert "harness_console/settings.py" in summary_text
    assert "failed: FileNotFoundError: harness_console/settings.py" in summary_text
    assert 'said "I will read the settings first."' in summary_text
    assert "Traceback" not in summary_text  # only the error's first line
    assert result.messages[-2 * 4 :] == messages[-2 * 4 :]
    check_valid(result.messages)


def test_tier_2_stops_at_the_recent_turns_however_large_they_are():
    messages = conversation(turns=6, filler=2_000)
    result = compact(messages, Thresholds(whole_tokens=10, summary_tokens=10**6))
    assert result.tier == 2
    assert [(s.first_index, s.last_index) for s in result.summarized] == [(1, 2), (3, 4)]
    assert result.messages[3:] == messages[5:]


def test_tier_3_drops_the_oldest_summaries_and_says_so():
    messages = conversation(turns=30, filler=20)
    recent = total(messages[-8:]) + total(messages[:1])
    limits = Thresholds(whole_tokens=recent // 2, summary_tokens=recent + 300)
    result = compact(messages, limits)

    assert result.tier == 3
    assert result.dropped[0] == (1, 2)
    assert result.summarized and result.summarized[0].first_index == result.dropped[-1][1] + 1
    assert result.tokens_after <= limits.summary_tokens
    header = result.messages[2]["content"].splitlines()[0]
    assert header == (
        f"{SUMMARY_HEADER} {len(result.dropped)} older turns were dropped entirely to fit the "
        "context window."
    )
    assert result.to_json()["dropped"][0] == [1, 2]
    check_valid(result.messages)


def test_tier_3_can_drop_every_summary_when_the_recent_turns_fill_the_budget():
    messages = conversation(turns=10, filler=200)
    result = compact(messages, Thresholds(whole_tokens=10, summary_tokens=20, keep_recent_turns=2))
    assert result.tier == 3 and not result.summarized
    assert len(result.dropped) == 8
    assert result.messages[3:] == messages[-4:]


def test_to_json_is_json_and_leaves_out_the_messages():
    result = compact(conversation(turns=8), Thresholds(whole_tokens=500, summary_tokens=100_000))
    record = json.loads(json.dumps(result.to_json()))
    assert "messages" not in record
    assert record["tier"] == 2
    assert record["tokens_after"] == result.tokens_after
    assert record["summarized"][0]["facts"] == list(result.summarized[0].facts)


# --- summaries -------------------------------------------------------------------------------
def test_a_summary_keeps_calls_failures_paths_first_sentence_and_decisions():
    turn = [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "The grep found nothing! So I will check docs/guide.md."},
                {"type": "tool_use", "id": "a", "name": "grep", "input": {"pattern": "TODO"}},
                {"type": "tool_use", "id": "b", "name": "deleteFile", "input": {"path": "old.txt"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "runs/tasks.py:3: TODO"},
                {
                    "type": "tool_result",
                    "tool_use_id": "b",
                    "content": [{"type": "text", "text": "Rejected by ann: not now.\nmore"}],
                    "is_error": True,
                },
                {"type": "text", "text": "The approver decided to keep it."},
            ],
        },
    ]
    summary = summarize_turn(turn, first_index=5)
    assert (summary.first_index, summary.last_index) == (5, 6)
    assert summary.facts == (
        'said "The grep found nothing!"',
        "grep(pattern=TODO)",
        "deleteFile(path=old.txt) failed: Rejected by ann: not now.",
        "noted: The approver decided to keep it.",
        "paths: docs/guide.md, runs/tasks.py",
    )
    assert summary.text == "; ".join(summary.facts)
    assert summary.tokens == -(-len(summary.text.encode()) // 4)
    assert summarize_turn(copy.deepcopy(turn), first_index=5) == summary


def test_a_summary_reads_the_consoles_json_tool_results():
    """Tool results are the tool's output as JSON (``tool_result_block``): the error field is
    the failure, a rejection is not repeated as a decision, and escapes are not paths."""
    output = {
        "ok": True,
        "path": "a.py",
        "content": "x = 1\nlib/b.py",  # raw, the JSON escape would read "nlib/b.py"
    }
    rejected = {
        "ok": False,
        "error": "rejected by ann: not now",
        "decision": "ask",
        "approval": "rejected",
    }
    turn = [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "r", "name": "readSource", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "d", "name": "deleteFile", "input": {"path": "b.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "r", "content": json.dumps(output)},
                {
                    "type": "tool_result",
                    "tool_use_id": "d",
                    "content": json.dumps(rejected),
                    "is_error": True,
                },
            ],
        },
    ]
    assert summarize_turn(turn).facts == (
        "readSource(path=a.py)",
        "deleteFile(path=b.py) failed: rejected by ann: not now",
        "paths: lib/b.py",
    )


def test_a_summary_is_bounded_and_never_larger_than_its_turn():
    long_turn = [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": f"t{i}",
                    "name": "readSource",
                    "input": {"path": f"p{i}.py"},
                }
                for i in range(60)
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"t{i}", "content": "x"} for i in range(60)
            ],
        },
    ]
    assert len(summarize_turn(long_turn).text) <= MAX_SUMMARY_CHARS
    tiny = [{"role": "assistant", "content": "Ok."}, {"role": "user", "content": "k"}]
    assert len(summarize_turn(tiny).text.encode()) < len(str(tiny).encode())


def test_compaction_that_would_not_save_anything_keeps_everything_whole():
    """Tiny old turns cost less than the summary message that would replace them."""
    messages = [{"role": "user", "content": "x" * 4_000}]
    messages += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}] * 5
    result = compact(messages, Thresholds(whole_tokens=10, summary_tokens=20, keep_recent_turns=4))
    assert result.tier == 1 and result.messages == messages


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"whole_tokens": 0}, "positive"),
        ({"summary_tokens": -1}, "positive"),
        ({"whole_tokens": 500, "summary_tokens": 500}, "must be below summary_tokens"),
        ({"whole_tokens": 600, "summary_tokens": 500}, "must be below summary_tokens"),
        ({"keep_recent_turns": 0}, "at least 1"),
        ({"whole_tokens": 1.5}, "integer"),
        ({"keep_recent_turns": True}, "integer"),
    ],
)
def test_bad_thresholds_are_refused(arguments, complaint):
    with pytest.raises(ValueError, match=complaint):
        Thresholds(**arguments)


def test_results_are_frozen():
    result = compact(conversation(turns=1), Thresholds())
    assert isinstance(result, Compacted)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.tier = 2  # type: ignore[misc]


# --- summaries kept from the last turn ----------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(conversations(), thresholds, st.data())
def test_summaries_kept_from_an_earlier_turn_give_the_same_compaction(messages, limits, data):
    """The loop keeps the summaries of the turns it compacted: going on from an earlier
    turn's (a shorter prefix of the same conversation) is the same as summarizing again."""
    prefixes = [k for k in range(1, len(messages) + 1) if valid(messages[:k])]
    k = data.draw(st.sampled_from(prefixes))
    kept: dict = {}
    assert compact(messages[:k], limits, summaries=kept) == compact(messages[:k], limits)
    assert compact(messages, limits, summaries=kept) == compact(messages, limits)
    assert compact(messages, limits, summaries=kept) == compact(messages, limits)


def test_a_growing_conversation_summarizes_each_old_turn_once(monkeypatch):
    """Above the threshold every turn's compaction summarized every old turn again: a
    step cost more the longer its run. With the loop's summaries kept, each turn is
    summarized once over the whole run, and each turn's prompt is what it was."""
    from runs.core import compaction

    made: list[int] = []
    summarize = compaction.summarize_turn

    def counted(messages, first_index=0):
        made.append(first_index)
        return summarize(messages, first_index)

    limits = Thresholds(whole_tokens=800, summary_tokens=1_200, keep_recent_turns=2)
    messages: list[dict] = conversation(0)
    kept: dict = {}
    tiers = set()
    for number in range(60):
        messages += tool_turn(number, output="line of output\n" * 20)
        fresh = compact(messages, limits)
        monkeypatch.setattr(compaction, "summarize_turn", counted)
        assert compact(messages, limits, summaries=kept) == fresh
        monkeypatch.setattr(compaction, "summarize_turn", summarize)
        tiers.add(fresh.tier)
    assert tiers == {1, 2, 3}
    assert made and sorted(made) == sorted(set(made))  # no turn summarized twice


def test_each_turn_s_record_holds_what_is_new_since_the_last_one():
    """The run's history records each compaction as what it changed since the one before:
    every summary once, every dropped turn once, whatever the tiers passed through; the
    run keeps the brief. A record from before briefs (the whole summary list) is read too."""
    limits = Thresholds(whole_tokens=800, summary_tokens=1_200, keep_recent_turns=2)
    messages: list[dict] = conversation(0)
    before: dict | None = None
    summaries: dict[int, dict] = {}
    dropped: list[list[int]] = []
    for number in range(60):
        messages += tool_turn(number, output="line of output\n" * 20)
        result = compact(messages, limits)
        if result.tier == 1 or result.brief() == before:
            continue
        record = json.loads(json.dumps(result.since(before)))
        assert {k: v for k, v in record.items() if k not in ("summarized", "dropped")} == (
            result.brief()
        )
        for summary in record["summarized"]:
            assert summary["first_index"] not in summaries
            summaries[summary["first_index"]] = summary
        dropped += record["dropped"]
        before = result.brief()
    assert [list(span) for span in result.dropped] == dropped
    assert all(summaries[s.first_index] == s.to_json() for s in result.summarized)
    assert "summarized" not in result.brief() and result.brief()["dropped_turns"] == len(dropped)
    # A record as runs kept it before: its lists counted as what was compacted then.
    assert result.since(result.to_json())["summarized"] == []
    assert result.since(result.to_json())["dropped"] == []
    assert len(result.since(None)["summarized"]) == len(result.summarized)
    for odd in ({}, {"summarized_turns": "3", "summarized": 7}, {"dropped_turns": -1}, []):
        assert result.since(odd) == result.since(None)  # nothing it can count: all is new
