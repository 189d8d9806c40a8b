"""Unified diffs of two versions of a file, the one shape every page shows a change in: a
write's record, an approval request, an instruction version's history. Pure; binary
content is described, never decoded lossily."""

from __future__ import annotations

import difflib


def file_diff(before: bytes | None, after: bytes | None, path: str) -> str:
    """A unified diff of two versions; binary content is described, never fails."""
    try:
        old = before.decode("utf-8").splitlines() if before is not None else []
        new = after.decode("utf-8").splitlines() if after is not None else []
    except UnicodeDecodeError:
        sizes = [("absent" if b is None else f"{len(b)} bytes") for b in (before, after)]
        return f"Binary file {path}: {sizes[0]} before, {sizes[1]} after.\n"
    lines = difflib.unified_diff(
        [line + "\n" for line in old],
        [line + "\n" for line in new],
        f"a/{path}" if before is not None else "/dev/null",
        f"b/{path}" if after is not None else "/dev/null",
    )
    return "".join(lines)


def text_diff(old: str, new: str, old_label: str, new_label: str) -> str:
    """Two texts with labels of the caller's choosing. Every line ends with a newline here,
    so a last line without one is not glued to the next line of the diff."""
    return "".join(
        difflib.unified_diff(
            [line + "\n" for line in old.splitlines()],
            [line + "\n" for line in new.splitlines()],
            old_label,
            new_label,
        )
    )
