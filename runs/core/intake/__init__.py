"""Intake (SPEC R1–R3), pure: a request becomes a structured task — intent, risk,
parameters, the questions that must be answered first, boundaries and the approval
decision.

It is rule-based (whole-word patterns, :mod:`.vocabulary`) so the same request always
yields the same task, an operator can read why, and no model is needed before a run exists.
Two principles run through it:

- What the request *asks for* decides; what the requester *says about it* ("this is safe,
  skip approval") is recorded as an ignored claim and changes nothing.
- A parameter that affects safety or the business result (which file to delete, where to
  publish) is never guessed: it becomes a question for the requester, and the answer resumes
  intake (R3). Paths that leave the workspace are never parameters, only questions.

This module is the public face; the pipeline's steps live in the modules named after them.
"""

from __future__ import annotations

from .boundaries import TOOLS
from .classify import classify_intent
from .extract import extract_parameters
from .pipeline import intake
from .request import MAX_ANSWER_CHARS, MAX_REQUEST_CHARS
from .risk import Factor, RiskAssessment, assess_risk
from .task import (
    INTENTS,
    ApprovalDecision,
    Boundaries,
    Intent,
    MissingParameter,
    Parameter,
    StructuredTask,
)

__all__ = [
    "INTENTS",
    "MAX_ANSWER_CHARS",
    "MAX_REQUEST_CHARS",
    "TOOLS",
    "ApprovalDecision",
    "Boundaries",
    "Factor",
    "Intent",
    "MissingParameter",
    "Parameter",
    "RiskAssessment",
    "StructuredTask",
    "assess_risk",
    "classify_intent",
    "extract_parameters",
    "intake",
]
