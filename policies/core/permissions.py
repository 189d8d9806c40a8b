"""The permission engine of SPEC P1–P4, P6: a pure function from a policy, a tool call and
the run's grants to a verdict that says which rule decided and why.

Order of the checks:

1. **Level ceiling** (P1): a tool above the policy's ceiling is denied, whatever the rules.
2. **Rules** (P2): every rule is considered; a matching ``deny`` wins wherever it stands;
   otherwise the first matching rule in order decides (``allow``, ``ask``, ``ask_strong``).
   No rule matching is a deny: a policy allows only what it names.
3. **Human only** (P3): a tool whose side effect is a production change (publish, deploy,
   send email) is never allowed without a person: an ``allow`` becomes ``ask``, and no grant
   stands in for the person.
4. **Grants** (P4): an ``ask`` that an approver remembered for this run (same tool, a path
   inside the remembered pattern) becomes ``allow``. ``ask_strong`` is asked every time.
5. **Limits** (B6), of the rule that decided: outside its change window, or over its rate
   limit (calls a minute per run, agent or workspace), the decision turns into the ``ask``
   or ``deny`` the rule names, never into anything less strict. Given the time and a
   counter (:class:`LimitContext`), :func:`decide_paths` applies them; the counter counts
   only a call the rate lets through, so refused calls never use the limit up.

Globs come from wcmatch (``**`` spans folders). Deny patterns match case-insensitively, so
``Config/x`` cannot slip past a deny of ``config/**``; allow patterns match exactly. A
folder's glob ``X/**`` names ``X`` itself too (listing ``secrets`` is reading what is in
it), and the root ``.`` is named only by a glob of stars (``**``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import Final, Literal, get_args

from wcmatch import fnmatch, glob

from .paths import ROOT
from .windows import Weekly

Decision = Literal["allow", "ask", "ask_strong", "deny"]
DECISIONS: Final[tuple[Decision, ...]] = get_args(Decision)
Level = Literal["L1", "L2", "L3"]
LEVELS: Final[tuple[Level, ...]] = get_args(Level)
SideEffect = Literal["none", "filesystem_write", "external_api", "production_change"]
SIDE_EFFECTS: Final[tuple[SideEffect, ...]] = get_args(SideEffect)
LimitTurn = Literal["ask", "deny"]
LIMIT_TURNS: Final[tuple[LimitTurn, ...]] = get_args(LimitTurn)
RateScope = Literal["run", "agent", "workspace"]
RATE_SCOPES: Final[tuple[RateScope, ...]] = get_args(RateScope)

_GLOB_FLAGS: Final = glob.GLOBSTAR | glob.DOTGLOB | glob.BRACE
_TOOL_FLAGS: Final = fnmatch.BRACE


_FOLDER_SUFFIXES: Final = ("/**/*", "/**")


def glob_matcher(
    pattern: str, *, ignore_case: bool, forbids: bool = False
) -> Callable[[str], bool]:
    """Whether a resolved path is named by ``pattern``: the glob itself, the folder ``X``
    of an ``X/**``, and the root (``.``) only for a pattern of stars. A pattern that
    ``forbids`` (a deny, a forbidden path) also covers what is under what it names: a
    forbidden ``secrets`` forbids ``secrets/key.txt``."""
    flags = _GLOB_FLAGS | (glob.IGNORECASE if ignore_case else 0)
    matchers = [glob.compile(pattern, flags=flags)]
    for suffix in _FOLDER_SUFFIXES:
        if pattern.endswith(suffix) and pattern[: -len(suffix)]:
            matchers.append(glob.compile(pattern[: -len(suffix)], flags=flags))
            break
    else:
        if forbids and pattern.strip("*/"):
            base = pattern.rstrip("/")
            matchers += [glob.compile(base, flags=flags), glob.compile(base + "/**", flags=flags)]
    names_root = pattern.strip("*/") == ""

    def matches(path: str) -> bool:
        if path == ROOT:
            return names_root
        return any(m.match(path) for m in matchers)

    return matches


class PolicyError(ValueError):
    """A malformed rule or call; the message says which field and why."""


