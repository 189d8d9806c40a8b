"""An approval request's fingerprint taken from the workspace as it is now, and as recorded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from policies.core.diffs import file_diff
from policies.permissions import policy_for_agent
from policies.regular_files import read_regular

from .core.fingerprint import Fingerprint, content_hash, fingerprint_changes
from .core.patch import PatchError

MAX_FINGERPRINT_BYTES = 20 * 1024 * 1024  # the tools' own limit for a file they write

DIFF_TOOLS = frozenset({"commitDraft"})


def fingerprint_now(
    *,
    run: Any,
    kind: str,
    tool: str,
    arguments: dict[str, Any],
    paths: Sequence[str],
    policy_version: int | None,
) -> Fingerprint:
    """The diff a person is shown and the hashes of the files it changes, as they are now.

    ``paths`` were resolved inside the workspace by the permission check; one that leads
    outside anyway is neither read nor shown (hash None)."""
    root = run.workspace.root_path
    drafts = run.workspace.drafts_path / str(run.pk)
    paths = [p for p in paths if p]
    if kind == "commit" or tool in DIFF_TOOLS:
        diff = "".join(file_diff(_read(root, p), _read(drafts, p), p) for p in paths)
    elif tool == "deleteFile":
        diff = "".join(file_diff(_read(root, p), None, p) for p in paths)
    else:
        diff = ""
    hashes = {p: content_hash(_read(root, p)) for p in paths}
    return Fingerprint(kind, tool, arguments, diff, hashes, policy_version)


def originals_for(run: Any, paths: Sequence[str]) -> dict[str, str | None]:
    """The current text of each workspace file an edited patch applies to (None: absent).
    A file that is not UTF-8 text is refused, never decoded lossily and written back."""
    originals: dict[str, str | None] = {}
    for path in paths:
        data = _read(run.workspace.root_path, path)
        try:
            originals[path] = None if data is None else data.decode("utf-8")
        except UnicodeDecodeError:
            raise PatchError(f"{path} is not UTF-8 text, so it cannot be edited") from None
    return originals


def file_bytes(base: Path, relative: str) -> bytes | None:
    """A regular file under ``base``, read as the fingerprint reads it (None: absent, not a
    regular file, too large, or outside ``base``)."""
    return _read(base, relative)


def _read(base: Path, relative: str) -> bytes | None:
    try:
        target = (base / relative).resolve()
        if not target.is_relative_to(base.resolve()):
            return None
        # A regular file only, bounded: a FIFO or a huge file is "no file" (no tool would
        # read or write it either), never a hang or the whole file in memory.
        return read_regular(target, MAX_FINGERPRINT_BYTES)
    except (OSError, ValueError):
        return None


def changes_since_asked(approval: Any) -> list[str]:
    """What changed since a pending request was asked (files, policy), for its review page:
    approving it would only invalidate it when the worker checks again."""
    shown = fingerprint_recorded(approval)
    now = fingerprint_now(
        run=approval.run,
        kind=approval.kind,
        tool=approval.tool,
        arguments=approval.arguments,
        paths=approval.paths,
        policy_version=policy_for_agent(approval.run.agent).version,
    )
    return fingerprint_changes(shown, now)


def fingerprint_recorded(approval: Any) -> Fingerprint:
    """The fingerprint of what the approvers were shown, as recorded with the request."""
    return Fingerprint(
        approval.kind,
        approval.tool,
        approval.arguments,
        approval.diff,
        approval.file_hashes,
        approval.policy_version,
    )
