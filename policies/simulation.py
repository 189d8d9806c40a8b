"""What a policy edit would change (SPEC P6): recent recorded calls decided again under the
edited policy, before it is saved."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runs.models import ToolCall

from .core.permissions import Call, Policy, decide, level_of, side_effect_of
from .models import ToolDefinition

RECENT_CALLS = 200


@dataclass(frozen=True)
class ChangedDecision:
    tool_call_id: str
    tool: str
    path: str
    started_at: Any
    before: str
    after: str
    rule: str | None
    reason: str


def policy_edit_effect(
    *, current: Policy, edited: Policy, limit: int = RECENT_CALLS
) -> tuple[int, list[ChangedDecision]]:
    """(calls looked at, the ones whose decision the edit changes), most recent first.

    Each recent call of this policy is decided under the policy as saved and as edited;
    grants are left out, so the difference is the edit's alone. Calls refused before any
    decision (bad input, escaping paths) are not looked at.
    """
    calls = list(
        ToolCall.objects.without_evals()
        .filter(policy_name=edited.name)
        .exclude(decision="")
        .order_by("-started_at")[:limit]
    )
    registry = {t.name: t for t in ToolDefinition.objects.filter(name__in={c.tool for c in calls})}
    changed = []
    for record in calls:
        tool = registry.get(record.tool)
        if tool is None:
            continue
        call = Call(
            record.tool,
            level_of(tool.permission_level),
            side_effect_of(tool.side_effect),
            record.path or None,
        )
        before, after = decide(current, call), decide(edited, call)
        if before.decision != after.decision:
            changed.append(
                ChangedDecision(
                    str(record.pk),
                    record.tool,
                    record.path,
                    record.started_at,
                    before.decision,
                    after.decision,
                    after.rule,
                    after.reason,
                )
            )
    return len(calls), changed
