"""Risk pre-assessment of a request (SPEC R2), pure: computed from what the request asks
for — writes, external systems, production, sensitive data, ambiguous scope,
irreversibility — never from what the requester says about it. "This is safe, skip the
approval" is noted as a claim and changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

Level = Literal["low", "medium", "high", "critical"]

# feature → (weight, word patterns); matched as whole words, case-insensitively.
FEATURES: Final[dict[str, tuple[int, tuple[str, ...]]]] = {
    "writes": (
        1,
        (
            "edit",
            "update",
            "change",
            "modify",
            "rewrite",
            "write",
            "create",
            "add",
            "fix",
            "rename",
            "move",
            "replace",
            "insert",
            "patch",
            "commit",
        ),
    ),
    "external_systems": (
        2,
        (
            "api",
            "email",
            "e-mail",
            "send",
            "webhook",
            "slack",
            "http",
            "https",
            "upload",
            "post to",
            "notify",
            "third-party",
        ),
    ),
    "production": (
        3,
        ("production", "prod", "deploy", "release", "publish", "live site", "customers", "go live"),
    ),
    "sensitive_data": (
        3,
        (
            "password",
            "passwords",
            "secret",
            "secrets",
            "token",
            "tokens",
            "credential",
            "credentials",
            "api key",
            "private key",
            "personal data",
            "pii",
            "salary",
            "salaries",
            "ssn",
            ".env",
        ),
    ),
    "ambiguous_scope": (
        2,
        (
            "all",
            "everything",
            "every",
            "entire",
            "whole",
            "whatever",
            "anything",
            "any files",
            "wherever",
        ),
    ),
    "irreversible": (
        3,
        (
            "delete",
            "remove",
            "drop",
            "purge",
            "wipe",
            "truncate",
            "destroy",
            "force push",
            "overwrite",
            "erase",
        ),
    ),
}
CLAIMS: Final = (
    "this is safe",
    "it is safe",
    "it's safe",
    "skip approval",
    "skip the approval",
    "no need to ask",
    "no approval",
    "low risk",
    "trust me",
    "don't ask",
    "do not ask",
    "already approved",
    "pre-approved",
)
LEVELS: Final = ((0, "low"), (2, "medium"), (5, "high"), (8, "critical"))


@dataclass(frozen=True)
class Factor:
    feature: str
    weight: int
    evidence: str  # the words of the request that raised it


@dataclass(frozen=True)
class RiskAssessment:
    level: Level
    score: int
    factors: tuple[Factor, ...]
    ignored_claims: tuple[str, ...]  # what the requester said about risk: recorded, not used


def _pattern(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(
        r"(?<![\w.])(" + "|".join(re.escape(w) for w in words) + r")(?!\w)", re.IGNORECASE
    )


_PATTERNS: Final = {name: _pattern(words) for name, (_, words) in FEATURES.items()}


def assess_risk(request: str) -> RiskAssessment:
    """Score the request's features; the level follows the score, not the requester."""
    factors = []
    for name, (weight, _) in FEATURES.items():
        found = sorted({m.group(1).lower() for m in _PATTERNS[name].finditer(request)})
        if found:
            factors.append(Factor(name, weight, ", ".join(found)))
    score = sum(f.weight for f in factors)
    level: Level = "low"
    for threshold, name in LEVELS:
        if score >= threshold:
            level = name  # type: ignore[assignment]
    lowered = request.lower()
    claims = tuple(claim for claim in CLAIMS if claim in lowered)
    return RiskAssessment(level, score, tuple(factors), claims)
