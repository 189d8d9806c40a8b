"""Parameters and the missing-parameter gate (SPEC R3).

A parameter that affects safety or the business result (which file to delete, where to
publish) is never guessed: it becomes a question for the requester, and the answer resumes
intake. Paths that leave the workspace are never parameters, only questions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .paths import Candidate, overlaps, path_candidates
from .request import NO_ANSWERS, analysis_text, checked_request
from .targets import write_targets
from .task import INTENTS, Intent, MissingParameter, Parameter
from .vocabulary import (
    DELETE,
    ENVIRONMENT_NOUNS,
    ENVIRONMENTS,
    GENERIC_DOCS,
    RENAME,
    SPECIFIC_DOCS,
    VAGUE_QUALIFIERS,
)

_RENAME_CONNECTOR: Final = re.compile(r"(?:\b(?:to|as|into)\b|->|→)", re.IGNORECASE)
_ENV_NAMES: Final = "|".join(sorted(ENVIRONMENTS, key=len, reverse=True))
_ENV_IN_REQUEST: Final = re.compile(
    rf"\b(?:to|on|in|into|onto)\s+(?:the\s+)?({_ENV_NAMES})\b(?:\s+{ENVIRONMENT_NOUNS}\b)?"
    rf"|\b({_ENV_NAMES})\s+{ENVIRONMENT_NOUNS}\b",
    re.IGNORECASE,
)
_ENV_IN_ANSWER: Final = re.compile(rf"\b({_ENV_NAMES})\b", re.IGNORECASE)
_NAMED_DOC: Final = re.compile(
    rf"\b(?:({SPECIFIC_DOCS})|([\w-]+)\s+({GENERIC_DOCS}))\b", re.IGNORECASE
)
_SHOWN_CHARS: Final = 80  # how much of a refused mention a question repeats


@dataclass(frozen=True)
class _Role:
    """One parameter a task needs, and how strict it is about it."""

    name: str
    question: str
    why: str
    required: bool = False
    no_glob: bool = False  # a pattern could match files nobody meant
    no_directory: bool = False
    environment: bool = False
    document_suffices: bool = False  # "the install guide" names the file well enough


_OUTSIDE_WHY: Final = (
    "the task may only touch files inside the workspace: absolute paths and '..' are refused"
)
_DELETE_WHY: Final = (
    "a delete cannot be undone, so it needs an exact workspace-relative file path, not a "
    "description, a pattern or a directory"
)
_RENAME_WHY: Final = "a rename needs an exact source and target, or the wrong file moves"
_EDIT_WHY: Final = "the change must land in a named file; without one the agent would have to guess"
_PUBLISH_WHY: Final = (
    "publishing is seen outside the workspace: the target environment decides who sees it"
)
_READ_ROLE: Final = _Role("path", "Which file inside the workspace did you mean?", _OUTSIDE_WHY)
_REFERENCE_ROLE: Final = _Role(
    "reference", "Which file inside the workspace should be used instead?", _OUTSIDE_WHY
)
ROLES: Final[dict[Intent, tuple[_Role, ...]]] = {
    "question": (_READ_ROLE,),
    "unknown": (_READ_ROLE,),
    "delete": (
        _Role(
            "path",
            "Which file exactly should be deleted?",
            _DELETE_WHY,
            required=True,
            no_glob=True,
            no_directory=True,
        ),
    ),
    "rename": (
        _Role(
            "source",
            "Which file exactly should be renamed?",
            _RENAME_WHY,
            required=True,
            no_glob=True,
            no_directory=True,
        ),
        _Role(
            "target",
            "What should the file be renamed to (its new workspace-relative path)?",
            _RENAME_WHY,
            required=True,
            no_glob=True,
        ),
    ),
    "doc_update": (
        _Role("path", "Which file should be updated?", _EDIT_WHY, True, document_suffices=True),
        _REFERENCE_ROLE,
    ),
    "code_change": (
        _Role("path", "Which file should be changed?", _EDIT_WHY, True, document_suffices=True),
        _REFERENCE_ROLE,
    ),
    "publish": (
        _READ_ROLE,
        _Role(
            "environment",
            "Which environment should this be published to (for example staging or production)?",
            _PUBLISH_WHY,
            required=True,
            environment=True,
        ),
    ),
}


def _rename_roles(text: str, candidates: list[Candidate]) -> dict[str, list[Candidate]]:
    """ "rename A to B", "move A into B/", "mv A B", "A: rename it to B"."""
    verb = RENAME.search(text)
    start = verb.end() if verb else 0
    after = [c for c in candidates if c.start >= start]
    before = [c for c in candidates if c.start < start]
    spans = [(c.start, c.end) for c in candidates]
    connectors = [
        m.start()
        for m in _RENAME_CONNECTOR.finditer(text, start)
        if not overlaps(spans, m.start(), m.end())
    ]
    if connectors:
        source = [c for c in after if c.end <= connectors[0]][:1] or before[-1:]
        target = [c for c in after if c.start >= connectors[0]][:1]
    else:
        source = after[:1] or before[-1:]
        target = after[1:2] if after else []
    return {"source": source, "target": target}


def _assign(text: str, intent: Intent, candidates: list[Candidate]) -> dict[str, list[Candidate]]:
    """Which mention plays which part: what is deleted, renamed, written or only read."""
    if intent == "rename":
        return _rename_roles(text, candidates)
    if intent == "delete":
        verb = DELETE.search(text)
        after = [c for c in candidates if verb and c.start >= verb.end()]
        return {"path": after or candidates}
    if intent in {"doc_update", "code_change"}:
        targets = write_targets(text, candidates)
        written = {c.start for c in targets}
        return {"path": targets, "reference": [c for c in candidates if c.start not in written]}
    return {"path": candidates}


def _environments(text: str, pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """(canonical environment, evidence) in order, each once."""
    found: dict[str, str] = {}
    for match in pattern.finditer(text):
        name = next(g for g in match.groups() if g is not None)
        found.setdefault(ENVIRONMENTS[name.lower()], " ".join(match.group(0).split()))
    return list(found.items())


def _named_document(text: str) -> Parameter | None:
    """A document named clearly enough to find ("the install guide", "the FAQ")."""
    spans = [(c.start, c.end) for c in path_candidates(text)]
    for match in _NAMED_DOC.finditer(text):
        if overlaps(spans, match.start(), match.end()):
            continue  # "faq" inside docs/faq.md is the path, not a second name
        specific, qualifier, noun = match.groups()
        if specific:
            return Parameter("document", " ".join(specific.lower().split()), match.group(0))
        if qualifier.lower() not in VAGUE_QUALIFIERS:
            phrase = f"{qualifier} {noun}"
            return Parameter("document", phrase.lower(), phrase)
    return None


def _problem(role: _Role, candidate: Candidate) -> str | None:
    """Why ``candidate`` cannot fill ``role``, or None when it can."""
    if candidate.problem:
        return candidate.problem
    if role.no_glob and candidate.glob:
        return "glob"
    if role.no_directory and candidate.directory:
        return "directory"
    return None


_PROBLEMS: Final = {
    "absolute": "{} is an absolute path, outside the workspace.",
    "traversal": "{} uses '..' to leave the workspace.",
    "glob": "{} is a pattern that can match many files.",
    "directory": "{} is a whole directory, not one file.",
    "not_path": "{} is not a workspace-relative file path.",
    "not_environment": "{} is not an environment I know ("
    + ", ".join(dict.fromkeys(ENVIRONMENTS.values()))
    + ").",
}


def _shown(text: str) -> str:
    """A mention as a question repeats it: on one line, and short."""
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _missing(role: _Role, problems: list[tuple[str, str]], *, answered: bool) -> MissingParameter:
    """Ask again, restating what was wrong, so the requester can fix it in one answer."""
    subject = "Your answer `{}`" if answered else "`{}`"
    sentences = [_PROBLEMS[kind].format(subject.format(_shown(shown))) for kind, shown in problems]
    outside = any(kind in {"absolute", "traversal"} for kind, _ in problems)
    inside = not outside or any(kind not in {"absolute", "traversal"} for kind, _ in problems)
    why = "; ".join([*([_OUTSIDE_WHY] if outside else []), *([role.why] if inside else [])])
    return MissingParameter(role.name, " ".join([*sentences, role.question]), why)


def _dedupe(parameters: list[Parameter]) -> list[Parameter]:
    """Each (name, value) once, first mention kept: an answer may repeat the request."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for parameter in parameters:
        if (parameter.name, parameter.value) not in seen:
            seen.add((parameter.name, parameter.value))
            kept.append(parameter)
    return kept


