"""The words intake and risk read in a request, in one place.

Intake and its risk pre-assessment are rule-based — whole-word patterns, not a model — so
the same request always yields the same task, an operator can read why, and no model is
needed before a run exists. Where both read the same kind of word (a write, a delete, a
publish, a sweeping scope) they share one named list here, and each adds its own words
to it: intake's lists decide the *intent* and are narrow ("update the release notes"
publishes nothing), risk's lists decide how much *attention* a request needs and are
wide (any "release" raises it). Sharing the pieces keeps a new word from reaching one
and not the other by accident; the additions keep each reading exactly what it was.

Shared pieces are plain words (letters, hyphens, single spaces), so they mean the same
under both spellings of :func:`whole_words`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final


def whole_words(alternatives: Sequence[str], *, literal: bool = False) -> re.Pattern[str]:
    """Any of ``alternatives`` as a whole word, case-insensitive; group 1 is the match.

    A word is whole when no letter, digit or dot touches it on the left and no letter or
    digit on the right ("prod" is not found in "prodigal", nor "env" in "a.env").

    The two spellings are kept apart on purpose, because each one's matches are part of
    what its users record and must not change:

    - by default (intake's): alternatives are regex fragments — optional plurals
      ("functions?"), guards ("release(?!\\s+notes?\\b)") — and a space matches any run of
      whitespace, so an intent still reads across a line break ("go\\nlive");
    - ``literal=True`` (risk's): alternatives are escaped and matched as written, a space
      being exactly one space; risk's lists are plain words and phrases whose punctuation
      is literal ("e-mail", ".env", "third-party").
    """
    if literal:
        body = "|".join(re.escape(word) for word in alternatives)
    else:
        body = "|".join(fragment.replace(" ", r"\s+") for fragment in alternatives)
    return re.compile(rf"(?<![\w.])({body})(?!\w)", re.IGNORECASE)


def word_set(words: str) -> frozenset[str]:
    """A set of single words, written as one space-separated string to stay readable."""
    return frozenset(words.split())


# --- writes -------------------------------------------------------------------------------
# Verbs that change a file's content: a write for intake's intent and for risk alike.
EDIT_VERBS: Final = (
    "edit",
    "update",
    "change",
    "modify",
    "rewrite",
    "write",
    "create",
    "add",
    "fix",
)
CHANGE_VERBS: Final = ("replace", "insert", "patch", "commit")
# Writing code is a write too, and also says the change is to code.
CODE_VERBS: Final = ("refactor", "implement")
# Further writes intake knows; risk's "writes" feature never had them.
REVISE_VERBS: Final = (
    "correct",
    "amend",
    "revise",
    "append",
    *CODE_VERBS,
    "reword",
    "translate",
    "improve",
    "copy",
)
# Moving a file: its own intent for intake, a write for risk.
MOVE_VERBS: Final = ("rename", "move")
SHELL_MOVE: Final = ("mv",)

# --- deletes and other losses -------------------------------------------------------------
DELETE_VERBS: Final = ("delete", "remove", "erase", "purge", "wipe", "destroy", "drop")
SHELL_DELETE: Final = ("rm", "unlink")  # the shell's and the system's names for a delete
# Losing content without deleting a file: irreversible for risk, no delete intent.
OVERWRITE_VERBS: Final = ("truncate", "overwrite", "force push")

# --- publishing and production ------------------------------------------------------------
PUBLISH_VERBS: Final = ("publish", "deploy", "go live")
RELEASE: Final = "release"
# "Update the release notes" edits a document: for the intent, a "release" followed by
# "notes" is no release. Risk stays wide and counts every "release".
RELEASE_NOT_NOTES: Final = RELEASE + r"(?!\s+notes?\b)"
PUSH_LIVE: Final = "push to (?:prod|production|live)"
SHIP: Final = "ship"
# Words that say the outside world sees the result.
PRODUCTION_WORDS: Final = ("production", "prod", "live site", "customers")

# --- scope ----------------------------------------------------------------------------------
# Words that leave the extent of a task open: ambiguous scope for risk, a bulk object for
# intake ("remove everything from docs/" is a delete, not an edit of docs/).
EVERYTHING_WORDS: Final = ("all", "everything", "every", "whatever", "anything")
OPEN_SCOPE_WORDS: Final = ("entire", "whole", "any files", "wherever")
BULK_NOUNS: Final = ("files?", "folders?", "director(?:y|ies)", "contents?")

# --- risk-only features ---------------------------------------------------------------------
EXTERNAL_SYSTEM_WORDS: Final = (
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
)
SENSITIVE_DATA_WORDS: Final = (
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
)

# --- intake-only words ----------------------------------------------------------------------
QUESTION_WORDS: Final = (
    "what",
    "how",
    "why",
    "explain",
    "summarize",
    "summarise",
    "find",
    "list",
    "where",
    "which",
    "who",
    "when",
    "describe",
    "show",
    "search",
    "tell me",
    "look up",
    "compare",
    "read",
)
CODE_NOUNS: Final = (
    "functions?",
    "code",
    "class(?:es)?",
    "methods?",
    "bugs?",
    *CODE_VERBS,
    "modules?",
    "scripts?",
    "endpoints?",
    "variables?",
    "exceptions?",
    "unit tests?",
    "tests",
)

# --- claims ---------------------------------------------------------------------------------
# What a requester says about risk or approval. What the request *asks for* decides; what
# the requester *says about it* is recorded as an ignored claim and changes nothing.
# Risk's claims are found anywhere in the lowered text, as substrings.
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
# Claims intake records beyond risk's, as whole words (regex fragments).
EXTRA_CLAIMS: Final = (
    "no need for approval",
    "without approval",
    "(?:do not|don't|doesn't|does not) need approval",
    "auto-?approve",
    "skip the review",
    "no review needed",
    "i am an admin",
    "i'm an admin",
    "i am authori[sz]ed",
    "i'm authori[sz]ed",
)

# --- environments and documents -------------------------------------------------------------
# Environment name as written → canonical environment.
ENVIRONMENTS: Final[dict[str, str]] = {
    "production": "production",
    "prod": "production",
    "staging": "staging",
    "stage": "staging",
    "preview": "preview",
    "development": "development",
    "dev": "development",
    "testing": "testing",
    "test": "testing",
    "qa": "qa",
    "uat": "uat",
    "sandbox": "sandbox",
    "demo": "demo",
    "live": "live",
}
ENVIRONMENT_NOUNS: Final = r"(?:environment|env|server|site|cluster)"
# Documents named without a path: one of a kind ("the FAQ"), or a kind of document after
# a qualifier ("the install guide") that is not itself vague ("the new guide").
SPECIFIC_DOCS: Final = (
    r"readme|changelog|faq|glossary|contributing|license|roadmap|runbook|release\s+notes"
)
GENERIC_DOCS: Final = (
    r"guide|page|document|doc|manual|handbook|tutorial|policy|spec|specification|notes|"
    r"article|howto|reference|chapter"
)
VAGUE_QUALIFIERS: Final = word_set(
    "the a an this that these those some any all every old new my our your their its which "
    "what whatever each other another whole entire same one docs documentation to in of on "
    "for and or"
)

# --- intake's patterns ----------------------------------------------------------------------
PUBLISH: Final = whole_words((*PUBLISH_VERBS, RELEASE_NOT_NOTES, SHIP, PUSH_LIVE))
DELETE: Final = whole_words((*DELETE_VERBS, *SHELL_DELETE))
RENAME: Final = whole_words((*MOVE_VERBS, *SHELL_MOVE))
WRITE: Final = whole_words((*EDIT_VERBS, *CHANGE_VERBS, *REVISE_VERBS))
QUESTION: Final = whole_words(QUESTION_WORDS)
CODE: Final = whole_words(CODE_NOUNS)
EXTRA_CLAIM: Final = whole_words(EXTRA_CLAIMS)
BULK_OBJECT: Final = whole_words((*BULK_NOUNS, *EVERYTHING_WORDS, r"\*"))

# --- commands -----------------------------------------------------------------------------
# A request that needs a command run: "run `make test`", "run the tests", "execute the
# script", "in the shell". Only such a task has the shell in its boundaries (L3, asked).
COMMAND_OBJECTS: Final = (
    r"(?:shell\s+)?commands?",
    "scripts?",
    "tests?",
    "test suite",
    "build",
    "linter",
    "migrations?",
    "`[^`\n]+`",
)
COMMAND: Final = re.compile(
    r"(?<![\w.])((?:run|execute)\s+(?:the\s+|a\s+|this\s+|that\s+)?(?:"
    + "|".join(o.replace(" ", r"\s+") for o in COMMAND_OBJECTS)
    + r")|(?:in|from)\s+the\s+(?:shell|terminal)|shell\s+commands?)(?!\w)",
    re.IGNORECASE,
)
