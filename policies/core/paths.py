"""Lexical checks of a path a tool was given, before any filesystem access (SPEC P2, T3).

A path must be relative to the workspace and plainly written: no ``..``, no absolute or
home paths, no backslashes, no NUL or control characters, no percent-encoding, and no
Unicode that normalises to something else (a fullwidth ``．．／`` is a ``../`` in disguise).
Anything else is refused with the reason, never repaired: a repaired path is a guessed path.
The filesystem half (links) is ``policies.paths``.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

MAX_PATH_CHARS: Final = 1024
ROOT: Final = "."  # how a path naming the root itself is written, for a server's folder
_PERCENT: Final = re.compile(r"%[0-9A-Fa-f]{2}")
# Slash look-alikes that NFKC leaves alone; a name containing one is written to deceive.
_SLASH_LOOKALIKES: Final = frozenset("\u2215\u2044\u29f8\u2571\u3033\u30ce")
# Invisible and direction-changing characters: what is shown is not what is opened.
_HIDDEN_CATEGORIES: Final = frozenset({"Cf", "Cs", "Co", "Zl", "Zp"})


class PathRefused(ValueError):
    """A path outside the workspace or written to hide where it goes; says why."""


def check_plain(raw: object) -> str:
    """The path's text, if it is plainly written (whether relative or not), or PathRefused."""
    if not isinstance(raw, str):
        raise PathRefused("A path must be text.")
    if raw.strip() == "":
        raise PathRefused("The path is empty.")
    if len(raw) > MAX_PATH_CHARS:
        raise PathRefused(f"The path is longer than {MAX_PATH_CHARS} characters.")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
        raise PathRefused("The path contains a NUL or control character.")
    if "\\" in raw:
        raise PathRefused("Use / to separate folders; backslashes are refused.")
    if _PERCENT.search(raw):
        raise PathRefused("Percent-encoded paths are refused; write the path plainly.")
    if unicodedata.normalize("NFKC", raw) != raw or any(ch in _SLASH_LOOKALIKES for ch in raw):
        raise PathRefused("The path has look-alike Unicode characters (it changes under NFKC).")
    if any(unicodedata.category(ch) in _HIDDEN_CATEGORIES for ch in raw):
        raise PathRefused("The path has invisible or direction-changing characters.")
    return raw


def normalize_relative(raw: object, *, allow_root: bool = False) -> str:
    """The path as a clean ``a/b/c`` string relative to the workspace, or PathRefused.
    ``allow_root``: ``.`` (and ``./``) names the root itself, written :data:`ROOT` (an MCP
    server's tools take their folder as an argument; a built-in tool names files in it)."""
    raw = check_plain(raw)
    if raw.startswith(("/", "~")):
        raise PathRefused("Absolute and home paths are refused; give a path inside the workspace.")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise PathRefused("Paths with .. are refused; give a path inside the workspace.")
    if not parts:
        if allow_root:
            return ROOT
        raise PathRefused("The path names the workspace itself, not a file in it.")
    return "/".join(parts)
