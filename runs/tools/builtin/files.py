"""The built-in file tools (SPEC T3), framework-free: each takes the workspace, the run's
drafts folder and validated arguments, and returns the output shape of T4.

Writes go to drafts first (T5); only commitDraft, deleteFile and renameFile touch formal
files, and each reports the exact bytes before and after (R8) for the caller to record.
No tool writes itself: each describes its changes (``runs.tools.effects``), and the worker
applies them under the run's fence, so a worker that lost its lease changes nothing.
Every path is resolved inside the workspace at the moment of use (links followed).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

from wcmatch import glob as wcglob

from policies.core.diffs import file_diff

from ..child_context import console, permitted
from ..effects import effect_move, effect_remove, effect_write
from .common import (
    MAX_MATCHES,
    MAX_READ_BYTES,
    Output,
    ToolFailure,
    draft_path,
    read_bounded,
    resolve_at_use,
    utf8_text,
    write_record,
)


def read_source(root: Path, drafts: Path, args: dict) -> Output:
    resolved = resolve_at_use(root, args, "path")
    data = read_bounded(resolved.absolute, MAX_READ_BYTES)
    if data is None:
        raise ToolFailure(f"{resolved.relative} is not a file in the workspace.")
    content = utf8_text(data, resolved.relative)
    return {
        "ok": True,
        "path": resolved.relative,
        "content": content,
        "summary": f"Read {resolved.relative} ({len(data)} bytes).",
    }


def _walk_files(root: Path) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        base = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            if os.path.islink(os.path.join(dirpath, name)):
                continue  # a link may lead anywhere; the listing tools never follow one
            found.append(name if base == "." else f"{base}/{name}".replace(os.sep, "/"))
    return found


def glob_files(root: Path, drafts: Path, args: dict) -> Output:
    pattern = args["pattern"]
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolFailure("Glob patterns are relative to the workspace, without '..'.")
    flags = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
    matches = permitted(p for p in _walk_files(root) if wcglob.globmatch(p, pattern, flags=flags))
    return {
        "ok": True,
        "matches": matches[:MAX_MATCHES],
        "summary": f"{len(matches)} files match {pattern}.",
        "warnings": [f"Only the first {MAX_MATCHES} are listed."]
        if len(matches) > MAX_MATCHES
        else [],
    }


def grep_files(root: Path, drafts: Path, args: dict) -> Output:
    try:
        regex = re.compile(args["pattern"])
    except re.error as error:
        raise ToolFailure(f"Not a valid regular expression: {error}.") from None
    within = args.get("glob", "**")
    flags = wcglob.GLOBSTAR | wcglob.BRACE | wcglob.DOTGLOB
    hits: list[dict[str, Any]] = []
    skipped: list[str] = []
    candidates = [p for p in _walk_files(root) if wcglob.globmatch(p, within, flags=flags)]
    for relative in permitted(candidates):
        try:
            text = (read_bounded(root / relative, MAX_READ_BYTES) or b"").decode("utf-8")
        except UnicodeDecodeError:
            continue
        except ToolFailure as refused:  # a FIFO, a device, a huge file: never read
            skipped.append(f"{relative}: {refused}")
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if regex.search(line):
                hits.append({"path": relative, "line": number, "text": line[:500]})
                if len(hits) >= MAX_MATCHES:
                    return {
                        "ok": True,
                        "matches": hits,
                        "summary": f"{len(hits)} matches.",
                        "warnings": [f"Stopped at {MAX_MATCHES} matches.", *skipped[:20]],
                    }
    return {
        "ok": True,
        "matches": hits,
        "summary": f"{len(hits)} matches.",
        "warnings": skipped[:20],
    }


def create_draft(root: Path, drafts: Path, args: dict) -> Output:
    resolved = resolve_at_use(root, args, "path")
    draft_path(drafts, resolved.relative)  # refuses a draft path leading elsewhere
    formal = read_bounded(resolved.absolute)  # first: a FIFO or a device gets no draft
    effect_write("drafts", resolved.relative, args["content"].encode("utf-8"))
    diff = file_diff(formal, args["content"].encode(), resolved.relative)
    return {
        "ok": True,
        "path": resolved.relative,
        "artifact_id": f"draft:{resolved.relative}",
        "diff": diff,
        "summary": f"Draft of {resolved.relative} written.",
    }


def _apply_search_replace(text: str, search: str, replace: str, path: str) -> str:
    count = text.count(search)
    if count == 0:
        raise ToolFailure(f"The search text does not occur in {path}; nothing changed.")
    if count > 1:
        raise ToolFailure(f"The search text occurs {count} times in {path}; make it unique.")
    return text.replace(search, replace, 1)


def apply_unified_patch(text: str, patch: str, path: str) -> str:
    """Apply a unified diff exactly: every context and removed line must match."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    cursor = 0
    hunk = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
    patch_lines = patch.splitlines(keepends=True)
    index = 0
    found_hunk = False
    while index < len(patch_lines):
        match = hunk.match(patch_lines[index])
        index += 1
        if not match:
            continue
        found_hunk = True
        start = int(match.group(1)) - 1 if int(match.group(2) or 1) else int(match.group(1))
        if start < cursor or start > len(lines):
            raise ToolFailure(f"The patch does not apply to {path}: hunk at line {start + 1}.")
        out.extend(lines[cursor:start])
        cursor = start
        while index < len(patch_lines) and not patch_lines[index].startswith("@@"):
            line = patch_lines[index]
            index += 1
            tag, body = line[:1], line[1:]
            if line.startswith("\\"):
                continue
            if tag in (" ", "-"):
                current = lines[cursor] if cursor < len(lines) else None
                if current is None or current.rstrip("\n") != body.rstrip("\n"):
                    raise ToolFailure(
                        f"The patch does not apply to {path}: line {cursor + 1} differs."
                    )
                cursor += 1
                if tag == " ":
                    out.append(current)
            elif tag == "+":
                out.append(body if body.endswith("\n") else body + "\n")
    if not found_hunk:
        raise ToolFailure("The patch has no hunk (@@ ... @@); send a unified diff.")
    out.extend(lines[cursor:])
    return "".join(out)


