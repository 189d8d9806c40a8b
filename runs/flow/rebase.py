"""A commit request whose files changed after it was asked (another run committed to the
same document): the run's drafts, with its approver's edit, are rebased onto the files as
they are now and asked again with the fresh diff; a change that does not merge goes back
to the model with the conflict (A2, A3, B1). Never a request with no content, never an
edit said to be applied that was not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from approvals.core.fingerprint import content_hash
from approvals.core.hunks import file_part
from approvals.core.patch import PatchError, apply_patch
from approvals.core.rebase import Conflicted, base_of, lines_text, merge
from approvals.fingerprint import originals_for
from approvals.models import ApprovalRequest
from policies.core.diffs import file_diff

from ..models import Run
from .checkpoints import username


@dataclass(frozen=True)
class Rebase:
    """What happened to each changed file: ``changes`` say why the request no longer
    holds, ``note`` what the next request is (rebased, with whose edit), ``conflict`` what
    the model is told when a file does not merge. Drafts are already written."""

    changes: list[str]
    note: str = ""
    conflict: str = ""


def drafts_rebase(run: Run, approval: ApprovalRequest) -> Rebase | None:
    """None when no workspace file of the request changed, or its base cannot be known
    exactly (then the request is simply asked again). Otherwise every changed file is
    merged: all merge, and the drafts are rewritten; or one does not, and nothing is."""
    if approval.kind != ApprovalRequest.Kind.COMMIT:
        return None
    try:
        now = originals_for(run, approval.paths)
    except PatchError:
        return None
    changed = [p for p in approval.paths if _hash(now.get(p)) != approval.file_hashes.get(p)]
    if not changed:
        return None
    drafts = run.workspace.drafts_path / str(run.pk)
    editor = username(approval.decided_by) if approval.edited_diff else ""
    hunks = bool(approval.rejected_hunks)  # the approver's "edit" is the hunks they kept
    merged: dict[str, str] = {}
    moved: list[str] = []
    for path in changed:
        theirs = now.get(path)
        draft = _read(drafts / path)
        if theirs is None or draft is None:
            return None  # deleted since, or no draft: nothing to rebase onto
        base = base_of(draft, approval.diff, path, approval.file_hashes.get(path))
        if base is None or file_diff(base.encode(), draft.encode(), path) not in approval.diff:
            return None
        ours = _ours(base, draft, theirs, approval, path)
        if ours is None:
            return None
        result = merge(base, ours, theirs)
        if isinstance(result, Conflicted):
            where = lines_text(result.regions)
            why = (
                f"{path} changed since the request (another change was committed to it) and "
                f"this run's change does not merge with it: both changed {where}"
            )
            return Rebase(
                [why],
                conflict=(
                    f"Your change to {path} could not be committed: {why}. Read {path} as it "
                    "is now and make your change again on top of it."
                ),
            )
        merged[path] = result.text
        if result.text == theirs:
            moved.append(f"{path} (it already holds this change: nothing is left to commit)")
        else:
            came = f" ({lines_text(result.theirs)} came from it)" if result.theirs else ""
            moved.append(f"{path}{came}")
    if not _carried(approval, [p for p in approval.paths if p not in changed], now, drafts):
        return None
    for path, text in merged.items():
        if text == now.get(path):  # the change is in the file already: no empty request
            (drafts / path).unlink(missing_ok=True)
        else:
            (drafts / path).write_text(text, encoding="utf-8")
    with_edit = (
        f", {'without the hunks' if hunks else 'with the edit'} {editor} "
        f"{'rejected' if hunks else 'made'} when approving it,"
        if editor
        else ""
    )
    what = ", ".join(moved)
    return Rebase(
        [
            f"{', '.join(changed)} changed since the request (another change was committed); "
            f"this run's change{with_edit} was rebased onto the file as it is now: {what}"
        ],
        note=f"Rebased onto the file as it is now: {what}."
        + (
            f" {'Leaves out the hunks' if hunks else 'Includes the edit'} {editor} "
            f"{'rejected' if hunks else 'made'} when approving the earlier request."
            if editor
            else ""
        ),
    )


def _ours(base: str, draft: str, theirs: str, approval: ApprovalRequest, path: str) -> str | None:
    """The run's side: its draft, or the approver's edit (or the hunks they accepted)
    applied to the base it was taken against (or, if it does not apply there, to the file
    it was checked against when approved, which is then already the result). A file none
    of whose hunks was accepted is the base: nothing of it is carried."""
    if not approval.edited_diff:
        return draft
    try:
        part = file_part(approval.edited_diff, path)
    except PatchError:
        return None
    if not part:
        return base if path in approval.rejected_hunks else draft
    for original in (base, theirs):
        try:
            edited = apply_patch({path: original}, part, [path])
        except PatchError:
            continue
        return edited.get(path)
    return None


def _carried(
    approval: ApprovalRequest, paths: list[str], now: dict[str, str | None], drafts: Path
) -> bool:
    """The approver's edit (or choice of hunks) written into the drafts of the files that
    did not change, so the request asked again carries it for every file, not only for
    those rebased; False when it cannot be (then nothing is rebased)."""
    if not approval.edited_diff:
        return True
    carried = {}
    for path in paths:
        current, draft = now.get(path), _read(drafts / path)
        ours = (
            None
            if current is None or draft is None
            else _ours(current, draft, current, approval, path)
        )
        if ours is None:
            return False
        carried[path] = ours
    for path, text in carried.items():
        (drafts / path).write_text(text, encoding="utf-8")
    return True


def _hash(text: str | None) -> str | None:
    return content_hash(None if text is None else text.encode("utf-8"))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
