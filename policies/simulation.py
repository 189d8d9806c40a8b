"""What a policy edit would change (SPEC P6): recent recorded calls decided again under the
edited policy, before it is saved."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runs.models import ToolCall

from .core.permissions import LimitContext, Policy, decide_paths, level_of, side_effect_of
from .models import ToolDefinition

RECENT_CALLS = 200
_MINUTE = timedelta(seconds=60)


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


class Replayed:
    """The rate limiter over recorded calls, exactly: the calls each key let through in
    the sixty seconds before each call, counted as the calls are replayed oldest first."""

    def __init__(self) -> None:
        self._times: defaultdict[str, deque[datetime]] = defaultdict(deque)
        self.now: datetime | None = None

    def exceeded(self, key: str, limit: int) -> bool:
        assert self.now is not None
        times = self._times[key]
        while times and times[0] <= self.now - _MINUTE:
            times.popleft()
        if len(times) >= limit:
            return True
        times.append(self.now)
        return False


def policy_edit_effect(
    *, current: Policy, edited: Policy, limit: int = RECENT_CALLS
) -> tuple[int, list[ChangedDecision]]:
    """(calls looked at, the ones whose decision the edit changes), most recent first.

    Each recent call of this policy is decided under the policy as saved and as edited,
    at the time it was made (its rule's change window) and against the calls before it
    (its rule's rate, per run, agent or workspace as the rule counts); grants are left
    out, so the difference is the edit's alone. Calls refused before any decision (bad
    input, escaping paths) are not looked at.
    """
    calls = list(
        ToolCall.objects.without_evals()
        .filter(policy_name=edited.name)
        .exclude(decision="")
        .select_related("run")
        .order_by("-started_at")[:limit]
    )
    registry = {t.name: t for t in ToolDefinition.objects.filter(name__in={c.tool for c in calls})}
    replays = Replayed(), Replayed()
    changed = []
    for record in reversed(calls):  # oldest first, so each rate sees the calls before it
        tool = registry.get(record.tool)
        if tool is None:
            continue
        verdicts = []
        for policy, replay in zip((current, edited), replays, strict=True):
            replay.now = record.started_at
            scope = {"workspace": str(record.workspace_id)}
            if record.run is not None:
                scope |= {"run": str(record.run_id), "agent": str(record.run.agent_id)}
            verdicts.append(
                decide_paths(
                    policy,
                    record.tool,
                    level_of(tool.permission_level),
                    side_effect_of(tool.side_effect),
                    [record.path] if record.path else [],
                    limits=LimitContext(record.started_at, scope, replay.exceeded),
                )
            )
        before, after = verdicts
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
    return len(calls), changed[::-1]
