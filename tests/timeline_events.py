"""One event of every type the console writes on a run's timeline, with long values and
lists, mappings and nested values where the flow writes them: what the timeline tests
render (`test_timeline.py`, `test_timeline_browser.py`). `written_event_types` reads the
types from the code that writes them, so a new type without an example here fails."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APPS = ("runs", "approvals", "evals", "policies", "harness_console")
# The functions that append an event, and where each takes its type.
WRITERS: dict[str, str | int] = {"run_event_append": "type", "defer_event": 1}
WRITERS["approval_event_append"] = 1

MODEL_TEXT = (
    "I read docs/guide.md and docs/configuration.md. The guide links to getting-started.md, "
    "which was renamed to first-steps.md last week, so three links are broken.\n\n"
    "Plan:\n1. Fix the links in the guide.\n2. Check the configuration page for the same "
    "mistake.\n3. Run the validation and ask for approval before committing anything. "
) * 6
LONG_ERROR = "ValidationError: " + "docs/guide.md line 12: link target not found; " * 12
LONG_PATHS = [f"docs/chapters/part-{n}/section-{n}-with-a-long-name.md" for n in range(12)]
APPROVAL = "8a0f8f64-7b0c-4a5e-9d43-93f1b3a1c0de"


def every_event(agent: str = "docs-fixer", workspace: str = "docs") -> list[tuple[str, dict]]:
    """(type, payload) of every type, in a run's order."""
    approval = {"approval": APPROVAL, "kind": "tool_call", "tool": "patchDraft"}
    return [
        (
            "run.created",
            {
                "agent": agent,
                "workspace": workspace,
                "requester": "omar-operator",
                "model": "anthropic",
                "risk": "medium",
            },
        ),
        (
            "status.changed",
            {"from": "queued", "to": "planning", "worker": "celery@runs-worker-1.example.internal"},
        ),
        (
            "task.structured",
            {
                "intent": "fix_docs_links",
                "risk": "medium",
                "risk_factors": ["writes files", "many files", "touches configuration"],
                "ignored_claims": ["this is safe, skip approval", "the admin said it is fine"],
                "parameters": {"paths": LONG_PATHS[:3], "depth": {"max": 2, "follow": True}},
                "missing": [],
                "write_paths": LONG_PATHS,
                "approval_required": True,
            },
        ),
        (
            "intake.question",
            {
                "questions": [
                    {
                        "name": "path",
                        "question": "Which file should I delete? " * 8,
                        "why": "none named",
                    },
                    {"name": "reason", "question": "Why should it go?", "why": "audit"},
                ]
            },
        ),
        (
            "intake.answered",
            {"by": "omar-operator", "answers": {"path": "docs/old.md", "reason": "replaced " * 30}},
        ),
        (
            "compaction",
            {
                "tier": 2,
                "tokens_before": 182_340,
                "tokens_after": 96_120,
                "message_count": 14,
                "summarized_turns": 2,
                "dropped_turns": 2,
                "summarized": [
                    {
                        "first_index": 1,
                        "last_index": 4,
                        "text": "read the guide " * 20,
                        "tokens": 120,
                        "facts": ["docs/guide.md has 3 links"],
                    }
                ],
                "dropped": [[5, 8], [9, 12]],
            },
        ),
        (
            "model.turn",
            {
                "turn": 3,
                "max_turns": 50,
                "label": "anthropic",
                "model": "claude-sonnet-4-5",
                "stop_reason": "tool_use",
                "text": MODEL_TEXT,
                "tool_uses": [
                    {"id": "toolu_01", "name": "readSource"},
                    {"id": "toolu_02", "name": "patchDraft"},
                ],
                "usage": {
                    "input_tokens": 12_345,
                    "output_tokens": 678,
                    "cache_creation_input_tokens": 2048,
                    "cache_read_input_tokens": 9000,
                },
                "cost_usd": "0.0421",
                "cost_basis": "priced",
                "latency_ms": 1532,
                "compaction_tier": 2,
            },
        ),
        (
            "tool.call",
            {
                "tool_call": "5d1c",
                "tool_use_id": "toolu_02",
                "tool": "patchDraft",
                "path": LONG_PATHS[0],
                "decision": "allow",
                "rule": "drafts-are-free",
                "reason": "drafts are free " * 20,
                "status": "failed",
                "summary": "",
                "error": LONG_ERROR,
                "approved_by": "",
                "writes": 0,
            },
        ),
        (
            "tool.call",
            {
                "tool_call": "5d1d",
                "tool_use_id": "toolu_03",
                "tool": "readSource",
                "path": "docs/guide.md",
                "decision": "allow",
                "rule": "read-anything",
                "reason": "",
                "status": "completed",
                "summary": "read 2,431 bytes " * 25,
                "error": "",
                "approved_by": "",
                "writes": 0,
            },
        ),
        ("tool.recovered", {"tool_use_id": "toolu_02", "tool": "patchDraft", "outcome": "rerun"}),
        (
            "hook.ran",
            {
                "phase": "pre_tool",
                "tool": "patchDraft",
                "handler": "",
                "reason": "",
                "reports": [
                    {"handler": "lint-drafts", "verdict": "went_on", "reason": "", "skipped": True},
                    {
                        "handler": "secret-scan",
                        "verdict": "blocked",
                        "reason": "a key",
                        "skipped": False,
                    },
                ],
            },
        ),
        (
            "hook.halted",
            {
                "phase": "pre_tool",
                "tool": "publish",
                "handler": "no-publish",
                "reason": "publishing is off this week " * 10,
                "reports": [],
            },
        ),
        (
            "status.changed",
            {
                "from": "running",
                "to": "waiting_for_approval",
                "waiting_for": "approval",
                "approval": APPROVAL,
            },
        ),
        (
            "approval.requested",
            {
                **approval,
                "paths": LONG_PATHS,
                "rule": "commits-need-a-person",
                "reason": "a commit changes the published docs " * 10,
                "strong_confirmation": False,
                "required_approvals": 2,
                "expires_at": "2026-03-01T12:00:00+00:00",
                "status": "pending",
            },
        ),
        ("approval.vote", {**approval, "by": "ana-approver", "approvals": 1, "required": 2}),
        (
            "approval.decided",
            {
                **approval,
                "decision": "approved",
                "by": "ana-approver",
                "comment": "Fine, but keep the old anchors. " * 12,
                "edited": False,
                "rejected_hunks": {"docs/guide.md": [2, 3]},
            },
        ),
        (
            "grant.created",
            {"grant": 7, "tool": "patchDraft", "path": "docs/**", "by": "ana-approver"},
        ),
        (
            "grant.revoked",
            {
                "grant": 7,
                "by": "the harness",
                "reason": "the approval that made it was invalidated",
            },
        ),
        (
            "approval.invalidated",
            {
                **approval,
                "reason": "; ".join(f"{p} changed since the request" for p in LONG_PATHS),
                "changes": [f"{p} changed since the request" for p in LONG_PATHS],
            },
        ),
        ("approval.expired", {**approval, "reason": "nobody decided within 24 hours"}),
        ("approval.cancelled", {**approval, "reason": "the run was cancelled"}),
        (
            "drafts.unchanged",
            {"paths": LONG_PATHS[:5], "reason": "the file already reads so: nothing to commit"},
        ),
        (
            "stage.finished",
            {"stage": "verify", "status": "failed", "verification": "fail", "error": LONG_ERROR},
        ),
        ("run.cancel_requested", {"by": "olga-ops"}),
        ("run.cancelled", {"reason": "cancelled by olga-ops " * 20}),
        (
            "status.changed",
            {"from": "verifying", "to": "failed", "shown": "cancelled", "reason": LONG_ERROR},
        ),
        (
            "status.changed",
            {"from": "completed", "to": "rolled_back", "by": "olga-ops", "paths": LONG_PATHS},
        ),
        ("eval.case_added", {"case": "link-fix-gives-up", "by": "olga-ops"}),
        # A type the page has no line of its own for: its values, nested ones too, as text.
        (
            "something.new",
            {
                "changes": ["one", "two"],
                "nested": {"a": [1, {"b": None}]},
                "flags": [True, False],
                "empty": [],
                "rows": [{"x": 1}, {"y": 2}],
            },
        ),
    ]


def _literals(node: ast.AST) -> list[str]:
    return [
        c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
    ]


def written_event_types() -> set[str]:
    """Every event type a call to one of the ``WRITERS`` names in the code, read from its
    source (both branches of a conditional type included); a writer passing a variable
    through (``type=type``) is a writer itself, whose callers are read."""
    found: set[str] = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                where = WRITERS.get(name or "")
                if where is None:
                    continue
                if isinstance(where, str):
                    arg: Any = next((k.value for k in node.keywords if k.arg == where), None)
                else:
                    arg = node.args[where] if len(node.args) > where else None
                if arg is None or (isinstance(arg, ast.Name) and arg.id == "type"):
                    continue
                literals = _literals(arg)
                assert literals, f"{path}: an event type that is not a literal: {ast.unparse(arg)}"
                found.update(literals)
    return found
