"""The intake pipeline of SPEC R1–R3, pure: request → intent → risk → parameters →
missing-parameter gate → boundaries → approval decision → structured task.

It is rule-based (whole-word patterns, like :mod:`runs.core.risk`) so the same request always
yields the same task, an operator can read why, and no model is needed before a run exists.
Two principles run through it:

- What the request *asks for* decides; what the requester *says about it* ("this is safe,
  skip approval") is recorded as an ignored claim and changes nothing.
- A parameter that affects safety or the business result (which file to delete, where to
  publish) is never guessed: it becomes a question for the requester, and the answer resumes
  intake (R3). Paths that leave the workspace are never parameters, only questions.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

from runs.core.risk import Factor, Level, RiskAssessment, assess_risk

Intent = Literal["question", "doc_update", "delete", "rename", "publish", "code_change", "unknown"]
INTENTS: Final[tuple[Intent, ...]] = get_args(Intent)
LEVELS: Final[tuple[Level, ...]] = get_args(Level)

MAX_REQUEST_CHARS: Final = 20_000
MAX_ANSWER_CHARS: Final = 2_000
_MAX_FOLDED_CHARS: Final = 4 * MAX_REQUEST_CHARS  # NFKC can expand one character into 18
JSON_VERSION: Final = 1
_NO_ANSWERS: Final[Mapping[str, str]] = MappingProxyType({})


# --- the structured task ------------------------------------------------------------------
@dataclass(frozen=True)
class Parameter:
    name: str
    value: str
    evidence: str  # the words of the request that gave it, or "answer"


@dataclass(frozen=True)
class MissingParameter:
    name: str  # the key the requester's answer goes under
    question: str
    why: str


@dataclass(frozen=True)
class Boundaries:
    read_paths: tuple[str, ...]  # globs relative to the workspace ("**" = anywhere)
    write_paths: tuple[str, ...]
    tools: tuple[str, ...]  # tools the task may use


@dataclass(frozen=True)
class ApprovalDecision:
    required: bool
    reason: str


@dataclass(frozen=True)
class StructuredTask:
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


# --- word patterns ------------------------------------------------------------------------
def _words(*alternatives: str) -> re.Pattern[str]:
    """Whole words, case-insensitive; alternatives are regex fragments (spaces = any gap)."""
    body = "|".join(a.replace(" ", r"\s+") for a in alternatives)
    return re.compile(rf"(?<![\w.])({body})(?![\w])", re.IGNORECASE)


_PUBLISH: Final = _words(
    "publish",
    "deploy",
    r"release(?!\s+notes?\b)",
    "ship",
    "go live",
    "push to (?:prod|production|live)",
)
_DELETE: Final = _words(
    "delete", "remove", "rm", "erase", "purge", "wipe", "destroy", "drop", "unlink"
)
_RENAME: Final = _words("rename", "move", "mv")
_WRITE: Final = _words(
    "edit",
    "update",
    "change",
    "modify",
    "rewrite",
    "write",
    "create",
    "add",
    "fix",
    "replace",
    "insert",
    "patch",
    "commit",
    "correct",
    "amend",
    "revise",
    "append",
    "refactor",
    "implement",
    "reword",
    "translate",
    "improve",
    "copy",
)
_QUESTION: Final = _words(
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
_QUESTION_MARK: Final = re.compile(r"\?(?=\s|$)")
_CODE_WORDS: Final = _words(
    "functions?",
    "code",
    "class(?:es)?",
    "methods?",
    "bugs?",
    "refactor",
    "implement",
    "modules?",
    "scripts?",
    "endpoints?",
    "variables?",
    "exceptions?",
    "unit tests?",
    "tests",
)
# Requester statements about risk or approval beyond those risk.py already records.
_EXTRA_CLAIMS: Final = _words(
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
# "remove X from F", "rename X in F": the file is edited, not deleted or renamed — unless X
# itself speaks of files or everything, which is a bulk delete in disguise.
_CONTENT_PREPOSITION: Final = re.compile(
    r"\s*(?P<object>\S.*?)\s+(?:from|in|inside|within|of)\s+(?:the\s+)?(?:file\s+)?",
    re.IGNORECASE | re.DOTALL,
)
_BULK_OBJECT: Final = _words(
    "files?",
    "folders?",
    "director(?:y|ies)",
    "everything",
    "all",
    "anything",
    "contents?",
    "whatever",
    "every",
    r"\*",
)
_REFERENCE_MARKER: Final = re.compile(
    r"(?:\b(?:from|using|based on|according to|per|see|like|following)\s+(?:the\s+)?"
    r"(?:file\s+)?)$",
    re.IGNORECASE,
)
_RENAME_CONNECTOR: Final = re.compile(r"(?:\b(?:to|as|into)\b|->|→)", re.IGNORECASE)

# --- environments ---------------------------------------------------------------------------
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
_ENV_NAMES: Final = "|".join(sorted(ENVIRONMENTS, key=len, reverse=True))
_ENV_SUFFIX: Final = r"(?:environment|env|server|site|cluster)"
_ENV_IN_REQUEST: Final = re.compile(
    rf"\b(?:to|on|in|into|onto)\s+(?:the\s+)?({_ENV_NAMES})\b(?:\s+{_ENV_SUFFIX}\b)?"
    rf"|\b({_ENV_NAMES})\s+{_ENV_SUFFIX}\b",
    re.IGNORECASE,
)
_ENV_IN_ANSWER: Final = re.compile(rf"\b({_ENV_NAMES})\b", re.IGNORECASE)


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# --- documents named without a path -------------------------------------------------------
_SPECIFIC_DOCS: Final = (
    r"readme|changelog|faq|glossary|contributing|license|roadmap|runbook|release\s+notes"
)
_GENERIC_DOCS: Final = (
    r"guide|page|document|doc|manual|handbook|tutorial|policy|spec|specification|notes|"
    r"article|howto|reference|chapter"
)
_NAMED_DOC: Final = re.compile(
    rf"\b(?:({_SPECIFIC_DOCS})|([\w-]+)\s+({_GENERIC_DOCS}))\b", re.IGNORECASE
)
_VAGUE_QUALIFIERS: Final = _word_set(
    "the a an this that these those some any all every old new my our your their its which "
    "what whatever each other another whole entire same one docs documentation to in of on "
    "for and or"
)

# --- paths ----------------------------------------------------------------------------------
DOC_EXTENSIONS: Final = _word_set("md mdx markdown rst txt adoc asciidoc org tex rtf")
CODE_EXTENSIONS: Final = _word_set(
    "py pyi js mjs cjs jsx ts tsx go rs java kt kts rb php c h cc cpp cxx hpp cs swift scala "
    "sh bash zsh ps1 sql css scss sass less html htm vue svelte json jsonl yaml yml toml ini "
    "cfg conf xml ipynb lua pl dart ex exs erl hs ml clj gradle properties tf hcl proto "
    "graphql gql lock"
)
_OTHER_EXTENSIONS: Final = _word_set("csv tsv pdf png jpg jpeg gif svg env log")
KNOWN_EXTENSIONS: Final = DOC_EXTENSIONS | CODE_EXTENSIONS | _OTHER_EXTENSIONS
_CODE_NAMES: Final = _word_set(
    "Makefile Dockerfile Procfile Justfile Gemfile Rakefile Vagrantfile Jenkinsfile"
)
_DOTFILES: Final = re.compile(
    r"\.(?:env(?:\.[\w-]+)?|gitignore|gitattributes|gitmodules|editorconfig|dockerignore|"
    r"npmrc|nvmrc|prettierrc|eslintrc|flake8|bashrc|zshrc|profile|htaccess)",
)
# Product names that look like files ("Node.js") but are not paths.
_NOT_PATHS: Final = _word_set(
    "node.js vue.js next.js nuxt.js react.js express.js three.js d3.js chart.js ember.js "
    "backbone.js angular.js alpine.js socket.io"
)
_QUOTED: Final = re.compile(
    r"`([^`\n]{1,400})`|\"([^\"\n]{1,400})\"|“([^”\n]{1,400})”|(?<!\w)'([^'\s]{1,400})'(?!\w)"
)
_PATH_CHARS: Final = re.compile(r"[\w./\\*?\[\]{}~:+-]+")
_PATH_CHARS_SPACED: Final = re.compile(r"[\w ./\\*?\[\]{}~:+-]+")
_LEADING: Final = "([{<'\"`“‘«"
_TRAILING: Final = ")]}>'\"`”’»,;:!?"
_LINE_SUFFIX: Final = re.compile(r"(?<=\w):\d+(?::\d+)?$")
_ABSOLUTE: Final = re.compile(r"^(?:/|~[\w.-]*(?:/|$)|[A-Za-z]:/)")
_GLOB_CHARS: Final = frozenset("*?[]{}")
_SHOWN_CHARS: Final = 80


@dataclass(frozen=True)
class _Candidate:
    """A path-looking mention, kept even when refused so it can be asked about."""

    raw: str  # as written
    value: str  # normalised workspace-relative path (or the refused text)
    start: int
    end: int
    problem: str | None = None  # "absolute" | "traversal"
    glob: bool = False
    directory: bool = False

    @property
    def extension(self) -> str:
        last = self.value.rstrip("/").rsplit("/", 1)[-1]
        return last.rsplit(".", 1)[-1].lower() if "." in last.lstrip(".") else ""

    @property
    def is_code(self) -> bool:
        last = self.value.rstrip("/").rsplit("/", 1)[-1]
        return self.extension in CODE_EXTENSIONS or last in _CODE_NAMES


def _strip_token(token: str) -> str:
    """Drop sentence punctuation, quotes and markdown emphasis around a path."""
    previous = None
    while previous != token:
        previous = token
        token = token.lstrip(_LEADING).rstrip(_TRAILING)
        token = re.sub(r"(?<=[\w*])\.+$", "", token)  # a full stop, not "a/.."
        for mark in ("**", "__", "*", "_"):
            inner = token[len(mark) : -len(mark)]
            if token.startswith(mark) and token.endswith(mark) and inner and "*" not in inner:
                token = inner
                break
    return _LINE_SUFFIX.sub("", token)


def _known_file(last: str) -> bool:
    if last.lower() in _NOT_PATHS:
        return False
    if last in _CODE_NAMES or _DOTFILES.fullmatch(last):
        return True
    stem, dot, extension = last.rpartition(".")
    return bool(dot and stem.strip(".") and extension.lower() in KNOWN_EXTENSIONS)


def _as_path(text: str, *, quoted: bool) -> tuple[str, str | None, bool, bool] | None:
    """(normalised value, problem, is glob, is directory) when ``text`` reads as a path.

    Bare words need a strong signal (a known extension or file name, a trailing slash, a
    slash inside a pattern) so "and/or" or "e.g." never become files; quoted text only needs
    a slash. Absolute paths and ".." are recognised in order to be refused, not followed.
    """
    if not text or len(text) > 300 or "://" in text or "@" in text:
        return None
    if not (_PATH_CHARS_SPACED if quoted else _PATH_CHARS).fullmatch(text):
        return None
    path = text.replace("\\", "/")
    segments = path.split("/")
    last = path.rstrip("/").rsplit("/", 1)[-1]
    if " " in path and not _known_file(last):
        return None
    if _ABSOLUTE.match(path) and re.search(r"\w", path):
        return (path, "absolute", False, path.endswith("/"))
    if ".." in segments and ("/" in path or quoted):
        return (path, "traversal", False, path.endswith("/"))
    path = _normalise(path)
    if not path or path in {".", "/"}:
        return None
    glob = any(ch in _GLOB_CHARS for ch in path)
    directory = path.endswith("/")
    if glob:
        ok = "/" in path or "." in last
        ok = ok and bool(re.search(r"\w", path))
    elif directory:
        ok = len(path.rstrip("/").split("/")[0]) >= 2
    else:
        ok = _known_file(last) or (quoted and "/" in path)
    return (path, None, glob, directory) if ok else None


def _normalise(path: str) -> str:
    """Collapse "./", "//" and "." segments: the same file always reads the same."""
    trailing = path.endswith("/")
    parts = [p for p in path.split("/") if p not in {"", "."}]
    joined = "/".join(parts)
    return joined + "/" if trailing and joined else joined


def _candidate(
    raw: str, start: int, end: int, parsed: tuple[str, str | None, bool, bool]
) -> _Candidate:
    """Keep the mention as written (minus sentence punctuation) as the evidence."""
    value, problem, glob, directory = parsed
    shown = re.sub(r"(?<=\w)\.+$", "", raw.rstrip(",;:!?)]}>”’»"))
    return _Candidate(shown, value, start, end, problem, glob, directory)


def _overlaps(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end) meets one of ``spans`` (sorted, disjoint) — in log time, so a
    request full of quoted paths stays linear."""
    i = bisect_right(spans, (end, -1)) - 1
    return i >= 0 and spans[i][1] > start and spans[i][0] < end


