"""searchDocs' file half (SPEC T3, T6): walk a workspace's documents and read the ones that
changed, in the tool's child process under its deadline, so the index in the database is
brought up to date by the console without a file read inside its transaction.

Only regular text documents are read (Markdown, reStructuredText, plain text), never
``.git``, never a link, never one over ``MAX_DOC_BYTES``; a FIFO named ``x.md`` is passed
over, never opened for a blocking read. A scan reads at most ``MAX_SCAN_BYTES``: the files
past that are ``deferred`` to the next search, their index entries left as they are.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .common import Output, ToolFailure, read_bounded

DOC_SUFFIXES = (".md", ".markdown", ".rst", ".txt")
MAX_DOC_BYTES = 1024 * 1024
MAX_SCAN_BYTES = 32 * 1024 * 1024


def _documents(root: Path) -> dict[str, os.stat_result]:
    """Every regular document by its workspace path, from ``lstat`` (nothing is opened)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            if not name.lower().endswith(DOC_SUFFIXES):
                continue
            full = os.path.join(dirpath, name)
            try:
                info = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_DOC_BYTES:
                found[os.path.relpath(full, root).replace(os.sep, "/")] = info
    return found


def scan_docs(root: Path, drafts: Path, args: dict) -> Output:
    """``args["known"]``: {path: [mtime_ns, size]} as indexed. The reply: every document on
    disk with its [mtime_ns, size], the text of those that changed (UTF-8 only), and the
    changed ones left for the next scan."""
    known = args.get("known") or {}
    present: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    deferred: list[str] = []
    budget = MAX_SCAN_BYTES
    for path, info in _documents(root).items():
        present[path] = [info.st_mtime_ns, info.st_size]
        if known.get(path) == present[path]:
            continue
        if info.st_size > budget:
            deferred.append(path)
            continue
        try:
            data = read_bounded(root / path, MAX_DOC_BYTES)
        except ToolFailure:  # swapped for a FIFO, a device or a link since the walk
            continue
        if data is None:
            continue
        budget -= len(data)
        try:
            texts[path] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return {"ok": True, "present": present, "texts": texts, "deferred": deferred}