def _gate_paths(
    role: _Role, found: list[Candidate], answer: str | None, document: bool
) -> tuple[list[Parameter], MissingParameter | None]:
    """R3 for a path: refused or inexact mentions, or none where one is needed, are asked.

    An answer resolves what was asked; it goes through the same rules as the request, so
    "../etc/passwd" given as an answer is asked about again.
    """
    valid = [Parameter(role.name, c.value, c.raw) for c in found if not _problem(role, c)]
    problems = [(p, c.value) for c in found if (p := _problem(role, c))]
    absent = role.required and not valid and not (role.document_suffices and document)
    if not problems and not absent:
        return valid, None
    if answer is None:
        return valid, _missing(role, problems, answered=False)
    given = path_candidates(answer, lenient=True)
    answered = [Parameter(role.name, c.value, "answer") for c in given if not _problem(role, c)]
    answer_problems = [(p, c.value) for c in given if (p := _problem(role, c))]
    if answered and not answer_problems:
        return _dedupe(valid + answered), None
    return valid, _missing(role, answer_problems or [("not_path", answer)], answered=True)


def _gate_environment(
    role: _Role, found: list[tuple[str, str]], answer: str | None
) -> tuple[list[Parameter], MissingParameter | None]:
    """R3 for an environment: named in the request, or asked, and an answer is read alone."""
    if found:
        return [Parameter(role.name, v, e) for v, e in found], None
    if answer is None:
        return [], _missing(role, [], answered=False)
    answered = _environments(answer, _ENV_IN_ANSWER)
    if answered:
        return [Parameter(role.name, v, "answer") for v, _ in answered], None
    return [], _missing(role, [("not_environment", answer)], answered=True)


