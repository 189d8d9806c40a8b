"""What about a policy decides (B16): a digest that changes only when some call could be
decided differently.

Approvals bind to the policy's version, so a version that moved for an edit of wording
invalidates every pending request for nothing. The digest reads a policy as the engine
does (:func:`.permissions.decide`): the ceiling; the deny rules as a set, since a matching
deny wins wherever it stands; and the other rules in order, since the first that matches
decides — but two of them that can never match one call, or that decide alike, may trade
places without changing any decision, so their order is read in a normal form (the least
arrangement reachable by such swaps). Reasons, rule names (but for a rate, whose counter is
kept by name) and the limits of a deny (which cannot turn anything stricter) are not read.

Overlap is judged conservatively: two patterns are taken to meet unless one of them names a
single tool or path that the other does not match. A reordering the digest cannot prove
harmless counts as a change — a version too many, never one too few.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final

from .permissions import Policy, Rule, RuleLimits

_TOOL_WILDCARDS: Final = frozenset("*?[{!")
_PATH_WILDCARDS: Final = frozenset("*?[{!@+(")
# Past this many rules the normal form (quadratic in swaps, per rule) is not sought: the
# order is read as it stands.
_NORMALISED_UP_TO: Final = 400


def decision_digest(policy: Policy, *, approvals_required: int = 1) -> str:
    """A hex digest equal for two policies that decide every call alike (as far as can be
    told without trying every call), and for ``approvals_required`` (M of N, A4) alike."""
    denies = sorted({(rule.tool, rule.path) for rule in policy.rules if rule.decision == "deny"})
    others = [rule for rule in policy.rules if rule.decision != "deny"]
    body = {
        "ceiling": policy.ceiling,
        "approvals_required": approvals_required,
        "deny": denies,
        "rules": [_form(rule) for rule in _normal_order(others)],
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _form(rule: Rule) -> list[Any]:
    """What of a non-deny rule decides: when it matches, and what it then says."""
    return [rule.tool, rule.path, *_outcome(rule)]


def _outcome(rule: Rule) -> tuple[Any, ...]:
    """What a rule decides once it matches: its decision and, if any, its limits."""
    return (rule.decision, _limits(rule.limits, rule.id))


def _limits(limits: RuleLimits | None, key: str) -> list[Any] | None:
    if limits is None or (limits.window is None and limits.per_minute == 0):
        return None
    window = limits.window
    when = (
        None
        if window is None
        else [
            sorted(window.days),
            window.start.isoformat(),
            window.until.isoformat(),
            window.zone.key,
            sorted(day.isoformat() for day in window.excluded),
            limits.outside,
        ]
    )
    rate = None if limits.per_minute == 0 else [limits.per_minute, limits.scope, limits.over, key]
    return [when, rate]


def _normal_order(rules: Sequence[Rule]) -> list[Rule]:
    """The least order (by each rule's form) reachable by swapping neighbours that are
    :func:`_independent`: each step takes the least rule that no rule still before it
    depends on, which gives one order for every arrangement the swaps connect."""
    if len(rules) > _NORMALISED_UP_TO:
        return list(rules)
    remaining = [(json.dumps(_form(rule), default=str), rule) for rule in rules]
    ordered: list[Rule] = []
    while remaining:
        free = (
            index
            for index, (_, rule) in enumerate(remaining)
            if all(_independent(earlier, rule) for _, earlier in remaining[:index])
        )
        pick = min(free, key=lambda index: remaining[index][0])
        ordered.append(remaining.pop(pick)[1])
    return ordered


def _independent(first: Rule, second: Rule) -> bool:
    """Whether the two may trade places without changing a decision: they decide alike, or
    no call matches both."""
    if _outcome(first) == _outcome(second):
        return True
    return _tools_apart(first, second) or _paths_apart(first, second)


def _tools_apart(first: Rule, second: Rule) -> bool:
    a, b = first.tool, second.tool
    a_plain, b_plain = not (_TOOL_WILDCARDS & set(a)), not (_TOOL_WILDCARDS & set(b))
    if a_plain and b_plain:
        return a != b
    if a_plain:
        return not second.matches_tool(a)
    if b_plain:
        return not first.matches_tool(b)
    return False


def _paths_apart(first: Rule, second: Rule) -> bool:
    """An empty path matches every call, with a path or without; a literal path only that
    path (non-deny rules match exactly, case and all)."""
    a, b = first.path, second.path
    if not a or not b:
        return False
    a_plain, b_plain = not (_PATH_WILDCARDS & set(a)), not (_PATH_WILDCARDS & set(b))
    if a_plain and b_plain:
        return not (first.matches_path(b) or second.matches_path(a))
    if a_plain:
        return not second.matches_path(a)
    if b_plain:
        return not first.matches_path(b)
    return False
