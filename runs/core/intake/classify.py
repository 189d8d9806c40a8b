"""The intent of a request: what it asks to have done (SPEC R1).

The words that ask decide, never the words inside a path ("Summarize
docs/release-notes.md" publishes nothing). When a request mixes intents, the most
consequential one governs the task's safety.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from .paths import Candidate, path_candidates
from .request import checked_request
from .targets import edited_in_place, write_targets
from .task import Intent
from .vocabulary import CODE, DELETE, PUBLISH, QUESTION, RENAME, WRITE

_QUESTION_MARK: Final = re.compile(r"\?(?=\s|$)")
# A delete or rename edited in place ("remove X from F") is a write, not a delete.
_FILE_VERBS: Final[tuple[tuple[re.Pattern[str], Intent], ...]] = (
    (DELETE, "delete"),
    (RENAME, "rename"),
)


def _evidence(matches: Iterable[re.Match[str]]) -> str:
    return ", ".join(sorted({" ".join(m.group(1).lower().split()) for m in matches}))


def _is_code(text: str, targets: list[Candidate]) -> bool:
    """Target files decide when there are any; otherwise words like "function" do."""
    paths = [t for t in targets if not t.problem]
    if paths:
        return any(t.is_code for t in paths)
    return bool(CODE.search(text))


def _masked(text: str, candidates: list[Candidate]) -> str:
    """The text with every path blanked out: the words inside a path name a file, not
    what to do with it ("Summarize docs/release-notes.md" publishes nothing)."""
    chars = list(text)
    for candidate in candidates:
        chars[candidate.start : candidate.end] = " " * (candidate.end - candidate.start)
    return "".join(chars)


def read_intent(text: str) -> tuple[Intent, str]:
    """:func:`classify_intent` on a request already checked and folded."""
    candidates = path_candidates(text)
    words = _masked(text, candidates)
    if publish := list(PUBLISH.finditer(words)):
        return "publish", _evidence(publish)
    edits: list[re.Match[str]] = []
    for pattern, intent in _FILE_VERBS:
        plain: list[re.Match[str]] = []
        for verb in pattern.finditer(words):
            (edits if edited_in_place(text, verb, candidates) else plain).append(verb)
        if plain:
            return intent, _evidence(plain)
    if writes := [*WRITE.finditer(words), *edits]:
        code = _is_code(text, write_targets(text, candidates))
        return ("code_change" if code else "doc_update"), _evidence(writes)
    questions = list(QUESTION.finditer(words))
    mark = "?" if _QUESTION_MARK.search(words) else ""
    if questions or mark:
        return "question", ", ".join(filter(None, [_evidence(questions), mark]))
    return "unknown", ""


def classify_intent(request: str) -> tuple[Intent, str]:
    """(intent, the words that decided it).

    Precedence publish > delete > rename > doc_update/code_change > question > unknown:
    when a request mixes them, the most consequential one governs the task's safety.
    """
    return read_intent(checked_request(request))
