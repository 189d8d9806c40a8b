"""What the Messages API accepts of a conversation's structure (SPEC R10): the rules
compaction could break, checked before every model request. The loop's conversation only
grows at its end, so a check can go on from the last turn's (:class:`Checked`) and read
only the messages after it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def _blocks(message: Mapping[str, Any], index: int) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return []
    if not isinstance(content, list):
        raise ValueError(f"Message {index}'s content must be a string or a list of blocks.")
    for block in content:
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise ValueError(f"Message {index} has a content block without a type.")
    return content


@dataclass(frozen=True)
class Checked:
    """How far :func:`check_valid` read a conversation that only grows at its end: its first
    ``count`` messages were valid, the last of them holding ``blocks`` content blocks, and
    made the tool calls ``seen_ids``. A valid conversation has answered every call it made,
    so nothing else carries over to the messages after them."""

    count: int = 0
    blocks: int = -1
    seen_ids: frozenset[str] = frozenset()

    def holds_for(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether ``messages`` still start with what was read: as many messages or more,
        the last one read with as many blocks (a message that grew is read again)."""
        count = self.count
        return 0 < count <= len(messages) and block_count(messages[count - 1]) == self.blocks


def block_count(message: Mapping[str, Any]) -> int:
    content = message.get("content") if isinstance(message, Mapping) else None
    return len(content) if isinstance(content, list) else -1


def check_valid(messages: Sequence[Mapping[str, Any]], since: Checked | None = None) -> Checked:
    """Raise ``ValueError`` unless the Messages API would accept the conversation's structure:
    it starts with the user's task, roles alternate, every tool call is answered in the very
    next message (results first, each exactly once), and no result answers a call not made just
    before. These are the rules compaction could break; content itself is not judged.

    ``since``: what an earlier check of the same conversation read (a loop's, one turn ago),
    so only the messages after it are read; the answer is what this check read."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ValueError("A conversation is a list of messages.")
    if not messages:
        raise ValueError("A conversation needs at least the task message.")
    start = since.count if since is not None and since.holds_for(messages) else 0
    seen_ids: set[str] = set(since.seen_ids) if start and since is not None else set()
    calls: list[str] = []  # the previous assistant message's tool_use ids
    for index, message in enumerate(messages[start:], start):
        if not isinstance(message, Mapping):
            raise ValueError(f"Message {index} is not a mapping.")
        expected = "user" if index % 2 == 0 else "assistant"
        if message.get("role") != expected:
            raise ValueError(
                f"Message {index} is {message.get('role')!r} where {expected!r} was expected: "
                "roles alternate, starting with the user's task."
            )
        blocks = _blocks(message, index)
        uses = [block for block in blocks if block["type"] == "tool_use"]
        results = [block for block in blocks if block["type"] == "tool_result"]
        if expected == "assistant":
            if results:
                raise ValueError(f"Message {index} is the assistant's but holds a tool_result.")
            calls = []
            for use in uses:
                use_id = use.get("id")
                if not isinstance(use_id, str) or not use_id:
                    raise ValueError(f"Message {index} has a tool_use without an id.")
                if use_id in seen_ids:
                    raise ValueError(f"Message {index} repeats the tool_use id {use_id!r}.")
                if not isinstance(use.get("name"), str) or not isinstance(
                    use.get("input"), Mapping
                ):
                    raise ValueError(f"Message {index}'s tool_use {use_id!r} lacks a name/input.")
                seen_ids.add(use_id)
                calls.append(use_id)
            continue
        if uses:
            raise ValueError(f"Message {index} is the user's but holds a tool_use.")
        answered = [result.get("tool_use_id") for result in results]
        if sorted(map(str, answered)) != sorted(calls):
            raise ValueError(
                f"Message {index} answers the tool calls {answered} but message {index - 1} "
                f"made {calls}: each call needs exactly one result, in the next message."
            )
        if any(block["type"] != "tool_result" for block in blocks[: len(results)]):
            raise ValueError(f"Message {index}: tool results must come before any other block.")
        calls = []
    if calls:
        raise ValueError(
            f"The last message's tool calls {calls} have no results: answer them before sending."
        )
    return Checked(len(messages), block_count(messages[-1]), frozenset(seen_ids))
