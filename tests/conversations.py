"""Conversations for the compaction and validity tests: built ones (a turn that calls
readSource, a conversation of them) and random ones (hypothesis strategies: text turns and
tool-call turns, failures included, and random thresholds)."""

from __future__ import annotations

from hypothesis import strategies as st

from runs.core.compaction import Thresholds, estimate_tokens
from runs.core.validity import check_valid

TOOLS = ("readSource", "grep", "glob", "patchDraft", "dangerous", "requestApproval")


# --- building conversations ------------------------------------------------------------------
def tool_turn(
    number: int,
    *,
    said: str = "Let me look.",
    path: str = "src/app.py",
    error: str | None = None,
    output: str = "ok",
) -> list[dict]:
    """One turn: the assistant calls readSource on ``path``; the result fails with ``error``."""
    use_id = f"toolu_{number:04d}"
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": said},
                {"type": "tool_use", "id": use_id, "name": "readSource", "input": {"path": path}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": use_id,
                    "content": error or output,
                    "is_error": error is not None,
                }
            ],
        },
    ]


def conversation(turns: int, filler: int = 200) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "Fix the failing test in tests/test_x.py."}]
    for number in range(turns):
        messages += tool_turn(number, output="line of output\n" * filler)
    return messages


def total(messages: list[dict]) -> int:
    return sum(estimate_tokens(message) for message in messages)


def recent_length(messages: list[dict], keep: int) -> int:
    """How many messages the newest ``keep`` turns take (a turn starts at an odd index)."""
    starts = list(range(1, len(messages), 2))[-keep:]
    return len(messages) - starts[0] if starts else 0


# --- random conversations --------------------------------------------------------------------
# Phrases rather than random characters keep generation fast; between them they hold what
# JSON escaping makes costly (quotes, backslashes, control and multi-byte characters), paths,
# decisions and empty text.
words = st.sampled_from(
    [
        "",
        "Let me look.",
        'He said "stop" \\ then\x01 left.',
        "Reading runs/tasks.py now! Then more.",
        "Approval required: deleteFile README.md",
        "é日本🙂 multi-byte",
        "Error: no such file\nTraceback ...",
    ]
)
texts = st.builds(
    lambda head, filler, count: head + filler * count,
    words,
    st.sampled_from([" see src/app/models.py.", " approved by ops.", " é日本 \n", "x"]),
    st.integers(min_value=0, max_value=60),
)


turn_counts = st.integers(min_value=0, max_value=10)
call_counts = st.integers(min_value=0, max_value=3)
tool_names = st.sampled_from(TOOLS)
tool_inputs = st.dictionaries(
    st.sampled_from(["path", "pattern", "query", "command", "content"]), texts, max_size=2
)
flags = st.booleans()
# Strategies are built once, above: building them inside ``draw`` calls dominated the runtime.


@st.composite
def conversations(draw) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": draw(texts) or "Do the task."}]
    for number in range(draw(turn_counts)):
        calls = draw(call_counts)
        said = draw(texts) or "Next."
        if not calls:
            messages.append({"role": "assistant", "content": said})
            messages.append({"role": "user", "content": draw(texts) or "Go on."})
            continue
        ids = [f"toolu_{number:03d}_{index}" for index in range(calls)]
        uses = [
            {"type": "tool_use", "id": use_id, "name": draw(tool_names), "input": draw(tool_inputs)}
            for use_id in ids
        ]
        prefix = [{"type": "text", "text": said}] if draw(flags) else []
        messages.append({"role": "assistant", "content": prefix + uses})
        results: list[dict] = []
        for use_id in ids:
            body = draw(texts)
            content = body if draw(flags) else [{"type": "text", "text": body}]
            error = draw(flags)
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": use_id,
                    "content": content,
                    "is_error": error,
                }
            )
        messages.append({"role": "user", "content": results})
    if draw(flags):
        messages.append({"role": "assistant", "content": draw(texts) or "Done."})
    return messages


thresholds = st.builds(
    lambda whole, extra, keep: Thresholds(
        whole_tokens=whole, summary_tokens=whole + extra, keep_recent_turns=keep
    ),
    st.integers(min_value=1, max_value=3_000),
    st.integers(min_value=1, max_value=3_000),
    st.integers(min_value=1, max_value=5),
)


def valid(messages) -> bool:
    try:
        check_valid(messages)
    except ValueError:
        return False
    return True
