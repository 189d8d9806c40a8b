"""What a model said, as plain values (SPEC R5, R11): the loop reads these, whichever model
produced them — the Anthropic API or the offline replay."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"]
ANTHROPIC: Final = "anthropic"
OFFLINE_REPLAY: Final = "offline replay"  # how the console labels a replayed model, always


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    """Token use as Anthropic reports it: ``input_tokens`` excludes the cache tokens, so the
    input is counted exactly once as the sum of the three (OpenTelemetry's
    ``gen_ai.usage.input_tokens`` is that sum; adding them again double-counts)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    # False when the provider reported no usage and the counts are ours (a cost from them
    # is marked estimated, SPEC O4).
    reported: bool = True

    @property
    def total_input_tokens(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


@dataclass(frozen=True)
class ModelTurn:
    stop_reason: str
    text: str
    tool_uses: tuple[ToolUse, ...]
    usage: Usage
    model: str
    label: str  # "anthropic" or "offline replay"
    request_id: str = ""
    content: tuple[dict[str, Any], ...] = field(default=(), repr=False)  # as sent back next turn


class ModelError(Exception):
    """A model call that failed for good (after bounded retries); says why."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
