"""Full-text search of run requests: the runs list's ``q`` (issue 19), on both databases.

As ``searchDocs`` does (runs.tools.doc_search), a query is reduced to its words (``\\w+``,
any script) before it reaches a search syntax, so quotes, ``*``, ``NEAR``, ``AND``,
parentheses or a colon are never operators: on SQLite each word is a quoted FTS5 string
(the index of migration 0028, ``runs_run_fts``); on PostgreSQL the words are joined with
``&`` for ``to_tsquery`` over the expression the GIN index holds. Every word must match
(stemmed: "publish" finds "published"). Words and length are capped so that no address
makes a query the database refuses or takes long to plan.
"""

from __future__ import annotations

import re

from django.db import connection
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from policies.models import EvalTraffic

MAX_QUERY_CHARS = 500
MAX_WORDS = 20
_WORD = re.compile(r"\w+", re.UNICODE)


class BadSearch(ValueError):
    """A query that cannot be searched for; the message says why (a 400, never a 500)."""


_SQLITE = '"runs_run"."rowid" IN (SELECT rowid FROM runs_run_fts WHERE runs_run_fts MATCH %s)'
_POSTGRESQL = "to_tsvector('english', \"runs_run\".\"request\") @@ to_tsquery('english', %s)"


def search_words(query: str) -> list[str]:
    """The words of ``query``, lowercased; :class:`BadSearch` when it has none, or too many."""
    if len(query) > MAX_QUERY_CHARS:
        raise BadSearch(f"q is too long to search for ({MAX_QUERY_CHARS} characters at most).")
    words = [word.lower() for word in _WORD.findall(query)]
    if not words:
        raise BadSearch(f"q has no words to search for: {query[:80]!r}.")
    if len(words) > MAX_WORDS:
        raise BadSearch(f"q has {len(words)} words; search for {MAX_WORDS} at most.")
    return words


def runs_searched(runs: EvalTraffic, query: str) -> EvalTraffic:
    """The runs whose request holds every word of ``query``."""
    words = search_words(query)
    if connection.vendor == "postgresql":
        # Each word is a single operand: \w+ holds none of to_tsquery's & | ! ( ) : * '.
        condition = RawSQL(_POSTGRESQL, [" & ".join(words)], output_field=BooleanField())  # noqa: S611
    else:
        # Inside double quotes an FTS5 word is a string, never an operator or a column.
        match = " ".join(f'"{word}"' for word in words)
        condition = RawSQL(_SQLITE, [match], output_field=BooleanField())  # noqa: S611
    # The SQL is a constant; the words are bound parameters (noqa S611 above).
    return runs.filter(condition)