def level_of(value: str) -> Level:
    """A level read from a row or a form, checked: L1, L2 or L3."""
    for level in LEVELS:
        if value == level:
            return level
    raise PolicyError(f"{value!r} is not a permission level; levels are {', '.join(LEVELS)}.")


def side_effect_of(value: str) -> SideEffect:
    for side_effect in SIDE_EFFECTS:
        if value == side_effect:
            return side_effect
    raise PolicyError(f"{value!r} is not a side effect; they are {', '.join(SIDE_EFFECTS)}.")


def decision_of(value: str) -> Decision:
    for decision in DECISIONS:
        if value == decision:
            return decision
    raise PolicyError(f"{value!r} is not a decision; decisions are {', '.join(DECISIONS)}.")


@dataclass(frozen=True)
class RuleLimits:
    """When and how often a rule's decision holds: inside ``window`` (None: always), and
    up to ``per_minute`` calls in any sixty seconds (0: no limit) for each run, agent or
    workspace (``scope``). ``outside`` and ``over`` are what the decision turns into."""

    window: Weekly | None = None
    outside: LimitTurn = "deny"
    per_minute: int = 0
    scope: RateScope = "run"
    over: LimitTurn = "deny"

    def __post_init__(self) -> None:
        if self.outside not in LIMIT_TURNS or self.over not in LIMIT_TURNS:
            raise PolicyError("Outside the window or over the rate, a rule turns into ask or deny.")
        if self.scope not in RATE_SCOPES:
            raise PolicyError(f"A rate is counted per {', '.join(RATE_SCOPES)}.")
        if self.per_minute < 0:
            raise PolicyError("A rate limit is a number of calls a minute, 0 for none.")

    @property
    def rate_text(self) -> str:
        calls = "call" if self.per_minute == 1 else "calls"
        return f"{self.per_minute} {calls} a minute per {self.scope}"


@dataclass(frozen=True)
class Rule:
    """``tool`` is a name pattern (``*``, ``mcp:*``, ``{deleteFile,renameFile}``); ``path``
    a glob over workspace-relative paths, empty for "any call, with or without a path"."""

    id: str
    tool: str
    decision: Decision
    path: str = ""
    reason: str = ""
    limits: RuleLimits | None = None

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise PolicyError(
                f"Rule {self.id}: unknown decision {self.decision!r}; use one of "
                f"{', '.join(DECISIONS)}."
            )
        if not self.tool.strip():
            raise PolicyError(f"Rule {self.id}: the tool pattern is empty (use * for any tool).")
        if self.path.startswith("/") or "\x00" in self.path:
            raise PolicyError(f"Rule {self.id}: path globs are relative to the workspace.")

    @cached_property
    def matches_tool(self) -> Callable[[str], bool]:
        """Compiled once per rule: a plain name is an equality test, a pattern a matcher."""
        if not any(ch in self.tool for ch in "*?[{"):
            return self.tool.__eq__
        matcher = fnmatch.compile(self.tool, flags=_TOOL_FLAGS)
        return lambda tool: bool(matcher.match(tool))

    @cached_property
    def matches_path(self) -> Callable[[str | None], bool]:
        if not self.path:
            return lambda path: True
        deny = self.decision == "deny"
        matcher = glob_matcher(self.path, ignore_case=deny, forbids=deny)
        return lambda path: path is not None and matcher(path)


@dataclass(frozen=True)
class Policy:
    name: str
    ceiling: Level
    rules: tuple[Rule, ...]
    version: int = 1

    def __post_init__(self) -> None:
        if self.ceiling not in LEVELS:
            raise PolicyError(f"Policy {self.name}: unknown ceiling {self.ceiling!r}.")

    def rule(self, rule_id: str | None) -> Rule | None:
        return next((rule for rule in self.rules if rule.id == rule_id), None)


@dataclass(frozen=True)
class Call:
    """A tool call as the engine sees it: the path already resolved inside the workspace."""

    tool: str
    level: Level
    side_effect: SideEffect = "none"
    path: str | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise PolicyError(f"Tool {self.tool}: unknown level {self.level!r}.")
        if self.side_effect not in SIDE_EFFECTS:
            raise PolicyError(f"Tool {self.tool}: unknown side effect {self.side_effect!r}.")


