"""Which path mentions a change writes, and which it only reads.

"Remove the outdated paragraph from docs/faq.md" edits the FAQ; it does not delete it.
"Update the guide based on docs/old.md" writes the guide and reads docs/old.md. Both the
intent (a delete or an edit, doc or code) and the write boundaries depend on telling these
apart, so the rules live here, once.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import Final

from .paths import Candidate
from .vocabulary import BULK_OBJECT, DELETE, RENAME

# "remove X from F", "rename X in F": the file is edited, not deleted or renamed — unless X
# itself speaks of files or everything, which is a bulk delete in disguise.
_CONTENT_PREPOSITION: Final = re.compile(
    r"\s*(?P<object>\S.*?)\s+(?:from|in|inside|within|of)\s+(?:the\s+)?(?:file\s+)?",
    re.IGNORECASE | re.DOTALL,
)
_REFERENCE_MARKER: Final = re.compile(
    r"(?:\b(?:from|using|based on|according to|per|see|like|following)\s+(?:the\s+)?"
    r"(?:file\s+)?)$",
    re.IGNORECASE,
)


def edited_in_place(
    text: str, verb: re.Match[str], candidates: list[Candidate]
) -> Candidate | None:
    """The file a "remove X from F" / "rename X in F" edits, or None for a real delete/rename.

    Without this, "remove the outdated paragraph from docs/faq.md" would ask to delete the
    FAQ. A bulk object ("all files in docs/") or an inexact container stays a delete.
    """
    index = bisect_right([c.start for c in candidates], verb.end() - 1)
    if index == len(candidates):
        return None
    container = candidates[index]
    if container.problem or container.glob or container.directory:
        return None
    between = text[verb.end() : container.start]
    if len(between) > 200:
        return None
    match = _CONTENT_PREPOSITION.fullmatch(between)
    if match is None or BULK_OBJECT.search(match.group("object")):
        return None
    return container


def _containers(text: str, candidates: list[Candidate]) -> set[int]:
    """Start offsets (a candidate's identity) of the files edited in place."""
    found = set()
    for pattern in (DELETE, RENAME):
        for verb in pattern.finditer(text):
            container = edited_in_place(text, verb, candidates)
            if container is not None:
                found.add(container.start)
    return found


def _is_reference(text: str, candidate: Candidate) -> bool:
    """A file the change is based on ("… from docs/old.md") is read, not written."""
    return bool(_REFERENCE_MARKER.search(text[max(0, candidate.start - 40) : candidate.start]))


def write_targets(text: str, candidates: list[Candidate]) -> list[Candidate]:
    """The mentions a change writes: every one but its references, and a file edited in
    place even when a reference marker precedes it ("remove X from docs/faq.md")."""
    containers = _containers(text, candidates)
    return [c for c in candidates if c.start in containers or not _is_reference(text, c)]