def _candidates(text: str, *, lenient: bool = False) -> list[_Candidate]:
    """Every path mention in order; backticks and quotes take precedence over bare words.

    ``lenient`` treats a one-word text as quoted: an answer "docs/faq" is clearly a path.
    """
    found: list[_Candidate] = []
    for match in _QUOTED.finditer(text):
        inner = next(g for g in match.groups() if g is not None)
        parsed = _as_path(inner.strip(), quoted=True)
        if parsed:
            found.append(_candidate(match.group(0), match.start(), match.end(), parsed))
    taken = [(c.start, c.end) for c in found]
    single = lenient and len(text.split()) == 1
    for match in re.finditer(r"\S+", text):
        if _overlaps(taken, match.start(), match.end()):
            continue
        parsed = _as_path(_strip_token(match.group(0)), quoted=single)
        if parsed:
            found.append(_candidate(match.group(0), match.start(), match.end(), parsed))
    return sorted(found, key=lambda c: c.start)


# --- input --------------------------------------------------------------------------------
def _analysis_text(text: str) -> str:
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


def _checked_request(request: str) -> str:
    """Refuse what cannot be a task (X4) with a message the requester can act on."""
    if not isinstance(request, str):
        raise TypeError(f"the request must be text, not {type(request).__name__}")
    if len(request) > MAX_REQUEST_CHARS:
        raise ValueError(
            f"the request is too long ({len(request)} characters; the limit is "
            f"{MAX_REQUEST_CHARS}): describe the task and point to files instead of pasting them"
        )
    text = _analysis_text(request)
    if len(text) > _MAX_FOLDED_CHARS:
        raise ValueError(
            f"the request is too long once its compatibility characters are expanded "
            f"({len(text)} characters; the limit is {_MAX_FOLDED_CHARS})"
        )
    if not text.strip():
        raise ValueError("the request is empty: say what the agent should do")
    return text