def patch_draft(root: Path, drafts: Path, args: dict) -> Output:
    resolved = resolve_at_use(root, args, "path")
    target = draft_path(drafts, resolved.relative)
    base = read_bounded(target)
    if base is None:
        base = read_bounded(resolved.absolute)
    if base is None:
        raise ToolFailure(f"{resolved.relative} has neither a draft nor a file to patch.")
    text = utf8_text(base, resolved.relative)
    if "patch" in args:
        new = apply_unified_patch(text, args["patch"], resolved.relative)
    elif "search" in args and "replace" in args:
        new = _apply_search_replace(text, args["search"], args["replace"], resolved.relative)
    else:
        raise ToolFailure("Give either patch (a unified diff) or search and replace.")
    effect_write("drafts", resolved.relative, new.encode("utf-8"))
    return {
        "ok": True,
        "path": resolved.relative,
        "artifact_id": f"draft:{resolved.relative}",
        "diff": file_diff(base, new.encode(), resolved.relative),
        "summary": f"Draft of {resolved.relative} patched.",
    }


def commit_draft(root: Path, drafts: Path, args: dict) -> Output:
    resolved = resolve_at_use(root, args, "path")
    draft = draft_path(drafts, resolved.relative)
    after = read_bounded(draft)
    if after is None:
        raise ToolFailure(f"There is no draft of {resolved.relative} to commit.")
    before = read_bounded(resolved.absolute)
    effect_write("workspace", resolved.relative, after)
    effect_remove("drafts", resolved.relative)
    return {
        "ok": True,
        "path": resolved.relative,
        "diff": file_diff(before, after, resolved.relative),
        "summary": f"{resolved.relative} {'updated' if before is not None else 'created'}.",
        "writes": [write_record(resolved.relative, before, after)],
    }


def delete_file(root: Path, drafts: Path, args: dict) -> Output:
    resolved = resolve_at_use(root, args, "path")
    if not resolved.absolute.is_file():
        raise ToolFailure(f"{resolved.relative} is not a file in the workspace.")
    before = read_bounded(resolved.absolute) or b""
    effect_remove("workspace", resolved.relative)
    return {
        "ok": True,
        "path": resolved.relative,
        "diff": file_diff(before, None, resolved.relative),
        "summary": f"{resolved.relative} deleted.",
        "writes": [write_record(resolved.relative, before, None)],
    }


def rename_file(root: Path, drafts: Path, args: dict) -> Output:
    source = resolve_at_use(root, args, "source")
    target = resolve_at_use(root, args, "target")
    if not source.absolute.is_file():
        raise ToolFailure(f"{source.relative} is not a file in the workspace.")
    if target.absolute.exists():
        raise ToolFailure(f"{target.relative} exists already; renaming never overwrites.")
    data = read_bounded(source.absolute) or b""
    effect_move("workspace", source.relative, target.relative)
    return {
        "ok": True,
        "path": target.relative,
        "summary": f"{source.relative} renamed to {target.relative}.",
        "writes": [
            write_record(source.relative, data, None),
            write_record(target.relative, None, data),
        ],
    }


def _regular(path: Path) -> bool:
    """Publish copies regular files of one name only: a FIFO or a device would hang or flood
    the copy, a hard link may be another name of a file the policy denies."""
    try:
        status = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(status.st_mode) and status.st_nlink == 1


def publish(root: Path, drafts: Path, args: dict) -> Output:
    """Copy the workspace (not .git, not links) to its publish folder. A production change:
    the policy never lets it run without a person."""
    target = console().get("publish_root")
    if not target:
        raise ToolFailure("This workspace has no publish folder; an admin sets one first.")
    destination = Path(target)
    if destination.resolve().is_relative_to(root.resolve()):
        raise ToolFailure("The publish folder cannot be inside the workspace.")
    # A person approved the publish as a whole; files the policy denies (secrets) never go.
    files = [f for f in permitted(_walk_files(root), need="not_deny") if _regular(root / f)]
    for relative in files:
        source = root / relative
        (destination / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination / relative)
    return {
        "ok": True,
        "path": None,
        "summary": f"Published {len(files)} files to {target}.",
        "published": len(files),
    }
