"""searchDocs (SPEC T3): ranked full-text search over a workspace's documents, through a
real index (SQLite FTS5 or PostgreSQL full-text), refreshed from disk before each search.

Only text documents are indexed (Markdown, reStructuredText, plain text), never ``.git``;
results the policy would not let the agent read are left out.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from policies.models import Workspace

from ..models import DocIndexEntry

DOC_SUFFIXES = (".md", ".markdown", ".rst", ".txt")
MAX_DOC_BYTES = 1024 * 1024
MAX_RESULTS = 20
_WORD = re.compile(r"\w+", re.UNICODE)


def _title(text: str, path: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.lstrip("#= ").strip()[:300] or path
    return path


def _scan(root: Path) -> dict[str, os.stat_result]:
    found = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            if name.lower().endswith(DOC_SUFFIXES):
                full = os.path.join(dirpath, name)
                stat = os.lstat(full)
                if os.path.islink(full) or stat.st_size > MAX_DOC_BYTES:
                    continue
                found[os.path.relpath(full, root).replace(os.sep, "/")] = stat
    return found


def doc_index_refresh(workspace: Workspace) -> int:
    """Bring the index in line with the disk; returns how many documents changed."""
    root = Path(workspace.root).resolve()
    on_disk = _scan(root)
    known = {e.path: e for e in DocIndexEntry.objects.filter(workspace=workspace)}
    changed = 0
    with transaction.atomic():
        for path, entry in known.items():
            if path not in on_disk:
                _fts_delete(entry.pk)
                entry.delete()
                changed += 1
        for path, stat in on_disk.items():
            indexed = known.get(path)
            if indexed and (indexed.mtime_ns, indexed.size) == (stat.st_mtime_ns, stat.st_size):
                continue
            try:
                text = (root / path).read_text("utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if indexed is None:
                indexed = DocIndexEntry(workspace=workspace, path=path)
            else:
                _fts_delete(indexed.pk)
            indexed.title, indexed.content = _title(text, path), text
            indexed.mtime_ns, indexed.size = stat.st_mtime_ns, stat.st_size
            indexed.save()
            _fts_insert(indexed)
            changed += 1
    return changed


def _fts_delete(pk: int) -> None:
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM runs_doc_fts WHERE rowid = %s", [pk])


def _fts_insert(entry: DocIndexEntry) -> None:
    if connection.vendor == "sqlite":
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


def search_docs(workspace: Workspace, query: str, *, readable: Any = None) -> dict[str, Any]:
    """All words first (AND); if nothing matches, any word (OR). ``readable(path)`` filters
    out documents the caller may not read."""
    words = [w.lower() for w in _WORD.findall(query)][:20]
    if not words:
        return {"ok": False, "error": "The query has no words to search for."}
    doc_index_refresh(workspace)
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
