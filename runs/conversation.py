"""A run's conversation as the Messages API wants it, rebuilt from its append-only rows.

Each row is written once, inside the checkpoint of the turn that made it (SPEC R9); the
API's shape (alternating roles, all tool results of a turn in one user message) is
derived here, so a resumed run sends exactly what an uninterrupted one would have.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Max

from .models import Message, Run


class ApiMessages:
    """A claim's rows as the Messages API wants them, consecutive rows of one role joined
    into one message; kept as the rows grow: a loop's turn adds two rows to a conversation
    of hundreds, so only the rows added since are converted (the last message is replaced
    by a longer one when the next row has its role). Rows a claim holds are never changed,
    only appended to; another list (read again) is converted whole. A message once
    returned is never changed: the list is."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._done = 0
        self._last: Message | None = None

    def of(self, rows: list[Message]) -> list[dict[str, Any]]:
        if not self._done or len(rows) < self._done or rows[self._done - 1] is not self._last:
            self.messages, self._done = [], 0
        for row in rows[self._done :]:
            _message_add(self.messages, row)
        self._done, self._last = len(rows), rows[-1] if rows else None
        return self.messages


def _message_add(messages: list[dict[str, Any]], row: Message) -> None:
    """The row joins the last message when it has its role: as a new message, since the
    old one was sent (and may be held) as it was."""
    blocks = _blocks(row.content)
    if messages and messages[-1]["role"] == row.role:
        messages[-1] = {"role": row.role, "content": [*messages[-1]["content"], *blocks]}
    else:
        messages.append({"role": row.role, "content": blocks})


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, dict):
        return [content]
    return [dict(block) for block in content]


def message_append(
    *,
    run: Run,
    role: str,
    kind: str,
    content: Any,
    turn: int = 0,
    tool_use_id: str = "",
    after: list[Message] | None = None,
) -> Message:
    """Append one row after the last; call inside the turn's checkpoint transaction.
    ``after``: the rows the caller already holds (saves asking the database for the last)."""
    if after is None:
        last = Message.objects.filter(run=run).aggregate(last=Max("index"))["last"]
        after = [] if last is None else [Message(index=last)]
    row = message_new(
        run=run,
        after=after,
        role=role,
        kind=kind,
        content=content,
        turn=turn,
        tool_use_id=tool_use_id,
    )
    row.save(force_insert=True)
    return row


def message_new(
    *,
    run: Run,
    after: list[Message],
    role: str,
    kind: str,
    content: Any,
    turn: int = 0,
    tool_use_id: str = "",
) -> Message:
    """The row after ``after`` (the rows the caller holds), not yet saved: a checkpoint
    inserts it with the rest of its step."""
    return Message(
        run=run,
        index=after[-1].index + 1 if after else 0,
        role=role,
        kind=kind,
        content=content,
        turn=turn,
        tool_use_id=tool_use_id[:120],
    )


def tool_result_block(tool_use_id: str, output: dict[str, Any]) -> dict[str, Any]:
    """What the model reads of a tool call: the T4 output as JSON, flagged when it failed."""
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": json.dumps(output, ensure_ascii=False, default=str),
        "is_error": not output.get("ok", False),
    }


def tool_use_position(rows: list[Message], tool_use_id: str) -> int:
    """Which of its turn's tool calls this one is, from 0 (-1: not found)."""
    for row in reversed(rows):
        if row.role != "assistant":
            continue
        ids = [b.get("id") for b in _blocks(row.content) if b.get("type") == "tool_use"]
        if tool_use_id in ids:
            return ids.index(tool_use_id)
    return -1


def last_tool_use(rows: list[Message], tool_use_id: str) -> dict[str, Any] | None:
    for row in reversed(rows):
        if row.role != "assistant":
            continue
        for block in _blocks(row.content):
            if block.get("type") == "tool_use" and block.get("id") == tool_use_id:
                return block
    return None
