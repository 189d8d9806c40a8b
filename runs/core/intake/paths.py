"""Path candidates in a request: every mention that reads as a workspace file, and how.

Bare words need a strong signal to be a path, so prose never becomes files; quoted text
needs less. Paths that leave the workspace (absolute, "..") are recognised in order to be
refused, never followed: they are kept as candidates with their problem, so intake can ask
about them instead of silently dropping them.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Final

from .vocabulary import word_set

# What makes a bare word a file: a known extension, a known name, a dotfile. The lists are
# about file names, not about what a request asks, so they stay with the path rules.
DOC_EXTENSIONS: Final = word_set("md mdx markdown rst txt adoc asciidoc org tex rtf")
CODE_EXTENSIONS: Final = word_set(
    "py pyi js mjs cjs jsx ts tsx go rs java kt kts rb php c h cc cpp cxx hpp cs swift scala "
    "sh bash zsh ps1 sql css scss sass less html htm vue svelte json jsonl yaml yml toml ini "
    "cfg conf xml ipynb lua pl dart ex exs erl hs ml clj gradle properties tf hcl proto "
    "graphql gql lock"
)
_OTHER_EXTENSIONS: Final = word_set("csv tsv pdf png jpg jpeg gif svg env log")
KNOWN_EXTENSIONS: Final = DOC_EXTENSIONS | CODE_EXTENSIONS | _OTHER_EXTENSIONS
_CODE_NAMES: Final = word_set(
    "Makefile Dockerfile Procfile Justfile Gemfile Rakefile Vagrantfile Jenkinsfile"
)
_DOTFILES: Final = re.compile(
    r"\.(?:env(?:\.[\w-]+)?|gitignore|gitattributes|gitmodules|editorconfig|dockerignore|"
    r"npmrc|nvmrc|prettierrc|eslintrc|flake8|bashrc|zshrc|profile|htaccess)",
)
# Product names that look like files ("Node.js") but are not paths.
_NOT_PATHS: Final = word_set(
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


@dataclass(frozen=True)
class Candidate:
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
) -> Candidate:
    """Keep the mention as written (minus sentence punctuation) as the evidence."""
    value, problem, glob, directory = parsed
    shown = re.sub(r"(?<=\w)\.+$", "", raw.rstrip(",;:!?)]}>”’»"))
    return Candidate(shown, value, start, end, problem, glob, directory)


def overlaps(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end) meets one of ``spans`` (sorted, disjoint) — in log time, so a
    request full of quoted paths stays linear."""
    i = bisect_right(spans, (end, -1)) - 1
    return i >= 0 and spans[i][1] > start and spans[i][0] < end


def path_candidates(text: str, *, lenient: bool = False) -> list[Candidate]:
    """Every path mention in order; backticks and quotes take precedence over bare words.

    ``lenient`` treats a one-word text as quoted: an answer "docs/faq" is clearly a path.
    """
    found: list[Candidate] = []
    for match in _QUOTED.finditer(text):
        inner = next(g for g in match.groups() if g is not None)
        parsed = _as_path(inner.strip(), quoted=True)
        if parsed:
            found.append(_candidate(match.group(0), match.start(), match.end(), parsed))
    taken = [(c.start, c.end) for c in found]
    single = lenient and len(text.split()) == 1
    for match in re.finditer(r"\S+", text):
        if overlaps(taken, match.start(), match.end()):
            continue
        parsed = _as_path(_strip_token(match.group(0)), quoted=single)
        if parsed:
            found.append(_candidate(match.group(0), match.start(), match.end(), parsed))
    return sorted(found, key=lambda c: c.start)
