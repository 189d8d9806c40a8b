"""What a task may touch and whether a person must approve it (SPEC P3).

Least privilege by intent: a question reads, an edit writes only the files it names, and
only the tools the intent needs are offered. Approval follows the intent and is raised by
risk; nothing the requester claims lowers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .risk import RiskAssessment
from .task import ApprovalDecision, Boundaries, Intent, Parameter

_READ_TOOLS: Final = ("readSource", "glob", "grep", "searchDocs")
_EDIT_TOOLS: Final = (
    *_READ_TOOLS,
    "createDraft",
    "patchDraft",
    "runValidation",
    "requestApproval",
    "commitDraft",
)
TOOLS: Final[dict[Intent, tuple[str, ...]]] = {
    "question": _READ_TOOLS,
    "doc_update": _EDIT_TOOLS,
    "code_change": _EDIT_TOOLS,
    "delete": (*_READ_TOOLS, "deleteFile", "requestApproval"),
    "rename": (*_READ_TOOLS, "renameFile", "requestApproval"),
    "publish": (*_READ_TOOLS, "runValidation", "requestApproval", "publish"),
    "unknown": _READ_TOOLS,
}
_WRITING_ROLES: Final = frozenset({"path", "source", "target"})


def task_boundaries(
    intent: Intent, parameters: tuple[Parameter, ...], available_tools: Sequence[str]
) -> Boundaries:
    """Least privilege: write only the files the task names, use only the tools it needs."""
    writes: list[str] = []
    if intent not in {"question", "unknown"}:
        for p in parameters:
            if p.name in _WRITING_ROLES and p.value not in writes:
                writes.append(p.value)
    tools = TOOLS[intent]
    if available_tools:
        tools = tuple(t for t in tools if t in set(available_tools))
    return Boundaries(("**",), tuple(writes), tools)


_INTENT_APPROVAL: Final[dict[Intent, str]] = {
    "delete": "deleting a file needs a person's strong confirmation",
    "rename": "renaming a file needs a person's strong confirmation",
    "publish": "publishing always needs a person",
    "doc_update": "changing a file needs a person to confirm the diff",
    "code_change": "changing a file needs a person to confirm the diff",
}


def approval_decision(intent: Intent, risk: RiskAssessment) -> ApprovalDecision:
    """SPEC P3 by intent, raised by risk; never lowered by anything the requester claims."""
    reasons = [_INTENT_APPROVAL[intent]] if intent in _INTENT_APPROVAL else []
    if risk.level in {"high", "critical"}:
        features = ", ".join(f.feature for f in risk.factors)
        reasons.append(f"risk {risk.level}: {features}")
    if reasons:
        return ApprovalDecision(True, "; ".join(reasons))
    return ApprovalDecision(False, f"read-only task at risk {risk.level}: reading is automatic")
