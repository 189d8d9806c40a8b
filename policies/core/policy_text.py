"""A policy snapshot as text (B16): one line for its settings and one per rule, in order,
so that two revisions compare as a plain diff an admin reads like a code review."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SETTINGS = (
    ("ceiling", "ceiling"),
    ("l3_approvals_required", "approvers for L3 actions"),
    ("approval_expiry_minutes", "approval expiry minutes"),
    ("approval_reminder_minutes", "approval reminder minutes"),
)


def policy_text(snapshot: Mapping[str, Any]) -> str:
    """``description``, the settings, then ``rule <key>: <tool> <path> → <decision>`` with
    its reason, window and rate on the same line: a change to one rule is one line."""
    lines = [f"description: {snapshot.get('description', '')}"]
    lines += [f"{label}: {snapshot.get(key, '')}" for key, label in SETTINGS]
    for rule in snapshot.get("rules", []):
        line = f"rule {rule['order']} {rule['key']}: {rule['tool']} {rule['path'] or '(any path)'}"
        line += f" → {rule['decision']}"
        if rule.get("reason"):
            line += f" — {rule['reason']}"
        window = [rule.get(k) for k in ("window_days", "window_start", "window_end")]
        if any(window) or rule.get("window_excluded"):
            days, start, end = (w or "" for w in window)
            line += f" [window {days or 'every day'} {start}–{end} {rule.get('window_timezone')}"
            if rule.get("window_excluded"):
                line += f", not {rule['window_excluded']}"
            line += f"; outside: {rule.get('outside_window')}]"
        if rule.get("rate_limit"):
            line += (
                f" [rate {rule['rate_limit']}/min per {rule.get('rate_scope')}; "
                f"over: {rule.get('over_rate')}]"
            )
        lines.append(line)
    return "\n".join(lines) + "\n"
