"""Resolving a tool's path inside its workspace, links followed (SPEC P2).

Resolution happens right before each use, so a link created during a run is seen for what
it is. The result is the real path, checked to be inside the workspace's real root.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .core.paths import PathRefused, normalize_relative


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
