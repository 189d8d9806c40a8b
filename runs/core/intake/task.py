"""The structured task intake produces (SPEC R1), and its JSON round trip.

A task is stored as JSON with the run and read back when the run resumes, so the JSON has
stable keys and a version, and reading it back checks every field: malformed data is a
clear ValueError (X4), never a half-built task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from approvals.core.risk import Level

from .risk import Factor, RiskAssessment

Intent = Literal["question", "doc_update", "delete", "rename", "publish", "code_change", "unknown"]
INTENTS: Final[tuple[Intent, ...]] = get_args(Intent)
_LEVEL_NAMES: Final[tuple[Level, ...]] = get_args(Level)
JSON_VERSION: Final = 1


@dataclass(frozen=True)
class Parameter:
    """A value the task runs with, and the words it came from, so a person can check it."""

    name: str
    value: str
    evidence: str  # the words of the request that gave it, or "answer"


@dataclass(frozen=True)
class MissingParameter:
    """A question that stops the run (R3) until the requester answers it."""

    name: str  # the key the requester's answer goes under
    question: str
    why: str


@dataclass(frozen=True)
class Boundaries:
    """What the task may touch: least privilege, decided before the run starts."""

    read_paths: tuple[str, ...]  # globs relative to the workspace ("**" = anywhere)
    write_paths: tuple[str, ...]
    tools: tuple[str, ...]  # tools the task may use


@dataclass(frozen=True)
class ApprovalDecision:
    """Whether a person must approve, and why, in words the approver reads."""

    required: bool
    reason: str


@dataclass(frozen=True)
class StructuredTask:
    """Everything intake decided about a request; a pure function of request and answers."""

    request: str
    intent: Intent
    intent_evidence: str
    risk: RiskAssessment
    parameters: tuple[Parameter, ...]
    missing: tuple[MissingParameter, ...]
    boundaries: Boundaries
    approval: ApprovalDecision
    answers: tuple[tuple[str, str], ...]

    @property
    def ready(self) -> bool:
        """A task with open questions must not run: R3 stops it until they are answered."""
        return not self.missing

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys, so a stored task reads back identically."""
        return {
            "version": JSON_VERSION,
            "request": self.request,
            "intent": self.intent,
            "intent_evidence": self.intent_evidence,
            "risk": {
                "level": self.risk.level,
                "score": self.risk.score,
                "factors": [
                    {"feature": f.feature, "weight": f.weight, "evidence": f.evidence}
                    for f in self.risk.factors
                ],
                "ignored_claims": list(self.risk.ignored_claims),
            },
            "parameters": [
                {"name": p.name, "value": p.value, "evidence": p.evidence} for p in self.parameters
            ],
            "missing": [
                {"name": m.name, "question": m.question, "why": m.why} for m in self.missing
            ],
            "boundaries": {
                "read_paths": list(self.boundaries.read_paths),
                "write_paths": list(self.boundaries.write_paths),
                "tools": list(self.boundaries.tools),
            },
            "approval": {"required": self.approval.required, "reason": self.approval.reason},
            "answers": [[name, text] for name, text in self.answers],
            "ready": self.ready,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StructuredTask:
        """Rebuild a task from :meth:`to_json`; malformed data is a clear ValueError (X4)."""
        return _task_from_json(data)


# --- JSON -----------------------------------------------------------------------------------
def _field(data: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a JSON object")
    if key not in data:
        raise ValueError(f"{where} lacks {key!r}")
    value = data[key]
    wrong_bool = kind is int and isinstance(value, bool)
    if not isinstance(value, kind) or wrong_bool:
        raise ValueError(f"{where}.{key} must be {kind.__name__}, not {type(value).__name__}")
    return value


def _texts(data: Any, key: str, where: str) -> tuple[str, ...]:
    values = _field(data, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise ValueError(f"{where}.{key} must be a list of strings")
    return tuple(values)


def _records(data: Any, key: str, where: str, keys: tuple[str, ...]) -> list[tuple[Any, ...]]:
    items = _field(data, key, list, where)
    return [
        tuple(_field(item, k, int if k == "weight" else str, f"{where}.{key}[{i}]") for k in keys)
        for i, item in enumerate(items)
    ]


def _choice(value: str, allowed: tuple[str, ...], what: str) -> Any:
    if value not in allowed:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(allowed)}")
    return value


def _risk_from_json(risk: Mapping[str, Any]) -> RiskAssessment:
    return RiskAssessment(
        level=_choice(_field(risk, "level", str, "risk"), _LEVEL_NAMES, "risk level"),
        score=_field(risk, "score", int, "risk"),
        factors=tuple(
            Factor(*r) for r in _records(risk, "factors", "risk", ("feature", "weight", "evidence"))
        ),
        ignored_claims=_texts(risk, "ignored_claims", "risk"),
    )


def _task_from_json(data: Mapping[str, Any]) -> StructuredTask:
    """Every field checked, in the order the task is built, so the first fault is named."""
    where = "task"
    version = _field(data, "version", int, where)
    if version != JSON_VERSION:
        raise ValueError(f"task JSON version {version} is not supported (expected {JSON_VERSION})")
    risk = _field(data, "risk", dict, where)
    bounds = _field(data, "boundaries", dict, where)
    approval = _field(data, "approval", dict, where)
    answers = _field(data, "answers", list, where)
    if not all(
        isinstance(a, list) and len(a) == 2 and all(isinstance(x, str) for x in a) for a in answers
    ):
        raise ValueError("task.answers must be a list of [name, text] pairs")
    task = StructuredTask(
        request=_field(data, "request", str, where),
        intent=_choice(_field(data, "intent", str, where), INTENTS, "intent"),
        intent_evidence=_field(data, "intent_evidence", str, where),
        risk=_risk_from_json(risk),
        parameters=tuple(
            Parameter(*r)
            for r in _records(data, "parameters", where, ("name", "value", "evidence"))
        ),
        missing=tuple(
            MissingParameter(*r)
            for r in _records(data, "missing", where, ("name", "question", "why"))
        ),
        boundaries=Boundaries(
            _texts(bounds, "read_paths", "boundaries"),
            _texts(bounds, "write_paths", "boundaries"),
            _texts(bounds, "tools", "boundaries"),
        ),
        approval=ApprovalDecision(
            _field(approval, "required", bool, "approval"),
            _field(approval, "reason", str, "approval"),
        ),
        answers=tuple((name, text) for name, text in answers),
    )
    if _field(data, "ready", bool, where) != task.ready:
        raise ValueError("task.ready contradicts task.missing")
    return task
