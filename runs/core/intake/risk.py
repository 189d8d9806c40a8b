"""Risk pre-assessment of a request (SPEC R2), pure: computed from what the request asks
for — writes, external systems, production, sensitive data, ambiguous scope,
irreversibility — never from what the requester says about it. "This is safe, skip the
approval" is noted as a claim and changes nothing.

The features read the shared vocabulary literally (:func:`whole_words` with
``literal=True``); the level names and their thresholds are the approvals' (what a person
is asked to attend to), so intake and the approval queue speak of the same levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from approvals.core.risk import LEVELS, Level

from .request import analysis_text
from .vocabulary import (
    CHANGE_VERBS,
    CLAIMS,
    DELETE_VERBS,
    EDIT_VERBS,
    EVERYTHING_WORDS,
    EXTERNAL_SYSTEM_WORDS,
    EXTRA_CLAIM,
    MOVE_VERBS,
    OPEN_SCOPE_WORDS,
    OVERWRITE_VERBS,
    PRODUCTION_WORDS,
    PUBLISH_VERBS,
    RELEASE,
    SENSITIVE_DATA_WORDS,
    whole_words,
)

# feature → (weight, words); matched as whole words, case-insensitively, as written.
FEATURES: Final[dict[str, tuple[int, tuple[str, ...]]]] = {
    "writes": (1, (*EDIT_VERBS, *MOVE_VERBS, *CHANGE_VERBS)),
    "external_systems": (2, EXTERNAL_SYSTEM_WORDS),
    "production": (3, (*PUBLISH_VERBS, RELEASE, *PRODUCTION_WORDS)),
    "sensitive_data": (3, SENSITIVE_DATA_WORDS),
    "ambiguous_scope": (2, (*EVERYTHING_WORDS, *OPEN_SCOPE_WORDS)),
    "irreversible": (3, (*DELETE_VERBS, *OVERWRITE_VERBS)),
}
_PATTERNS: Final = {name: whole_words(words, literal=True) for name, (_, words) in FEATURES.items()}


@dataclass(frozen=True)
class Factor:
    """One feature the request has, with the words that show it, so an operator can see
    why the level is what it is."""

    feature: str
    weight: int
    evidence: str  # the words of the request that raised it


@dataclass(frozen=True)
class RiskAssessment:
    level: Level
    score: int
    factors: tuple[Factor, ...]
    ignored_claims: tuple[str, ...]  # what the requester said about risk: recorded, not used


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
            level = name
    lowered = request.lower()
    claims = tuple(claim for claim in CLAIMS if claim in lowered)
    return RiskAssessment(level, score, tuple(factors), claims)


def assess_task_risk(text: str, answers: Mapping[str, str]) -> RiskAssessment:
    """Risk of what will be done — the request and the answers that complete it — with
    every claim about safety recorded as ignored, including the extra ones intake knows.

    ``text`` is the request as the rules read it; the answers are folded the same way.
    """
    answered = [analysis_text(answers[name]) for name in sorted(answers)]
    whole = "\n".join([text, *answered])
    risk = assess_risk(whole)
    extra = [c for c in dict.fromkeys(m.group(1).lower() for m in EXTRA_CLAIM.finditer(whole))]
    claims = (*risk.ignored_claims, *(c for c in extra if c not in risk.ignored_claims))
    return replace(risk, ignored_claims=claims)
