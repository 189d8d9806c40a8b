"""Resolving a tool's path inside its workspace, links followed (SPEC P2).

Resolution happens right before each use, so a link created during a run is seen for what
it is. The result is the real path, checked to be inside the workspace's real root.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .core.paths import ROOT, PathRefused, check_plain, normalize_relative


@dataclass(frozen=True)
class WorkspacePath:
    relative: str  # what rules match: a/b/c, as the workspace sees it
    absolute: Path  # the real file, links resolved

    def __str__(self) -> str:
        return self.relative


def resolve_in_workspace(root: Path | str, raw: object) -> WorkspacePath:
    """Refuse lexical tricks, then follow links and refuse anything that lands outside."""
    relative = normalize_relative(raw)
    real_root = os.path.realpath(root)
    candidate = os.path.join(real_root, relative)
    real = os.path.realpath(candidate)
    prefix = real_root.rstrip(os.sep) + os.sep
    if real != real_root and not real.startswith(prefix):
        raise PathRefused(f"{relative} leads outside the workspace (through a link).")
    if real == real_root:
        raise PathRefused("The path names the workspace itself, not a file in it.")
    inside = Path(real).relative_to(real_root).as_posix()
    return WorkspacePath(relative=inside, absolute=Path(real))


def resolve_in_root(root: Path | str, raw: object, *, one_name: bool = False) -> str:
    """A path an MCP server is given, resolved once against the folder that server serves
    (its ``root``): ``.`` and the root's own absolute path name the root (:data:`ROOT`);
    an absolute path counts only if it lands inside; links are followed, and anything that
    ends outside the root is refused. The result is what globs match, relative to the root.
    ``one_name`` (a server that restricts paths): a file with hard links is refused, since
    no glob sees which of its names is the forbidden one.
    """
    text = check_plain(raw)
    if text.startswith("~"):
        raise PathRefused("Home paths are refused; give a path inside the server's folder.")
    real_root = os.path.realpath(root)
    if text.startswith("/"):
        candidate = text
    else:
        candidate = os.path.join(real_root, normalize_relative(text, allow_root=True))
    if ".." in candidate.split("/"):
        raise PathRefused("Paths with .. are refused; give a path inside the server's folder.")
    real = os.path.realpath(candidate)
    if real == real_root:
        return ROOT
    prefix = real_root.rstrip(os.sep) + os.sep
    if not real.startswith(prefix):
        raise PathRefused(f"{text} leads outside the folder the server serves.")
    if one_name:
        _refuse_hard_links(real, text)
    return Path(real).relative_to(real_root).as_posix()


def _refuse_hard_links(real: str, shown: str) -> None:
    try:
        status = os.stat(real)
    except OSError:  # nothing there yet (a file to write): no other name
        return
    if not stat.S_ISDIR(status.st_mode) and status.st_nlink > 1:
        raise PathRefused(
            f"{shown} has {status.st_nlink} hard links: it may be another name of a file "
            "this server forbids."
        )


MAX_TREE_ENTRIES = 20_000


def tree_entries(root: Path | str, relative: str, *, one_name: bool = False) -> Iterator[str]:
    """Every entry under a folder of a server's root, relative to the root, a link as where
    it leads: a tool that lists or searches a whole tree reaches each, so each is checked
    like a path named outright (lazily: the first forbidden one ends the walk). A link out
    of the root, or a tree too large to look through, is refused (PathRefused). Not a
    folder: nothing under it. ``one_name``: an entry with hard links is refused, as in
    :func:`resolve_in_root`."""
    real_root = os.path.realpath(root)
    start = real_root if relative == ROOT else os.path.join(real_root, relative)
    if not os.path.isdir(start):
        return
    seen = 0
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        for name in (*dirnames, *filenames):
            seen += 1
            if seen > MAX_TREE_ENTRIES:
                raise PathRefused(f"{relative} holds over {MAX_TREE_ENTRIES} entries to check.")
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                yield resolve_in_root(real_root, full, one_name=one_name)
                continue
            if one_name:
                _refuse_hard_links(full, Path(full).relative_to(real_root).as_posix())
            yield Path(full).relative_to(real_root).as_posix()
