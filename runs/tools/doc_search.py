"""searchDocs (SPEC T3): ranked full-text search over a workspace's documents, through a
real index (SQLite FTS5 or PostgreSQL full-text), refreshed from disk before each search.

Only regular text documents are indexed (Markdown, reStructuredText, plain text), never
``.git``; results the policy would not let the agent read are left out. The files are read
in a tool child under the tool's deadline (``builtin/doc_scan.py``), the index written
after, outside any file read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from policies.models import Workspace

from ..models import DocIndexEntry
from .isolation import run_isolated

MAX_RESULTS = 20
SCAN_TIMEOUT_SECONDS = 30.0
_WORD = re.compile(r"\w+", re.UNICODE)
SCAN = "runs.tools.builtin.doc_scan:scan_docs"


class ScanFailed(Exception):
    """The files could not be read within the deadline; ``reply`` is the tool error."""

    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__(reply.get("error", "the scan failed"))
        self.reply = reply


def _title(text: str, path: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.lstrip("#= ").strip()[:300] or path
    return path


def doc_index_refresh(workspace: Workspace, *, timeout: float = SCAN_TIMEOUT_SECONDS) -> int:
    """Bring the index in line with the disk; returns how many documents changed.

    1. The files are walked and read in a tool child under ``timeout`` (``doc_scan.py``):
       a FIFO, a device or a slow disk stops there, and a cancel stops it too.
    2. Only then, with every byte in hand, one transaction updates the index: no file is
       read while it holds the database (SQLite's write lock above all). When the disk
       holds what the index says (most searches), nothing is written and no lock taken.

    The index's entries are read without their text: what was indexed is known by each
    file's modification time and size.
    """
    known = {
        path: [mtime_ns, size]
        for path, mtime_ns, size in _entries(workspace).values_list("path", "mtime_ns", "size")
    }
    reply = run_isolated(
        impl=SCAN,
        root=str(Path(workspace.root).resolve()),
        drafts=str(workspace.drafts_path),
        args={"known": known},
        timeout=timeout,
    )
    if not reply.get("ok"):
        raise ScanFailed(reply)
    present, texts = reply["present"], reply["texts"]
    keep = set(present) | set(reply.get("deferred", []))
    if not texts and keep >= known.keys():
        return 0
    return _index_write(workspace, present, texts, keep)


def _index_write(
    workspace: Workspace, present: dict[str, list[int]], texts: dict[str, str], keep: set[str]
) -> int:
    """The index made to hold ``texts`` (what changed on disk, read with its modification
    time and size in ``present``), without what is no longer in ``keep``; in one
    transaction. Runs of one workspace refresh at once (a threaded worker): one at a time
    past its start (the workspace's row locked; SQLite's write lock does it alone), each
    reading the index again, so a document another refresh just indexed is kept."""
    changed = 0
    with transaction.atomic():
        # FOR NO KEY UPDATE: refreshes of one workspace wait for each other, but a row that
        # refers to the workspace (a tool call, a rollup delta) is not kept waiting.
        list(
            Workspace.objects.select_for_update(no_key=True)
            .filter(pk=workspace.pk)
            .values_list("pk")
        )
        entries = {e.path: e for e in _entries(workspace).only("id", "path", "mtime_ns", "size")}
        for path, entry in entries.items():
            if path not in keep:
                entry.delete()  # its full-text row with it (SQLite: migration 0031's trigger)
                changed += 1
        for path, text in texts.items():
            indexed = entries.get(path)
            if indexed is not None and [indexed.mtime_ns, indexed.size] == list(present[path]):
                continue  # indexed by a refresh that ran meanwhile
            _document_write(workspace, indexed, path, text, present[path])
            changed += 1
    return changed


def _document_write(
    workspace: Workspace, indexed: Any, path: str, text: str, stat: list[int]
) -> None:
    title, (mtime_ns, size) = _title(text, path), stat
    if indexed is None:
        indexed = DocIndexEntry.objects.create(
            workspace=workspace, path=path, title=title, content=text, mtime_ns=mtime_ns, size=size
        )
    else:
        indexed.title, indexed.content = title, text
        indexed.mtime_ns, indexed.size = mtime_ns, size
        indexed.save(update_fields=["title", "content", "mtime_ns", "size"])
    _fts_insert(indexed)


def _entries(workspace: Workspace) -> Any:
    return DocIndexEntry.objects.filter(workspace=workspace)


def _fts_delete(pk: int) -> None:
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM runs_doc_fts WHERE rowid = %s", [pk])


def _fts_insert(entry: DocIndexEntry) -> None:
    """The entry's row of the full-text index, in place of any row under its key: the
    entry's own older text, or a row left behind under a key the database gave out again
    (``manage.py flush`` restarts the keys; before migration 0031 an entry removed by its
    workspace's cascade or a flush left its row). Such a row made every insert under its
    key fail, and would have answered searches with text no document holds."""
    if connection.vendor == "sqlite":
        _fts_delete(entry.pk)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO runs_doc_fts(rowid, title, content) VALUES (%s, %s, %s)",
                [entry.pk, entry.title, entry.content],
            )


def _search_sqlite(workspace: Workspace, words: list[str], joiner: str) -> list[dict[str, Any]]:
    match = joiner.join(f'"{word}"' for word in words)
    sql = (
        "SELECT e.path, e.title, snippet(runs_doc_fts, 1, '[', ']', '…', 12), "
        "bm25(runs_doc_fts, 5.0, 1.0) AS score "
        "FROM runs_doc_fts JOIN runs_docindexentry e ON e.id = runs_doc_fts.rowid "
        "WHERE runs_doc_fts MATCH %s AND e.workspace_id = %s ORDER BY score LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [match, workspace.pk, MAX_RESULTS * 3])
        rows = cursor.fetchall()
    return [
        {"path": p, "title": t, "snippet": s, "score": round(-score, 4)} for p, t, s, score in rows
    ]


_PG_VECTOR = (
    "setweight(to_tsvector('english', coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('english', content), 'B')"
)


# Built once from constants; every word of a query is a bound parameter.
_PG_SEARCH = " ".join(
    [
        "SELECT path, title, ts_headline('english', content, to_tsquery('english', %s),",
        "'StartSel=[, StopSel=], MaxWords=24, MinWords=8'),",
        "ts_rank(" + _PG_VECTOR + ", to_tsquery('english', %s)) AS score",
        "FROM runs_docindexentry WHERE workspace_id = %s",
        "AND (" + _PG_VECTOR + ") @@ to_tsquery('english', %s) ORDER BY score DESC, path LIMIT %s",
    ]
)


def _search_postgresql(workspace: Workspace, words: list[str], joiner: str) -> list[dict]:
    query = (" & " if joiner == " " else " | ").join(words)
    sql = _PG_SEARCH
    with connection.cursor() as cursor:
        cursor.execute(sql, [query, query, workspace.pk, query, MAX_RESULTS * 3])
        rows = cursor.fetchall()
    return [
        {"path": p, "title": t, "snippet": s, "score": round(float(score), 4)}
        for p, t, s, score in rows
    ]


def search_docs(
    workspace: Workspace,
    query: str,
    *,
    readable: Any = None,
    timeout: float = SCAN_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """All words first (AND); if nothing matches, any word (OR). ``readable(path)`` filters
    out documents the caller may not read; ``timeout`` bounds reading the files."""
    words = [w.lower() for w in _WORD.findall(query)][:20]
    if not words:
        return {"ok": False, "error": "The query has no words to search for."}
    try:
        doc_index_refresh(workspace, timeout=timeout)
    except ScanFailed as failed:
        return failed.reply
    search = _search_sqlite if connection.vendor == "sqlite" else _search_postgresql
    results = search(workspace, words, " ") or search(workspace, words, " OR ")
    if readable is not None:
        results = [r for r in results if readable(r["path"])]
    results = results[:MAX_RESULTS]
    return {
        "ok": True,
        "results": results,
        "summary": f"{len(results)} document(s) match {' '.join(words)}.",
    }
