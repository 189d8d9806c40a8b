"""What one model turn's prompt held, layer by layer (B12), as the JSON kept with the turn:
each system layer's tokens against its budget with what it dropped or cut and why, the
tool definitions, and the conversation as compaction left it (its tier, what it
summarized or dropped) against the thresholds in force. Pure: the worker hands in the
assembly it sent and the compaction of this turn.

Kept per turn although the system layers change only when a run is claimed again: a
run taken over after an edit of its instructions is prompted with the new files, and the
turn says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from policies.core.assembler import LayerResult

from .compaction import Compacted

MAX_DROPPED: Final = 20  # per layer and turn: the inspection lists them all once

# The layer that is the task itself: it is the conversation's first message, not part of
# the system prompt, so it is counted there.
IN_CONVERSATION: Final = "task_state"


def layer_figures(layers: Iterable[LayerResult]) -> list[dict[str, Any]]:
    """The system prompt's layers as sent: name, tokens, budget, and, when there are, the
    units cut (``truncated``) and the units dropped with each one's reason (``dropped``,
    the first twenty, of ``dropped_count``). A layer that cut and dropped nothing says so
    by leaving them out: most layers of most turns, kept with every turn of every run."""
    figures = []
    for layer in layers:
        if layer.name == IN_CONVERSATION:
            continue
        figure: dict[str, Any] = {
            "name": layer.name,
            "tokens": layer.tokens,
            "budget": layer.budget,
        }
        if truncated := [k.source_id for k in layer.kept if k.truncated]:
            figure["truncated"] = truncated
        if dropped := list(layer.dropped):
            figure["dropped"] = [
                {"source": d.source_id, "tokens": d.tokens, "reason": d.reason}
                for d in dropped[:MAX_DROPPED]
            ]
            figure["dropped_count"] = len(dropped)
        figures.append(figure)
    return figures


def turn_context(
    layers: list[dict[str, Any]],
    compacted: Compacted,
    *,
    whole_tokens: int,
    summary_tokens: int,
    tools: int,
    tool_tokens: int,
) -> dict[str, Any]:
    """One turn's record: the layers (from :func:`layer_figures`), the tool definitions
    offered and their estimated tokens, and the conversation after compaction."""
    return {
        "layers": layers,
        "tools": {"count": tools, "tokens": tool_tokens},
        "conversation": {
            "tokens": compacted.tokens_after,
            "tokens_before": compacted.tokens_before,
            "messages": len(compacted.messages),
            "tier": compacted.tier,
            "summarized_turns": len(compacted.summarized),
            "dropped_turns": len(compacted.dropped),
            "whole_tokens": whole_tokens,
            "summary_tokens": summary_tokens,
        },
    }
