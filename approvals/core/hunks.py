"""Review at hunk level (issue 18, B7), pure: an approver accepts or rejects each hunk of a
diff on its own; the rejected hunks are dropped and the accepted ones make the patch that is
applied. The model is told, per hunk, what became of its change.

Hunks are numbered from 1 within each file, in the order the diff lists them (the review
page, the API and the model's note all use these numbers). A patch of the accepted hunks is
an ordinary patch for :func:`approvals.core.patch.apply_patch`: the applier matches each
hunk by its old start, which leaving other hunks out does not move, so applying the
accepted subset is applying those hunks alone. A file none of whose hunks is accepted is
left out of the patch, and keeps its text.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .patch import FilePatch, Hunk, PatchError, parse_patch

Rejected = Mapping[str, Collection[int]]  # path → numbers of its rejected hunks


@dataclass(frozen=True)
class HunkRef:
    """One hunk as a person refers to it: ``hunk 2 of docs/x.md (@@ -10,4 +10,6 @@)``."""

    path: str
    number: int  # 1-based within its file
    of: int  # how many hunks the file has
    header: str

    @property
    def key(self) -> str:
        """How a form and the page name it: the path, a colon, the number."""
        return f"{self.path}:{self.number}"

    @property
    def label(self) -> str:
        return f"hunk {self.number} of {self.path} ({self.header})"


Verdict = Literal["accepted", "rejected by approver", "modified by approver", "added by approver"]


@dataclass(frozen=True)
class HunkVerdict:
    """What became of one hunk: ``final_text`` is the text that replaces the hunk's old
    lines in the file when an approver modified (or added) it, else ""."""

    ref: HunkRef
    verdict: Verdict
    final_text: str = ""


def _range(start: int, length: int) -> str:
    """A side of a hunk header as ``difflib`` writes it (the producer's diffs do)."""
    return str(start) if length == 1 else f"{start},{length}"


def _headers(patch: FilePatch) -> list[str]:
    """Each hunk's header, counts taken from its body and the new side's start from the
    hunks before it (the header an editor left is not trusted, as in the applier)."""
    headers, shift = [], 0
    for hunk in patch.hunks:
        old, new = len(hunk.old_lines), len(hunk.new_lines)
        first_old = hunk.old_start if old else hunk.old_start + 1  # 1-based first line
        first_new = first_old + shift
        new_start = first_new if new else first_new - 1  # an empty side names the line before
        headers.append(f"@@ -{_range(hunk.old_start, old)} +{_range(new_start, new)} @@")
        shift += new - old
    return headers


def hunks_of(text: str) -> list[HunkRef]:
    """Every hunk of a diff, numbered per file; raises PatchError for a diff that cannot
    be read (a binary change has no hunks to choose)."""
    refs = []
    for patch in parse_patch(text):
        headers = _headers(patch)
        refs += [HunkRef(patch.path, n, len(headers), h) for n, h in enumerate(headers, 1)]
    return refs


def render_patch(patches: Iterable[FilePatch]) -> str:
    """Unified diff text of ``patches``, as the producer writes it (``a/``, ``b/``,
    ``/dev/null``, ``difflib``'s headers)."""
    out = []
    for patch in patches:
        out.append(f"--- {'a/' + patch.old_path if patch.old_path else '/dev/null'}\n")
        out.append(f"+++ {'b/' + patch.new_path if patch.new_path else '/dev/null'}\n")
        for header, hunk in zip(_headers(patch), patch.hunks, strict=True):
            out.append(header + "\n")
            out += [f"{op}{line}\n" for op, line in hunk.lines]
    return "".join(out)


def rejection_problem(text: str, rejected: Mapping[str, Sequence[object]]) -> str:
    """Why ``rejected`` cannot be applied to the diff ``text``, or "": every path must be a
    file of the diff and every number one of its hunks; at least one hunk must stay, since
    rejecting them all is rejecting the request; and a file can be left out whole only if
    it stays a file (a creation or a deletion is all or nothing with the rest)."""
    try:
        patches = {p.path: p for p in parse_patch(text)}
    except PatchError as error:
        return f"This change cannot be chosen hunk by hunk: {error}"
    chosen: dict[str, set[int]] = {}
    for path, numbers in rejected.items():
        if path not in patches:
            files = ", ".join(sorted(patches))
            return f"{path or '(no path)'} is not a file of this change (it changes {files})."
        count = len(patches[path].hunks)
        for number in numbers:
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                return f"{path}: hunks are numbered from 1; {number!r} is not a hunk number."
            if number > count:
                has = f"{count} hunk{'s' if count != 1 else ''}"
                return f"{path} has {has}: there is no hunk {number}."
        chosen[path] = {n for n in numbers if isinstance(n, int)}
    if sum(map(len, chosen.values())) >= sum(len(p.hunks) for p in patches.values()):
        return (
            "You rejected every hunk: that is a rejection of the whole change. Reject the "
            "request instead, saying why (the model reads it)."
        )
    for path, left_out in chosen.items():
        patch = patches[path]
        if len(left_out) == len(patch.hunks) and None in (patch.old_path, patch.new_path):
            made = "creates" if patch.old_path is None else "deletes"
            return (
                f"This change {made} {path}: it cannot be left out while the rest is "
                "approved. Approve it whole, or reject the request saying what you want."
            )
    return ""


def hunks_select(text: str, rejected: Rejected) -> str:
    """The patch of the hunks of ``text`` that are not rejected; files left with no hunk
    are left out. Raises PatchError for a diff that cannot be read."""
    kept = []
    for patch in parse_patch(text):
        out = set(rejected.get(patch.path, ()))
        hunks = tuple(h for n, h in enumerate(patch.hunks, 1) if n not in out)
        if hunks:
            kept.append(FilePatch(patch.old_path, patch.new_path, hunks))
    return render_patch(kept)


def file_part(text: str, path: str) -> str:
    """The part of a patch that changes ``path`` ("" when it does not)."""
    return render_patch(p for p in parse_patch(text) if p.path == path)


def _overlaps(a: Hunk, b: Hunk) -> bool:
    a_end = a.old_start + max(len(a.old_lines), 1)
    b_end = b.old_start + max(len(b.old_lines), 1)
    return a.old_start < b_end and b.old_start < a_end


def _final_text(hunk: Hunk) -> str:
    return "".join(line + "\n" for line in hunk.new_lines)


def hunks_reviewed(proposed: str, final: str, rejected: Rejected) -> list[HunkVerdict]:
    """What became of each hunk of ``proposed`` when ``final`` is applied instead: rejected
    (chosen so, or left out of an edit), accepted as it was, or modified (with its final
    text); and the hunks an edit added (numbered 0). A final hunk is matched to the
    proposed hunk with the same old start, else to one whose old lines it overlaps."""
    finals = {
        p.path: list(zip(p.hunks, _headers(p), strict=True))
        for p in (parse_patch(final) if final else [])
    }
    verdicts: list[HunkVerdict] = []
    for patch in parse_patch(proposed):
        left = finals.pop(patch.path, [])
        mine = set(rejected.get(patch.path, ()))
        headers = _headers(patch)
        for n, (hunk, header) in enumerate(zip(patch.hunks, headers, strict=True), 1):
            ref = HunkRef(patch.path, n, len(headers), header)
            candidates = [] if n in mine else left
            match = next((f for f in candidates if f[0].old_start == hunk.old_start), None)
            match = match or next((f for f in candidates if _overlaps(f[0], hunk)), None)
            if match is None:
                verdicts.append(HunkVerdict(ref, "rejected by approver"))
                continue
            left.remove(match)
            if match[0].lines == hunk.lines:
                verdicts.append(HunkVerdict(ref, "accepted"))
            else:
                verdicts.append(HunkVerdict(ref, "modified by approver", _final_text(match[0])))
        verdicts += _added(patch.path, left)
    for path, hunks in finals.items():
        verdicts += _added(path, hunks)
    return verdicts


def _added(path: str, hunks: list[tuple[Hunk, str]]) -> list[HunkVerdict]:
    return [
        HunkVerdict(HunkRef(path, 0, 0, header), "added by approver", _final_text(hunk))
        for hunk, header in hunks
    ]


def verdict_text(verdict: HunkVerdict) -> str:
    """``hunk 2 of docs/x.md (@@ -10,4 +10,6 @@) rejected by approver``: for the model."""
    if verdict.verdict == "added by approver":
        return f"a hunk of {verdict.ref.path} ({verdict.ref.header}) added by approver"
    return f"{verdict.ref.label} {verdict.verdict}"