def _checked_answers(answers: Mapping[str, str]) -> dict[str, str]:
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


# --- intent ---------------------------------------------------------------------------------
def _evidence(matches: Iterable[re.Match[str]]) -> str:
    return ", ".join(sorted({" ".join(m.group(1).lower().split()) for m in matches}))


def _edited_in_place(
    text: str, verb: re.Match[str], candidates: list[_Candidate]
) -> _Candidate | None:
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
    if match is None or _BULK_OBJECT.search(match.group("object")):
        return None
    return container


def _containers(text: str, candidates: list[_Candidate]) -> set[int]:
    """Start offsets (a candidate's identity) of the files edited in place."""
    found = set()
    for pattern in (_DELETE, _RENAME):
        for verb in pattern.finditer(text):
            container = _edited_in_place(text, verb, candidates)
            if container is not None:
                found.add(container.start)
    return found


def _is_reference(text: str, candidate: _Candidate) -> bool:
    """A file the change is based on ("… from docs/old.md") is read, not written."""
    return bool(_REFERENCE_MARKER.search(text[max(0, candidate.start - 40) : candidate.start]))


def _write_targets(text: str, candidates: list[_Candidate]) -> list[_Candidate]:
    containers = _containers(text, candidates)
    return [c for c in candidates if c.start in containers or not _is_reference(text, c)]


