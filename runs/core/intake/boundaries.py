"""What a task may touch and whether a person must approve it (SPEC P3).

Least privilege by intent: a question reads, an edit writes only the files it names, and
only the tools the intent needs are offered. Approval follows the intent and is raised by
risk; nothing the requester claims lowers it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from policies.core.permissions import glob_matcher
from policies.core.tool_specs import SHELL_TOOL

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
_PATH_ROLES: Final = _WRITING_ROLES | {"reference"}  # every role that names a file
# No intent includes the raw shell (SPEC T9): only a task that needs a command run has it,
# and then every call of it asks a person to type the command (L3, human only).


def task_boundaries(
    intent: Intent,
    parameters: tuple[Parameter, ...],
    available_tools: Sequence[str],
    *,
    needs_command: bool = False,
) -> Boundaries:
    """Least privilege: write only the files the task names, use only the tools it needs;
    the shell only for a task that needs a command run."""
    writes: list[str] = []
    if intent not in {"question", "unknown"}:
        for p in parameters:
            if p.name in _WRITING_ROLES and p.value not in writes:
                writes.append(p.value)
    tools = TOOLS[intent] + ((SHELL_TOOL,) if needs_command else ())
    if available_tools:
        tools = tuple(t for t in tools if t in set(available_tools))
    return Boundaries(("**",), tuple(writes), tools)


def task_paths(task: Mapping[str, Any]) -> tuple[str, ...]:
    """The paths a structured task (as stored) names: the files and folders it reads or
    writes by name, which scope its instruction files (SPEC C5). Reads anywhere (``**``)
    name nothing: a question about one file is scoped to that file's folders."""
    named: list[str] = []
    for parameter in task.get("parameters") or ():
        if parameter.get("name") in _PATH_ROLES and parameter.get("value"):
            named.append(str(parameter["value"]))
    bounds = task.get("boundaries") or {}
    named += [str(p) for p in bounds.get("write_paths") or ()]
    named += [str(p) for p in bounds.get("read_paths") or () if p != "**"]
    return tuple(dict.fromkeys(named))


def side_effect_outside(
    task: Mapping[str, Any],
    tool: str,
    side_effect: str,
    paths: Sequence[str] | None = None,
) -> str | None:
    """The boundary of a tool outside the built-in list (an MCP tool), by its side effect:
    a task that changes no files (a question; no write paths) uses only tools that have
    none, whatever the server's tool is called; a task that does may change, through a
    server that serves its workspace (``paths``, relative to it), only the files it names.
    None when the boundary lets it through."""
    bounds = task.get("boundaries") or {}
    writes = tuple(bounds.get("write_paths") or ())
    if side_effect == "none":
        return None
    if not writes:
        intent = task.get("intent", "unknown")
        return (
            f"{tool} may change things ({side_effect}), and this {intent} task is read-only: "
            "it changes no files"
        )
    outside = [
        p for p in paths or () if not any(glob_matcher(w, ignore_case=False)(p) for w in writes)
    ]
    if outside:
        return (
            f"{', '.join(outside)} is outside this task's boundaries: it may change "
            f"{', '.join(writes)}"
        )
    return None


_INTENT_APPROVAL: Final[dict[Intent, str]] = {
    "delete": "deleting a file needs a person's strong confirmation",
    "rename": "renaming a file needs a person's strong confirmation",
    "publish": "publishing always needs a person",
    "doc_update": "changing a file needs a person to confirm the diff",
    "code_change": "changing a file needs a person to confirm the diff",
}


def approval_decision(
    intent: Intent, risk: RiskAssessment, *, needs_command: bool = False
) -> ApprovalDecision:
    """SPEC P3 by intent, raised by risk; never lowered by anything the requester claims."""
    reasons = [_INTENT_APPROVAL[intent]] if intent in _INTENT_APPROVAL else []
    if needs_command:
        reasons.append("running a command needs a person to type it (L3, strong confirmation)")
    if risk.level in {"high", "critical"}:
        features = ", ".join(f.feature for f in risk.factors)
        reasons.append(f"risk {risk.level}: {features}")
    if reasons:
        return ApprovalDecision(True, "; ".join(reasons))
    return ApprovalDecision(False, f"read-only task at risk {risk.level}: reading is automatic")
