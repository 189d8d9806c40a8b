"""The request and the answers as intake accepts them, and as its rules read them.

What cannot be a task is refused here, before any rule runs, with a message the requester
can act on (X4). The request itself is kept exactly as written; the rules read a folded
copy, so look-alike characters cannot hide a word from them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

MAX_REQUEST_CHARS: Final = 20_000
MAX_ANSWER_CHARS: Final = 2_000
_MAX_FOLDED_CHARS: Final = 4 * MAX_REQUEST_CHARS  # NFKC can expand one character into 18
NO_ANSWERS: Final[Mapping[str, str]] = MappingProxyType({})


def analysis_text(text: str) -> str:
    """The text the rules read: NFKC-folded, invisible format characters removed.

    Full-width letters or a zero-width space inside "delete" must not hide the word from
    the rules (nor a right-to-left override disguise a path), so matching happens on the
    folded text; the request itself is kept exactly as written.
    """
    folded = unicodedata.normalize("NFKC", text)
    kept = []
    for ch in folded:
        category = unicodedata.category(ch)
        if category == "Cf":
            continue
        kept.append(" " if category in {"Cc", "Cs"} and ch not in "\n\t" else ch)
    return "".join(kept)


def checked_request(request: str) -> str:
    """Refuse what cannot be a task (X4) with a message the requester can act on."""
    if not isinstance(request, str):
        raise TypeError(f"the request must be text, not {type(request).__name__}")
    if len(request) > MAX_REQUEST_CHARS:
        raise ValueError(
            f"the request is too long ({len(request)} characters; the limit is "
            f"{MAX_REQUEST_CHARS}): describe the task and point to files instead of pasting them"
        )
    text = analysis_text(request)
    if len(text) > _MAX_FOLDED_CHARS:
        raise ValueError(
            f"the request is too long once its compatibility characters are expanded "
            f"({len(text)} characters; the limit is {_MAX_FOLDED_CHARS})"
        )
    if not text.strip():
        raise ValueError("the request is empty: say what the agent should do")
    return text


def checked_answers(answers: Mapping[str, str]) -> dict[str, str]:
    """The answers as a plain dict of text, or a refusal naming the answer at fault."""
    if not isinstance(answers, Mapping):
        raise TypeError(f"answers must map parameter names to text, not {type(answers).__name__}")
    checked: dict[str, str] = {}
    for name, text in answers.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise ValueError("answers must map parameter names (text) to answers (text)")
        if len(text) > MAX_ANSWER_CHARS:
            raise ValueError(
                f"the answer for {name!r} is too long ({len(text)} characters; the limit is "
                f"{MAX_ANSWER_CHARS})"
            )
        checked[name] = text
    return checked