def gate(
    text: str, intent: Intent, answers: Mapping[str, str]
) -> tuple[tuple[Parameter, ...], tuple[MissingParameter, ...]]:
    """Parameters per role, and the questions that stop the run until answered."""
    roles = _assign(text, intent, path_candidates(text))
    document = _named_document(text) if intent in {"doc_update", "code_change"} else None
    parameters: list[Parameter] = []
    missing: list[MissingParameter] = []
    for role in ROLES[intent]:
        answer = analysis_text(answers.get(role.name, "")).strip() or None
        if role.environment:
            found, question = _gate_environment(role, _environments(text, _ENV_IN_REQUEST), answer)
        else:
            found, question = _gate_paths(role, roles.get(role.name, []), answer, bool(document))
        parameters += found
        missing += [question] if question else []
    if document:
        parameters.append(document)
    return tuple(parameters), tuple(missing)


def extract_parameters(request: str, intent: Intent) -> tuple[Parameter, ...]:
    """The parameters the request itself states for ``intent``. Refused paths (absolute,
    "..", or a pattern where one exact file is needed) are left out: intake asks about them.
    """
    if intent not in ROLES:
        raise ValueError(f"unknown intent {intent!r}; expected one of {', '.join(INTENTS)}")
    return gate(checked_request(request), intent, NO_ANSWERS)[0]
