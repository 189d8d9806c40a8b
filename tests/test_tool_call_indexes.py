"""A tool call's people (who asked for it, who approved it) are indexed only where set: a
run's own calls, nearly all of them, cost those indexes nothing, and the one lookup they
serve, the SET NULL of a deleted user, still goes through them (runs migration 0032)."""

from __future__ import annotations

import re

from django.db import connection

from runs.models import ToolCall

PEOPLE = {
    "tool_call_requested_by_idx": "requested_by_id",
    "tool_call_approved_by_idx": "approved_by_id",
}


def _definitions() -> dict[str, str]:
    """Each index of the tool call table: its definition, as the database holds it."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", ["runs_toolcall"]
            )
        else:
            cursor.execute(
                "SELECT name, coalesce(sql, '') FROM sqlite_master"
                " WHERE type = 'index' AND tbl_name = %s",
                ["runs_toolcall"],
            )
        return dict(cursor.fetchall())


def _plan(sql: str, params: list) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: ask for the index
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


def test_each_person_column_has_one_index_and_it_holds_only_rows_where_it_is_set(db):
    definitions = _definitions()
    for name, column in PEOPLE.items():
        on_column = [d for d in definitions.values() if re.search(rf'\(\s*"?{column}"?\s*\)', d)]
        assert on_column == [definitions[name]], (column, on_column)
        assert re.search(rf'WHERE\s+\(?"?{column}"? IS NOT NULL', definitions[name], re.I), (
            definitions[name]
        )


def test_a_deleted_user_s_calls_are_found_by_the_partial_indexes_and_kept(personas, run, workspace):
    asked = ToolCall.objects.create(
        workspace=workspace,
        tool="readSource",
        decision="allow",
        status="ok",
        requested_by=personas.admin,
    )
    approved = ToolCall.objects.create(
        run=run,
        workspace=workspace,
        tool="deleteFile",
        decision="ask",
        status="ok",
        approved_by=personas.approver,
    )
    own = ToolCall.objects.create(
        run=run, workspace=workspace, tool="searchDocs", decision="allow", status="ok"
    )
    for name, column in PEOPLE.items():
        sql = f'UPDATE "runs_toolcall" SET "{column}" = NULL WHERE "{column}" IN (%s, %s)'  # noqa: S608
        assert name in _plan(sql, [personas.admin.pk, personas.approver.pk])

    personas.admin.delete()
    personas.approver.delete()

    kept = {c.pk: (c.requested_by_id, c.approved_by_id) for c in ToolCall.objects.all()}
    assert kept == {asked.pk: (None, None), approved.pk: (None, None), own.pk: (None, None)}
