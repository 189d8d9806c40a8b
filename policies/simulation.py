"""What a policy edit would change (SPEC P6, B16): recent recorded calls decided again under
the edited policy, and the pending requests a new version would invalidate, before it is
saved."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from approvals.models import ApprovalRequest
from runs.models import ToolCall

from .core.default_policy import DEFAULT_POLICY_NAME
from .core.permissions import LimitContext, Policy, decide_paths, level_of, side_effect_of
from .models import Policy as PolicyRow
from .models import ToolDefinition
from .rate_limits import sliding_count

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


class Replayed:
    """The rate limiter over recorded calls, replayed oldest first: the same sliding minute
    as the live limiter (``rate_limits.sliding_count``), over the calls replayed before."""

    def __init__(self) -> None:
        self._counts: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.now: datetime | None = None

    def exceeded(self, key: str, limit: int) -> bool:
        assert self.now is not None
        minutes = self.now.timestamp() / 60
        minute = math.floor(minutes)
        current, previous = self._counts[key, minute], self._counts[key, minute - 1]
        if sliding_count(current, previous, 1 - (minutes - minute)) >= limit:
            return True
        self._counts[key, minute] += 1
        return False


def policy_edit_effect(
    *, current: Policy, edited: Policy, limit: int = RECENT_CALLS
) -> tuple[int, list[ChangedDecision]]:
    """(calls looked at, the ones whose decision the edit changes), most recent first.

    Each recent call of this policy is decided under the policy as saved and as edited,
    at the time it was made (its rule's change window) and against the calls before it
    (its rule's rate, per run, agent or workspace as the rule counts); grants are left
    out, so the difference is the edit's alone. Calls refused before any decision (bad
    input, escaping paths, the task's boundaries, a hook) are not looked at.
    """
    calls = list(
        ToolCall.objects.without_evals()
        .filter(policy_name=edited.name)
        .exclude(decision="")
        .select_related("run")
        .order_by("-started_at")[:limit]
    )
    registry = {t.name: t for t in ToolDefinition.objects.filter(name__in={c.tool for c in calls})}
    # A call refused before the policy was asked (the task's boundaries, a hook) says so by
    # its rule: no rule of either version. Live, it never reached the policy or a rate.
    rules = {rule.id for rule in (*current.rules, *edited.rules)}
    replays, looked = (Replayed(), Replayed()), 0
    changed = []
    for record in reversed(calls):  # oldest first, so each rate sees the calls before it
        tool = registry.get(record.tool)
        if tool is None or (record.rule and record.rule not in rules):
            continue
        looked += 1
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
    return looked, changed[::-1]


PENDING_SHOWN = 50


def pending_bound(row: PolicyRow) -> tuple[int, list[ApprovalRequest]]:
    """(how many, the oldest few) of the pending requests bound to this policy's version:
    those a saved edit that changes a decision invalidates and asks again (B16). A request
    is bound to the policy of its run's agent, the default one for an agent with none."""
    governed = Q(run__agent__policy=row)
    if row.name == DEFAULT_POLICY_NAME:
        governed |= Q(run__agent__policy__isnull=True)
    pending = (
        ApprovalRequest.objects.without_evals()
        .filter(governed, status=ApprovalRequest.Status.PENDING, policy_version__isnull=False)
        .select_related("run")
        .order_by("requested_at")
    )
    return pending.count(), list(pending[:PENDING_SHOWN])