def _is_code(text: str, targets: list[_Candidate]) -> bool:
    """Target files decide when there are any; otherwise words like "function" do."""
    paths = [t for t in targets if not t.problem]
    if paths:
        return any(t.is_code for t in paths)
    return bool(_CODE_WORDS.search(text))


def _masked(text: str, candidates: list[_Candidate]) -> str:
    """The text with every path blanked out: the words inside a path name a file, not
    what to do with it ("Summarize docs/release-notes.md" publishes nothing)."""
    chars = list(text)
    for candidate in candidates:
        chars[candidate.start : candidate.end] = " " * (candidate.end - candidate.start)
    return "".join(chars)


def _classify(text: str) -> tuple[Intent, str]:
    candidates = _candidates(text)
    words = _masked(text, candidates)
    if publish := list(_PUBLISH.finditer(words)):
        return "publish", _evidence(publish)
    edits: list[re.Match[str]] = []
    for pattern, intent in ((_DELETE, "delete"), (_RENAME, "rename")):
        plain = []
        for verb in pattern.finditer(words):
            (edits if _edited_in_place(text, verb, candidates) else plain).append(verb)
        if plain:
            return intent, _evidence(plain)  # type: ignore[return-value]
    if writes := [*_WRITE.finditer(words), *edits]:
        code = _is_code(text, _write_targets(text, candidates))
        return ("code_change" if code else "doc_update"), _evidence(writes)
    questions = list(_QUESTION.finditer(words))
    mark = "?" if _QUESTION_MARK.search(words) else ""
    if questions or mark:
        return "question", ", ".join(filter(None, [_evidence(questions), mark]))
    return "unknown", ""