@dataclass(frozen=True)
class Grant:
    """An approver's "remember for this run": this tool, paths inside this pattern."""

    tool: str
    path: str
    granted_by: str = ""

    def matches(self, call: Call) -> bool:
        rule = Rule("grant", self.tool, "allow", self.path)
        return rule.matches_tool(call.tool) and rule.matches_path(call.path)


@dataclass(frozen=True)
class Considered:
    rule_id: str
    matched: bool
    why: str


@dataclass(frozen=True)
class LimitOutcome:
    """One limit of the deciding rule, as it stood for this call: ``held`` (inside the
    window, within the rate) or not, and then what it ``turned`` the decision into."""

    check: Literal["change_window", "rate_limit"]
    rule: str
    held: bool
    detail: str
    turned: Decision | None = None
    key: str = ""  # the rate's counter this call was counted under, to give back if refused


@dataclass(frozen=True)
class LimitContext:
    """What the limits need beyond the call: the time, the ids a rate is counted by
    (``run``, ``agent``, ``workspace``) and the counter (key, limit → whether the limit is
    already reached; counts the call when it is not). No counter: rates are not asked
    (a call a person approved, a test of the policy with no calls to count)."""

    now: datetime
    scope_ids: Mapping[str, str] = field(default_factory=dict)
    rate_exceeded: Callable[[str, int], bool] | None = None
    rate_release: Callable[[str], None] | None = None  # gives one counted call back


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    human_only: bool
    rule: str | None
    reason: str
    grant: Grant | None = None
    limits: tuple[LimitOutcome, ...] = ()
    _policy: Policy | None = field(default=None, repr=False, compare=False)
    _call: Call | None = field(default=None, repr=False, compare=False)

    @cached_property
    def considered(self) -> tuple[Considered, ...]:
        """Every rule and whether it matched: worked out only when someone asks (P6)."""
        if self._policy is None or self._call is None:
            return ()
        return tuple(_consider(rule, self._call) for rule in self._policy.rules)


def _consider(rule: Rule, call: Call) -> Considered:
    if not rule.matches_tool(call.tool):
        return Considered(rule.id, False, f"tool {call.tool} is not {rule.tool}")
    if not rule.matches_path(call.path):
        where = "no path" if call.path is None else f"path {call.path}"
        return Considered(rule.id, False, f"{where} is not in {rule.path}")
    return Considered(
        rule.id, True, f"matches {rule.tool}" + (f" on {rule.path}" if rule.path else "")
    )


def decide(policy: Policy, call: Call, grants: Sequence[Grant] = ()) -> Verdict:
    """The decision for ``call`` under ``policy``, with the rule and reason (SPEC P6)."""
    human_only = call.side_effect == "production_change"
    if LEVELS.index(call.level) > LEVELS.index(policy.ceiling):
        return Verdict(
            "deny",
            human_only,
            None,
            f"{call.tool} needs level {call.level}, above this policy's ceiling {policy.ceiling}",
        )
    first: Rule | None = None
    deny: Rule | None = None
    for rule in policy.rules:  # every rule: a deny anywhere wins
        if rule.matches_tool(call.tool) and rule.matches_path(call.path):
            if rule.decision == "deny":
                deny = rule
                break
            if first is None:
                first = rule
    matched = deny or first
    if matched is None:
        return Verdict(
            "deny",
            human_only,
            None,
            "no rule matches: denied by default",
            _policy=policy,
            _call=call,
        )
    reason = matched.reason or f"rule {matched.id}: {matched.decision}"
    decision: Decision = matched.decision
    if human_only and decision == "allow":
        decision, reason = "ask", f"{reason}; a production change always needs a person"
    if decision == "ask" and not human_only:
        grant = next((g for g in grants if g.matches(call)), None)
        if grant is not None:
            who = f" by {grant.granted_by}" if grant.granted_by else ""
            return Verdict(
                "allow",
                human_only,
                matched.id,
                f"remembered for this run{who} ({grant.tool} on {grant.path or '*'})",
                grant,
                _policy=policy,
                _call=call,
            )
    return Verdict(decision, human_only, matched.id, reason, _policy=policy, _call=call)


