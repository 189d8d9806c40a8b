"""What an MCP tool can reach, declared per argument (SPEC T12; STYLE "check every argument a
tool declares, refuse the ones it does not").

A real server's content tools do not only take paths: ``git_show`` takes a revision, and
``HEAD:.env`` names a committed file; ``git_diff`` against the empty tree returns every
file. So each whitelisted tool declares its reach, which an admin can edit and discovery
prefills from the server's input schema:

- every argument is a ``path`` (it names one file or folder under the server's root), a
  ``tree`` (a path whose output covers everything under it: a directory tree, a search), a
  ``revision`` (a ref, a commit, ``rev:path``: its path part is a path), or ``text``
  (content, a message, a count: it names nothing);
- the tool is ``whole_root`` when its output can contain any file under the root whatever
  its arguments (a diff, a show, a log with patches).

An argument the declaration does not name is refused: a check that guesses by names misses
what it was not told about.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from .paths import PathRefused

ArgumentKind = Literal["path", "tree", "revision", "text"]
ARGUMENT_KINDS: Final[tuple[ArgumentKind, ...]] = get_args(ArgumentKind)
MAX_REVISION_CHARS: Final = 256

PATH_KEYS: Final = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "source",
        "src",
        "target",
        "dest",
        "destination",
        "directory",
        "dir",
        "folder",
        "root",
        "cwd",
        "uri",
        "location",
    }
)
PATH_SUFFIXES: Final = ("path", "paths", "file", "dir", "directory", "folder", "uri")
REVISION_KEYS: Final = frozenset(
    {
        "revision",
        "revisions",
        "rev",
        "ref",
        "refs",
        "commit",
        "commitish",
        "sha",
        "hash",
        "branch",
        "branchname",
        "basebranch",
        "startpoint",
        "tag",
        "target",
        "source",
        "since",
        "until",
        "contains",
        "notcontains",
        "base",
        "head",
    }
)
TEXT_KEYS: Final = frozenset(
    {
        "content",
        "contents",
        "text",
        "message",
        "query",
        "pattern",
        "body",
        "title",
        "description",
        "comment",
        "summary",
        "note",
        "edits",
        "oldtext",
        "newtext",
        "search",
        "replace",
        "ticket",
        "starttimestamp",
        "endtimestamp",
        "branchtype",
    }
)
_GIT_TOOL: Final = re.compile(r"(^|[_\-.])git", re.IGNORECASE)
# Tools whose output is any file's content whatever they are asked: a diff, a show, a log
# with patches, a blame, a dump. A revision argument alone does not make one (a checkout).
_WHOLE_ROOT_TOOL: Final = re.compile(
    r"diff|show|log|blame|grep|dump|archive|export|bundle|cat_?file", re.IGNORECASE
)
_TREE_TOOL: Final = re.compile(r"tree|search|find|walk|recursive", re.IGNORECASE)
_REPOSITORY_KEYS: Final = frozenset({"repopath", "repository", "repo", "repodir"})
_REVISION: Final = re.compile(r"[A-Za-z0-9._/~^@{}+\-]+")
_STAGE: Final = re.compile(r":[0-3]:")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")  # file://, C:, HEAD: in a path
# What git reads as a pathspec, not a file: a magic ``:(glob)``, ``:/`` or a wildcard.
_PATHSPEC: Final = re.compile(r"^:|[*?\[]")
# A revision's suffixes (HEAD~1, main^2, v1^{commit}, main@{1}): what is left is a ref name.
_REF_SUFFIX: Final = re.compile(r"(?:[~^][0-9]*|\^\{[a-z]*\}|@\{[^{}]*\})+$")


class ArgumentRefused(ValueError):
    """An argument outside what its tool declared, or written to reach further; says why."""


@dataclass(frozen=True)
class ToolReach:
    arguments: Mapping[str, ArgumentKind] = field(default_factory=dict)
    whole_root: bool = False


def _plain(key: str) -> str:
    return "".join(ch for ch in key.lower() if ch.isalnum())  # filePath, file_path, file-path


def names_a_path(key: str) -> bool:
    plain = _plain(key)
    return plain in PATH_KEYS or plain.endswith(PATH_SUFFIXES)


def _kind_from_schema(tool: str, key: str, schema: Any) -> ArgumentKind | None:
    """The prefilled kind of one argument, or None (undeclared: refused until an admin
    declares it). Revisions win over paths in a git tool (``target`` is a ref there)."""
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    plain = _plain(key)
    if kind in ("integer", "number", "boolean"):  # a count, a flag: it names nothing
        return "text"
    if plain in REVISION_KEYS and (_GIT_TOOL.search(tool) or not names_a_path(key)):
        return "revision"
    if names_a_path(key):  # a git pathspec (git add docs) covers all under it
        git_pathspec = _GIT_TOOL.search(tool) and plain not in _REPOSITORY_KEYS
        return "tree" if _TREE_TOOL.search(tool) or git_pathspec else "path"
    if plain in TEXT_KEYS:
        return "text"
    return None


def reach_from_schema(tool: str, schema: Any, known: Mapping[str, str] | None = None) -> ToolReach:
    """The declaration discovery prefills: ``known`` kinds (an admin's) are kept, new
    arguments get the kind their name and type suggest, or none at all."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    arguments: dict[str, ArgumentKind] = {}
    for key, sub in (properties or {}).items():
        old = (known or {}).get(key)
        kind = old if old in ARGUMENT_KINDS else _kind_from_schema(tool, str(key), sub)
        if kind is not None:
            arguments[str(key)] = kind
    return ToolReach(arguments, bool(_WHOLE_ROOT_TOOL.search(tool)))


def revision_names(value: Any) -> tuple[list[str], str | None]:
    """What a revision could name on disk: its ref tokens (a bare ``secrets/key.txt`` is a
    path to git when it is no revision) and the path of a ``rev:path`` (``HEAD:.env`` names
    ``.env``; ``:0:x``, the index, names ``x``; ``HEAD:`` the root). Options (``-p``,
    ``--output``), ``--`` separators, spaces and anything but a revision's characters are
    refused outright (ArgumentRefused)."""
    if not isinstance(value, str) or not value:
        raise ArgumentRefused("a revision must be non-empty text")
    if len(value) > MAX_REVISION_CHARS:
        raise ArgumentRefused(f"a revision has at most {MAX_REVISION_CHARS} characters")
    if _STAGE.match(value):  # :0:path, a file in the index
        return [], value[3:] or "."
    revision, colon, path = value.partition(":")
    if value.startswith("-") or "--" in revision:
        raise ArgumentRefused(f"{value!r} is an option or a '-- path' form, not a revision")
    if revision and not _REVISION.fullmatch(revision):
        raise ArgumentRefused(f"{value!r} is not a revision (refs, commits, ~, ^ and : only)")
    tokens = [part for part in re.split(r"\.\.\.?", revision) if part]
    for token in tokens:
        if problem := ref_name_problem(token):
            raise ArgumentRefused(f"{value!r} is not a revision: {problem}")
    return tokens, ((path or ".") if colon else None)


def ref_name_problem(token: str) -> str | None:
    """Why a ref token is no ref name by git's rules (check-ref-format), or None. A token
    that is none is no revision git would look up first: ``.``, ``notes/..`` or
    ``notes/../.env`` is a path to ``git checkout``, and a path is not what was declared."""
    name = _REF_SUFFIX.sub("", token)
    if not name:
        return None if token.startswith("@{") or not token else "a suffix names no ref"
    parts = name.split("/")
    if name.startswith("-") or any(not part or part.startswith(".") for part in parts):
        return f"{token!r} has an empty or dot-started part (a path, not a ref name)"
    if name.endswith((".", ".lock")) or "@{" in name or "{" in name or "}" in name:
        return f"{token!r} ends with '.' or '.lock', or has a brace"
    return None


def declared_values(
    reach: ToolReach, arguments: Mapping[str, Any]
) -> list[tuple[str, ArgumentKind, Any]]:
    """Every argument with its declared kind, one value at a time (a list of paths is
    each path); ArgumentRefused for an argument the declaration does not know."""
    unknown = sorted(str(key) for key in arguments if key not in reach.arguments)
    if unknown:
        raise ArgumentRefused(
            f"argument {', '.join(unknown)} is not declared in the tool's reach "
            "(an admin declares each argument as a path, tree, revision or text)"
        )
    found: list[tuple[str, ArgumentKind, Any]] = []
    for key, value in arguments.items():
        kind = reach.arguments[key]
        if kind == "text":
            continue
        values = value if isinstance(value, list) else [value]
        for item in values:
            if not isinstance(item, str):
                raise ArgumentRefused(f"argument {key} is a {kind} and must be text")
            if item.startswith("-"):  # a server that runs a program would take an option
                raise ArgumentRefused(f"argument {key} {item!r} looks like an option")
            if kind != "revision" and _SCHEME.match(item):
                raise ArgumentRefused(f"argument {key} {item!r}: URIs are refused; give a path")
            if kind != "revision" and _PATHSPEC.search(item):
                raise ArgumentRefused(
                    f"argument {key} {item!r}: a pathspec or wildcard (':', '*', '?', '[') "
                    "names files no check sees; give a plain path"
                )
            found.append((key, kind, item))
    return found


def reach_paths(
    reach: ToolReach,
    arguments: Mapping[str, Any],
    resolve: Callable[[Any], str],
    exists: Callable[[str], bool] = lambda path: False,
) -> list[tuple[ArgumentKind, str]]:
    """Every path the call names, resolved against the server's root once, with the kind
    it is checked as: a revision's ``:path`` is a ``path``, its ref tokens are ``revision``,
    or a ``tree`` when one names something on disk (``git checkout notes`` reverts all
    under it). Anything that cannot be resolved inside the root is refused, a ref token
    too: skipping one let ``notes/../secrets`` through."""
    resolved: list[tuple[ArgumentKind, str]] = []
    for key, kind, value in declared_values(reach, arguments):
        candidates: list[tuple[ArgumentKind, str]] = [(kind, value)]
        if kind == "revision":  # its tokens are refs; its :path is a path like any other
            tokens, path = revision_names(value)
            candidates = [("revision", t) for t in tokens] + ([("path", path)] if path else [])
        for named, candidate in candidates:
            try:
                where = resolve(candidate)
            except PathRefused as error:
                raise ArgumentRefused(f"argument {key} {value!r}: {error}") from None
            if named == "revision" and exists(where):
                named = "tree"
            resolved.append((named, where))
    return resolved


_ROOT_OPTIONS: Final = ("--repository", "-r", "--root", "--directory")


def root_from_args(args: list[str], is_dir: Callable[[str], bool]) -> str | None:
    """The folder a server serves, read from its launch arguments: the git server's
    ``--repository`` (or ``-r``), else the first absolute folder among them (the
    filesystem server's first allowed directory, against which it resolves relative
    paths). None: the server serves the folder it is started in."""
    for index, arg in enumerate(args):
        for option in _ROOT_OPTIONS:
            if arg == option and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(option + "="):
                return arg.split("=", 1)[1]
    return next((arg for arg in args if arg.startswith("/") and is_dir(arg)), None)
