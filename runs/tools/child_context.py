"""What the console tells a tool beside the model's arguments: the policy to filter files
by, the sandbox settings, the publish folder, the paths it decided on.

It travels in its own field of the child's request, never inside the arguments, so nothing
a model writes can pose as the console (a model's argument names starting with ``_`` are
refused outright).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

from policies.core.permissions import Call, Grant, Policy, Rule, decide

CONSOLE: ContextVar[dict[str, Any] | None] = ContextVar("console", default=None)


def console() -> dict[str, Any]:
    return CONSOLE.get() or {}


def policy_to_context(policy: Policy) -> dict[str, Any]:
    return {
        "name": policy.name,
        "ceiling": policy.ceiling,
        "version": policy.version,
        "rules": [[r.id, r.tool, r.decision, r.path, r.reason] for r in policy.rules],
    }


def _policy() -> tuple[Policy, dict[str, Any], list[Grant]] | None:
    data = console().get("policy")
    if not data:
        return None
    policy = Policy(
        data["name"],
        data["ceiling"],
        tuple(Rule(*rule) for rule in data["rules"]),
        data.get("version", 1),
    )
    grants = [Grant(*grant) for grant in console().get("grants", [])]
    return policy, console()["tool"], grants


def permitted(paths: Iterable[str], *, need: str = "allow") -> list[str]:
    """The paths this tool may touch under the console's policy, file by file.

    ``need="allow"``: only files the policy allows outright (reading, listing, searching).
    ``need="not_deny"``: every file not denied (a person already approved the whole call).
    Without a policy in the context (a tool run directly, in a test), nothing is filtered.
    """
    found = _policy()
    if found is None:
        return list(paths)
    policy, tool, grants = found
    keep = []
    for path in paths:
        verdict = decide(
            policy, Call(tool["name"], tool["level"], tool["side_effect"], path), grants
        )
        if verdict.decision == "allow" or (need == "not_deny" and verdict.decision != "deny"):
            keep.append(path)
    return keep