def tool_may_be_used(policy: Policy, tool: str, level: Level) -> bool:
    """Whether any call of ``tool`` could be anything but denied: its level is within the
    ceiling, no path-less deny names it, and some rule names it at all (SPEC T1: only such
    tools' definitions are sent to the model)."""
    if LEVELS.index(level) > LEVELS.index(policy.ceiling):
        return False
    naming = [rule for rule in policy.rules if rule.matches_tool(tool)]
    if any(rule.decision == "deny" and not rule.path for rule in naming):
        return False
    return any(rule.decision != "deny" for rule in naming)


def decide_paths(
    policy: Policy,
    tool: str,
    level: Level,
    side_effect: SideEffect,
    paths: Sequence[str],
    grants: Sequence[Grant] = (),
    limits: LimitContext | None = None,
) -> Verdict:
    """A call that touches several paths (a rename, an MCP tool with a source and a
    destination) is decided for each; the strictest verdict stands. No path: one decision.
    Given ``limits``, the deciding rule's window and rate then apply (check 5), once."""
    candidates: Sequence[str | None] = paths or [None]
    verdicts = [decide(policy, Call(tool, level, side_effect, path), grants) for path in candidates]
    verdict = max(verdicts, key=lambda verdict: DECISIONS.index(verdict.decision))
    if limits is None:
        return verdict
    return within_limits(policy, verdict, limits, [v.rule for v in verdicts])


def counted_keys(verdict: Verdict) -> tuple[str, ...]:
    """The rate counters a verdict counted its call under: given back if it never runs."""
    return tuple(outcome.key for outcome in verdict.limits if outcome.key)


def _stricter(decision: Decision, turn: LimitTurn) -> Decision:
    return max(decision, turn, key=DECISIONS.index)


def within_limits(
    policy: Policy, verdict: Verdict, context: LimitContext, rules: Sequence[str | None] = ()
) -> Verdict:
    """Check 5: the change windows, then the rates, of every rule that decided a path of the
    call (``rules``; by default the verdict's own), so a call touching two paths meets the
    limits of both whichever comes first. A rate is asked only of a call still not denied,
    and a deny gives back what was counted: a refused call is never counted."""
    ids = dict.fromkeys(rule for rule in (rules or (verdict.rule,)) if rule)
    limited = [
        (rule, rule.limits)
        for rule in map(policy.rule, ids)
        if rule is not None and rule.limits is not None
    ]
    if not limited or verdict.decision == "deny":
        return verdict
    decision: Decision = verdict.decision
    whys: list[str] = []
    outcomes: list[LimitOutcome] = []
    for rule, limits in limited:
        if limits.window is None:
            continue
        inside = limits.window.holds(context.now)
        turned = None if inside else _stricter(decision, limits.outside)
        outcomes.append(LimitOutcome("change_window", rule.id, inside, limits.window.name, turned))
        if turned is not None:
            whys.append(f"outside the change window of rule {rule.id} ({limits.window.name})")
            decision = turned
    counted: list[str] = []
    for rule, limits in limited:
        if not limits.per_minute or decision == "deny":
            continue
        if context.rate_exceeded is None:
            detail = f"{limits.rate_text}, not counted for this call"
            outcomes.append(LimitOutcome("rate_limit", rule.id, True, detail))
            continue
        scope_id = context.scope_ids.get(limits.scope) or "none"
        key = f"rule:{policy.name}:{rule.id}:{limits.scope}:{scope_id}"
        if not context.rate_exceeded(key, limits.per_minute):
            counted.append(key)
            outcomes.append(LimitOutcome("rate_limit", rule.id, True, limits.rate_text, key=key))
            continue
        decision = _stricter(decision, limits.over)
        outcomes.append(LimitOutcome("rate_limit", rule.id, False, limits.rate_text, decision))
        whys.append(f"over the rate limit of rule {rule.id} ({limits.rate_text})")
    if decision == "deny" and counted and context.rate_release is not None:
        for key in counted:  # refused after all: what the other rates counted goes back
            context.rate_release(key)
        outcomes = [replace(outcome, key="") for outcome in outcomes]
    if not whys:
        return replace(verdict, limits=tuple(outcomes))
    return replace(
        verdict,
        decision=decision,
        reason=f"{'; '.join(whys)}; the rule alone: {verdict.decision} ({verdict.reason})",
        grant=None,
        limits=tuple(outcomes),
    )