def classify_intent(request: str) -> tuple[Intent, str]:
    """(intent, the words that decided it).

    Precedence publish > delete > rename > doc_update/code_change > question > unknown:
    when a request mixes them, the most consequential one governs the task's safety.
    """
    return _classify(_checked_request(request))


# --- parameters -----------------------------------------------------------------------------
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


def _rename_roles(text: str, candidates: list[_Candidate]) -> dict[str, list[_Candidate]]:
    """ "rename A to B", "move A into B/", "mv A B", "A: rename it to B"."""
    verb = _RENAME.search(text)
    start = verb.end() if verb else 0
    after = [c for c in candidates if c.start >= start]
    before = [c for c in candidates if c.start < start]
    spans = [(c.start, c.end) for c in candidates]
    connectors = [
        m.start()
        for m in _RENAME_CONNECTOR.finditer(text, start)
        if not _overlaps(spans, m.start(), m.end())
    ]
    if connectors:
        source = [c for c in after if c.end <= connectors[0]][:1] or before[-1:]
        target = [c for c in after if c.start >= connectors[0]][:1]
    else:
        source = after[:1] or before[-1:]
        target = after[1:2] if after else []
    return {"source": source, "target": target}


def _assign(text: str, intent: Intent, candidates: list[_Candidate]) -> dict[str, list[_Candidate]]:
    """Which mention plays which part: what is deleted, renamed, written or only read."""
    if intent == "rename":
        return _rename_roles(text, candidates)
    if intent == "delete":
        verb = _DELETE.search(text)
        after = [c for c in candidates if verb and c.start >= verb.end()]
        return {"path": after or candidates}
    if intent in {"doc_update", "code_change"}:
        targets = _write_targets(text, candidates)
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
    spans = [(c.start, c.end) for c in _candidates(text)]
    for match in _NAMED_DOC.finditer(text):
        if _overlaps(spans, match.start(), match.end()):
            continue  # "faq" inside docs/faq.md is the path, not a second name
        specific, qualifier, noun = match.groups()
        if specific:
            return Parameter("document", " ".join(specific.lower().split()), match.group(0))
        if qualifier.lower() not in _VAGUE_QUALIFIERS:
            phrase = f"{qualifier} {noun}"
            return Parameter("document", phrase.lower(), phrase)
    return None


def _problem(role: _Role, candidate: _Candidate) -> str | None:
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
    seen: set[tuple[str, str]] = set()
    kept = []
    for parameter in parameters:
        if (parameter.name, parameter.value) not in seen:
            seen.add((parameter.name, parameter.value))
            kept.append(parameter)
    return kept


