"""A run's change rebased onto a file that changed after its approval was asked (A2, A3,
B1), pure: several runs change one document, the first commits, and the second's draft
(or its approver's edit of it) must land on the file as it is now, not overwrite it.

The base is what the request's diff was taken against. It is not stored: the recorded diff
(base → draft) is applied backwards to the draft, and the result must hash to the file's
recorded hash, so a base is either exactly the one the approvers saw or none at all. Then
a three-way merge (``merge3``, the merge of Bazaar and Breezy) of the base, our side (the
draft, or the approver's edit applied to the base) and theirs (the file now): clean, or the
regions where both sides changed the same lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from merge3 import Merge3

from .fingerprint import content_hash
from .patch import FilePatch, Hunk, PatchError, apply_file_patch, parse_patch


@dataclass(frozen=True)
class Merged:
    text: str
    theirs: list[tuple[int, int]]  # (first, last) lines of the result the file's change holds


@dataclass(frozen=True)
class Conflicted:
    regions: list[tuple[int, int]]  # (first, last) lines of the base both sides changed


def reversed_patch(patch: FilePatch) -> FilePatch:
    """The same hunks from the new side to the old: ``+`` and ``-`` swapped, each hunk
    placed where it starts in the new file."""
    hunks, shift = [], 0
    for hunk in patch.hunks:
        old, new = len(hunk.old_lines), len(hunk.new_lines)
        first_old = hunk.old_start if old else hunk.old_start + 1  # 1-based first line
        first_new = first_old + shift
        start = first_new if new else first_new - 1  # an empty side names the line before
        swapped = tuple(({"+": "-", "-": "+"}.get(op, op), text) for op, text in hunk.lines)
        hunks.append(Hunk(start, swapped))
        shift += new - old
    return FilePatch(patch.new_path, patch.old_path, tuple(hunks))


def base_of(draft: str, diff: str, path: str, expected_hash: str | None) -> str | None:
    """The text ``diff`` was taken against, for the file at ``path``: the draft with the
    diff's hunks for that file undone, if it hashes to ``expected_hash``; else None."""
    try:
        patches = [p for p in parse_patch(diff) if p.path == path]
        if len(patches) != 1 or patches[0].old_path is None or patches[0].new_path is None:
            return None
        base = apply_file_patch(draft.replace("\r\n", "\n"), reversed_patch(patches[0]))
    except PatchError:
        return None
    # The diff does not say whether the last line ended with a newline, or how lines ended.
    unterminated = base[:-1] if base.endswith("\n") else base
    for candidate in (base, unterminated):
        for text in (candidate, candidate.replace("\n", "\r\n")):
            if content_hash(text.encode("utf-8")) == expected_hash:
                return text
    return None


def merge(base: str, ours: str, theirs: str) -> Merged | Conflicted:
    """Our change and theirs, both from ``base``: merged when no line both changed."""
    merger = Merge3(
        base.splitlines(keepends=True),
        ours.splitlines(keepends=True),
        theirs.splitlines(keepends=True),
    )
    conflicts: list[tuple[int, int]] = []
    moved: list[tuple[int, int]] = []
    out: list[str] = []
    for region in merger.merge_regions():
        kind = region[0]
        if kind == "conflict":
            conflicts.append((region[1] + 1, max(region[2], region[1] + 1)))
        elif kind == "unchanged":
            out += merger.base[region[1] : region[2]]
        elif kind in ("a", "same"):
            out += merger.a[region[1] : region[2]]
        else:  # "b": only the file changed these lines
            if region[2] > region[1]:
                moved.append((len(out) + 1, len(out) + region[2] - region[1]))
            out += merger.b[region[1] : region[2]]
    if conflicts:
        return Conflicted(conflicts)
    return Merged("".join(out), moved)


def lines_text(spans: list[tuple[int, int]]) -> str:
    """``lines 3–5, 9``: for a reason an approver or the model reads."""
    shown = [f"{a}–{b}" if b > a else f"{a}" for a, b in spans[:5]]
    more = f" and {len(spans) - 5} more" if len(spans) > 5 else ""
    return (
        ("line " if len(spans) == 1 and "–" not in shown[0] else "lines ") + ", ".join(shown) + more
    )
