"""Why runs fail, grouped into a few kinds for the Pareto chart (SPEC O6).

A run's failure reason is a sentence written where it failed (``approval expired: …``,
``model call failed: …``); the kind is read from how that sentence begins, so the
dashboards can count reasons without parsing free text at query time. The kind is stored
with the run when it fails.
"""

from __future__ import annotations

import re
from typing import Final

OTHER: Final = "other"

# (kind, label, pattern): the first pattern that matches the reason's start wins.
KINDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("cancelled", "Cancelled", r"cancelled by "),
    ("rejected", "Approval rejected", r"rejected by "),
    ("approval_expired", "Approval expired", r"approval expired"),
    ("model_error", "Model call failed", r"model call failed|ANTHROPIC_API_KEY|the replay script"),
    ("max_turns", "Turn limit reached", r"max_turns"),
    ("model_stopped", "Model stopped early", r"the model('s answer was cut| stopped)"),
    ("tool_failed", "Tool call failed", r"tool call .* failed"),
    ("verification", "Verification failed", r"verification failed"),
    ("intake", "Intake refused", r"intake refused"),
    ("hook", "Halted by a hook", r"halted by the "),
    ("commit_refused", "Commit refused by policy", r"committing .* is refused"),
    ("commit_failed", "Commit failed", r"committing .* failed"),
    ("abandoned", "Workers kept stopping", r"abandoned after"),
    ("internal", "Internal error", r"internal error"),
)
LABELS: Final[dict[str, str]] = {kind: label for kind, label, _ in KINDS} | {OTHER: "Other"}
_PATTERNS: Final = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, _, pattern in KINDS)


def failure_kind(reason: str) -> str:
    """The kind of a failure reason; ``other`` when no known beginning matches."""
    text = reason.strip()
    for kind, pattern in _PATTERNS:
        if pattern.match(text):
            return kind
    return OTHER