def _gate_paths(
    role: _Role, found: list[_Candidate], answer: str | None, document: bool
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
    given = _candidates(answer, lenient=True)
    answered = [Parameter(role.name, c.value, "answer") for c in given if not _problem(role, c)]
    answer_problems = [(p, c.value) for c in given if (p := _problem(role, c))]
    if answered and not answer_problems:
        return _dedupe(valid + answered), None
    return valid, _missing(role, answer_problems or [("not_path", answer)], answered=True)


def _gate_environment(
    role: _Role, found: list[tuple[str, str]], answer: str | None
) -> tuple[list[Parameter], MissingParameter | None]:
    if found:
        return [Parameter(role.name, v, e) for v, e in found], None
    if answer is None:
        return [], _missing(role, [], answered=False)
    answered = _environments(answer, _ENV_IN_ANSWER)
    if answered:
        return [Parameter(role.name, v, "answer") for v, _ in answered], None
    return [], _missing(role, [("not_environment", answer)], answered=True)


def _gate(
    text: str, intent: Intent, answers: Mapping[str, str]
) -> tuple[tuple[Parameter, ...], tuple[MissingParameter, ...]]:
    """Parameters per role, and the questions that stop the run until answered."""
    roles = _assign(text, intent, _candidates(text))
    document = _named_document(text) if intent in {"doc_update", "code_change"} else None
    parameters: list[Parameter] = []
    missing: list[MissingParameter] = []
    for role in ROLES[intent]:
        answer = _analysis_text(answers.get(role.name, "")).strip() or None
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
    return _gate(_checked_request(request), intent, _NO_ANSWERS)[0]


# --- boundaries and approval ----------------------------------------------------------------
_READ_TOOLS: Final = ("readSource", "glob", "grep", "searchDocs")
_EDIT_TOOLS: Final = (
    *_READ_TOOLS,
    "createDraft",
    "patchDraft",
    "runValidation",
    "requestApproval",
    "commitDraft",
)
TOOLS: Final[dict[Intent, tuple[str, ...]]] = {
    "question": _READ_TOOLS,
    "doc_update": _EDIT_TOOLS,
    "code_change": _EDIT_TOOLS,
    "delete": (*_READ_TOOLS, "deleteFile", "requestApproval"),
    "rename": (*_READ_TOOLS, "renameFile", "requestApproval"),
    "publish": (*_READ_TOOLS, "runValidation", "requestApproval", "publish"),
    "unknown": _READ_TOOLS,
}
_WRITING_ROLES: Final = frozenset({"path", "source", "target"})


def _boundaries(
    intent: Intent, parameters: tuple[Parameter, ...], available_tools: Sequence[str]
) -> Boundaries:
    """Least privilege: write only the files the task names, use only the tools it needs."""
    writes: list[str] = []
    if intent not in {"question", "unknown"}:
        for p in parameters:
            if p.name in _WRITING_ROLES and p.value not in writes:
                writes.append(p.value)
    tools = TOOLS[intent]
    if available_tools:
        tools = tuple(t for t in tools if t in set(available_tools))
    return Boundaries(("**",), tuple(writes), tools)


_INTENT_APPROVAL: Final[dict[Intent, str]] = {
    "delete": "deleting a file needs a person's strong confirmation",
    "rename": "renaming a file needs a person's strong confirmation",
    "publish": "publishing always needs a person",
    "doc_update": "changing a file needs a person to confirm the diff",
    "code_change": "changing a file needs a person to confirm the diff",
}


def _approval(intent: Intent, risk: RiskAssessment) -> ApprovalDecision:
    """SPEC P3 by intent, raised by risk; never lowered by anything the requester claims."""
    reasons = [_INTENT_APPROVAL[intent]] if intent in _INTENT_APPROVAL else []
    if risk.level in {"high", "critical"}:
        features = ", ".join(f.feature for f in risk.factors)
        reasons.append(f"risk {risk.level}: {features}")
    if reasons:
        return ApprovalDecision(True, "; ".join(reasons))
    return ApprovalDecision(False, f"read-only task at risk {risk.level}: reading is automatic")


def _risk(text: str, answers: Mapping[str, str]) -> RiskAssessment:
    """Risk of what will be done — the request and the answers that complete it — with
    every claim about safety recorded as ignored, including a few risk.py does not know."""
    answered = [_analysis_text(answers[name]) for name in sorted(answers)]
    whole = "\n".join([text, *answered])
    risk = assess_risk(whole)
    extra = [c for c in dict.fromkeys(m.group(1).lower() for m in _EXTRA_CLAIMS.finditer(whole))]
    claims = (*risk.ignored_claims, *(c for c in extra if c not in risk.ignored_claims))
    return replace(risk, ignored_claims=claims)


# --- the pipeline -------------------------------------------------------------------------
def intake(
    request: str,
    *,
    answers: Mapping[str, str] = _NO_ANSWERS,
    available_tools: Sequence[str] = (),
) -> StructuredTask:
    """Turn a request (and the requester's answers so far) into a structured task (R1).

    Run it again with more ``answers`` to resume after a question: intake is a pure
    function of its inputs, so the resumed task is exactly what one complete request gives.
    """
    text = _checked_request(request)
    checked = _checked_answers(answers)
    if isinstance(available_tools, str) or not all(isinstance(t, str) for t in available_tools):
        raise ValueError("available_tools must be a list of tool names")
    intent, evidence = _classify(text)
    risk = _risk(text, checked)
    parameters, missing = _gate(text, intent, checked)
    return StructuredTask(
        request=request,
        intent=intent,
        intent_evidence=evidence,
        risk=risk,
        parameters=parameters,
        missing=missing,
        boundaries=_boundaries(intent, parameters, available_tools),
        approval=_approval(intent, risk),
        answers=tuple(sorted(checked.items())),
    )


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


def _task_from_json(data: Mapping[str, Any]) -> StructuredTask:
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
        risk=RiskAssessment(
            level=_choice(_field(risk, "level", str, "risk"), LEVELS, "risk level"),
            score=_field(risk, "score", int, "risk"),
            factors=tuple(
                Factor(*r)
                for r in _records(risk, "factors", "risk", ("feature", "weight", "evidence"))
            ),
            ignored_claims=_texts(risk, "ignored_claims", "risk"),
        ),
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
