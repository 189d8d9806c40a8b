"""Permission checks against the policies stored in the console (SPEC P1–P3, P6)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import F

from .config_stamp import config_changed
from .core.default_policy import DEFAULT_POLICY_NAME
from .core.paths import normalize_relative
from .core.permissions import (
    Call,
    Grant,
    LimitContext,
    Policy,
    PolicyError,
    Rule,
    Verdict,
    decide,
    level_of,
    side_effect_of,
    within_limits,
)
from .core.policy_digest import decision_digest
from .core.tool_specs import BUILTIN_TOOLS
from .core.windows import WindowError
from .models import Policy as PolicyRow
from .models import PolicyChange, PolicyRule, ToolDefinition
from .models.permissions import LIMIT_FIELDS, rule_limits
from .paths import resolve_in_workspace

PATH_ARGUMENTS = ("path", "source", "target")


def policy_load(name: str) -> Policy:
    try:
        row = PolicyRow.objects.get(name=name)
    except PolicyRow.DoesNotExist:
        raise PolicyError(f"No policy named {name!r}.") from None
    return policy_from_row(row)


def policy_from_row(row: PolicyRow) -> Policy:
    """Read afresh every time (an edit applies to the very next call), but each distinct
    rule is compiled once per process: its glob matchers are what cost."""
    rows = row.rules.order_by("order", "id").values_list(*RULE_FIELDS)
    rules = tuple(_rule(*values) for values in rows)
    return Policy(row.name, level_of(row.ceiling), rules, row.version)


RULE_FIELDS = ("key", "tool", "decision", "path", "reason", *LIMIT_FIELDS)


@functools.lru_cache(maxsize=4096)
def _rule(key: str, tool: str, decision: str, path: str, reason: str, *limits: Any) -> Rule:
    """A stored row the admin's checks did not see (a bad time zone written to the table)
    fails the policy closed, naming the rule."""
    try:
        limited = rule_limits(*limits)
    except WindowError as error:
        raise PolicyError(f"Rule {key}: {error}") from None
    return Rule(key, tool, decision, path, reason, limited)  # type: ignore[arg-type]


def _agent_policy(agent: Any) -> dict[str, Any]:
    """Which policy row governs an agent: its own, or the default."""
    return {"pk": agent.policy_id} if agent.policy_id else {"name": DEFAULT_POLICY_NAME}


def policy_row_for_agent(agent: Any) -> PolicyRow | None:
    """The agent's policy row, for its settings beside the rules (approval expiry, M of N)."""
    return PolicyRow.objects.filter(**_agent_policy(agent)).first()


def policy_for_agent(agent: Any) -> Policy:
    """The agent's policy (or the default), read as plain values: this runs before every
    tool call of every run, so no model instances are built for it."""
    lookup = _agent_policy(agent)
    row = PolicyRow.objects.filter(**lookup).values_list("pk", "name", "ceiling", "version")
    found = row.first()
    if found is None:
        raise PolicyError(f"No policy {lookup.get('name', lookup.get('pk'))!r}.")
    pk, name, ceiling, version = found
    rows = PolicyRule.objects.filter(policy_id=pk).order_by("order", "id")
    rules = tuple(_rule(*values) for values in rows.values_list(*RULE_FIELDS))
    return Policy(name, level_of(ceiling), rules, version)


def policy_decision_digest(row: PolicyRow) -> str:
    """The digest of what the stored policy decides (``core.policy_digest``); a policy whose
    rules cannot be read has none that an edit could keep ("")."""
    try:
        stored = PolicyRow.objects.get(pk=row.pk)  # as saved, not as a form has it in hand
        policy = policy_from_row(stored)
    except (PolicyError, PolicyRow.DoesNotExist):
        return ""
    return decision_digest(policy, approvals_required=stored.l3_approvals_required)


def policy_bump_version(*, policy: PolicyRow) -> None:
    """A new version, which decisions record and approvals bind to, marked on the
    dashboards' time axis (PolicyChange)."""
    with transaction.atomic():
        PolicyRow.objects.filter(pk=policy.pk).update(version=F("version") + 1)
        policy.refresh_from_db(fields=["version"])
        PolicyChange.objects.create(policy=policy, version=policy.version)
        config_changed()


def parse_arguments(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise PolicyError(
            f"The arguments are not valid JSON: {error.msg} at {error.pos}."
        ) from None
    if not isinstance(value, dict):
        raise PolicyError("The arguments must be a JSON object.")
    return value


def permission_check(
    *,
    policy: Policy,
    tool: str,
    path: str | None = None,
    arguments: dict[str, Any] | None = None,
    workspace_root: Path | str | None = None,
    grants: Sequence[Grant] = (),
    limits: LimitContext | None = None,
) -> Verdict:
    """Look the tool up, resolve its path (inside the workspace when one is given), decide,
    and then (given ``limits``) apply the deciding rule's window and rate.

    A path that escapes is refused before any rule is matched (PathRefused propagates).
    """
    registered = ToolDefinition.objects.filter(name=tool).first()
    spec = BUILTIN_TOOLS.get(tool)
    if registered is None and spec is None:
        raise PolicyError(
            f"Unknown tool {tool!r}; built-in tools are {', '.join(sorted(BUILTIN_TOOLS))}."
        )
    if registered is not None:
        level, side_effect = (
            level_of(registered.permission_level),
            side_effect_of(registered.side_effect),
        )
    else:
        assert spec is not None
        level, side_effect = spec.level, spec.side_effect
    raw = path
    if raw is None and arguments:
        raw = next((arguments[k] for k in PATH_ARGUMENTS if k in arguments), None)
    resolved: str | None = None
    if raw is not None:
        resolved = (
            resolve_in_workspace(workspace_root, raw).relative
            if workspace_root
            else normalize_relative(raw)
        )
    verdict = decide(policy, Call(tool, level, side_effect, resolved), grants)
    return within_limits(policy, verdict, limits) if limits is not None else verdict


def verdict_report(verdict: Verdict) -> dict[str, Any]:
    return {
        "decision": verdict.decision,
        "human_only": verdict.human_only,
        "rule": verdict.rule,
        "reason": verdict.reason,
        "considered": [
            {"rule": c.rule_id, "matched": c.matched, "why": c.why} for c in verdict.considered
        ],
        "limits": [
            {
                "check": limit.check,
                "rule": limit.rule,
                "held": limit.held,
                "detail": limit.detail,
                "turned": limit.turned,
            }
            for limit in verdict.limits
        ],
    }
