"""searchDocs (SPEC T3): ranked full-text search through a real index, kept current."""

from __future__ import annotations

import pytest
from django.db import connection

from policies.core.default_policy import DEFAULT_POLICY
from policies.models import Workspace
from runs.models import DocIndexEntry
from runs.tools.call import tool_call_run
from runs.tools.doc_search import doc_index_refresh

pytestmark = pytest.mark.django_db


def search(workspace, query):
    record = tool_call_run(
        workspace=workspace, tool="searchDocs", arguments={"query": query}, policy=DEFAULT_POLICY
    )
    assert record.status == "ok", record.error
    return record.output["results"]


@pytest.fixture
def docs(workspace):
    """Not the shared broken-link folder: pages that rank against each other, a page the
    policy hides and a binary file, which the tests count exactly; the workspace, to search."""
    root = workspace.root_path
    (root / "docs").mkdir()
    (root / "docs" / "install.md").write_text(
        "# Installing\n\nInstall the service with pip. Then configure the port.\n"
    )
    (root / "docs" / "port.md").write_text(
        "# Port configuration\n\nThe port is 8080. Change the port in the port setting.\n"
    )
    (root / "docs" / "other.md").write_text("# Logging\n\nLogs go to stderr.\n")
    (root / ".env.md").write_text("# secrets\n\nport password hunter2\n")
    (root / "notes.bin").write_bytes(b"port " * 10)
    return workspace


def test_results_are_ranked_and_come_with_a_snippet(docs):
    results = search(docs, "port configuration")
    assert [r["path"] for r in results][:2] == ["docs/port.md", "docs/install.md"]
    assert results[0]["title"] == "Port configuration"
    assert "[port]" in results[0]["snippet"].lower() or "[Port]" in results[0]["snippet"]
    assert results[0]["score"] > results[1]["score"]


def test_any_word_is_tried_when_no_document_has_all(docs):
    assert [r["path"] for r in search(docs, "logs zebra")] == ["docs/other.md"]


def test_the_index_follows_edits_and_deletions_on_disk(docs):
    search(docs, "logging")
    (docs.root_path / "docs" / "other.md").write_text("# Tracing\n\nSpans go to the collector.\n")
    (docs.root_path / "docs" / "install.md").unlink()
    assert search(docs, "logging") == []
    assert [r["path"] for r in search(docs, "collector")] == ["docs/other.md"]
    assert search(docs, "pip") == []
    assert not DocIndexEntry.objects.filter(path="docs/install.md").exists()


def test_nothing_is_indexed_twice_and_an_unchanged_tree_changes_nothing(docs):
    assert doc_index_refresh(docs) == 5  # AGENTS.md and the four documents; not the binary
    assert doc_index_refresh(docs) == 0
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM runs_doc_fts")
            assert cursor.fetchone()[0] == 5


def test_a_document_the_policy_denies_is_never_returned(docs):
    assert "password" not in str(search(docs, "password hunter2"))


@pytest.mark.parametrize("query", ['"unclosed', "port AND OR NOT", "*", "col:umn", "'; DROP"])
def test_query_syntax_never_breaks_the_search(docs, query):
    record = tool_call_run(
        workspace=docs, tool="searchDocs", arguments={"query": query}, policy=DEFAULT_POLICY
    )
    assert record.status in ("ok", "error")
    if record.status == "error":
        assert record.error == "The query has no words to search for."


def test_an_unchanged_tree_is_checked_without_a_lock_or_the_documents_text(docs):
    """Most searches find the disk as the index has it: one read of what was indexed (by
    modification time and size, never the documents' text), and no write or lock."""
    from django.test.utils import CaptureQueriesContext

    doc_index_refresh(docs)
    with CaptureQueriesContext(connection) as queries:
        assert doc_index_refresh(docs) == 0
    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) == 1, statements
    assert '"content"' not in statements[0] and "FOR UPDATE" not in statements[0]
    (docs.root_path / "docs" / "other.md").write_text("# Logging\n\nLogs go to a file.\n")
    with CaptureQueriesContext(connection) as queries:
        assert doc_index_refresh(docs) == 1
    assert not any(
        '"content"' in q["sql"] and q["sql"].lstrip().upper().startswith("SELECT")
        for q in queries.captured_queries
    )


def _fts_rows() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT rowid FROM runs_doc_fts")
        return {rowid for (rowid,) in cursor.fetchall()}


def test_a_stale_row_of_the_index_under_a_reused_key_is_replaced(docs):
    # A row left under a key the database gives out again (manage.py flush restarts the
    # keys; before migration 0031 a cascade left rows too): indexing under that key failed
    # with "constraint failed", and the old text would have matched searches.
    doc_index_refresh(docs)
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL's index is a column of the entry's own row")
    entry = DocIndexEntry.objects.order_by("-pk").first()  # the next key is its again
    DocIndexEntry.objects.filter(pk=entry.pk).delete()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runs_doc_fts(rowid, title, content) VALUES (%s, 'Old', 'stale words')",
            [entry.pk],
        )
        cursor.execute(
            "UPDATE sqlite_sequence SET seq = %s WHERE name = 'runs_docindexentry'",
            [entry.pk - 1],
        )
    (docs.root_path / entry.path).write_text("# Tracing\n\nSpans go to the zanzibar.\n")
    assert [r["path"] for r in search(docs, "zanzibar")] == [entry.path]
    assert DocIndexEntry.objects.get(path=entry.path).pk == entry.pk
    assert search(docs, "stale words") == []


def test_an_entry_removed_by_its_workspace_s_cascade_takes_its_row_along(docs):
    doc_index_refresh(docs)
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL's index is a column of the entry's own row")
    keys = set(DocIndexEntry.objects.filter(workspace=docs).values_list("pk", flat=True))
    assert keys and keys <= _fts_rows()
    Workspace.objects.filter(pk=docs.pk).delete()
    assert not DocIndexEntry.objects.filter(pk__in=keys).exists()
    assert not keys & _fts_rows()
