"""The runs list's pages: keyset paging, newest first (issue 19).

A page is the runs just older (``after``) or just newer (``before``) than a cursor, the
(created_at, id) of the run at its edge: an index range (``run_list_idx``), as fast on the
millionth run as on the first, where an offset would read and drop every run before it.
The id breaks ties, so runs created in the same microsecond are neither skipped nor
repeated. Page numbers come from counts that stop at ``COUNT_CAP``: exact below it, "many"
beyond.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from .run_filters import BadFilter

PAGE_SIZE = 50
# Counting stops here: past it the list says "many" instead of reading every run.
COUNT_CAP = 100_000
NEWEST = ("-created_at", "-id")
OLDEST = ("created_at", "id")
# A cursor: the run's created_at in microseconds since the epoch, a dot, its id in hex.
_CURSOR = re.compile(r"(\d{1,17})\.([0-9a-f]{32})")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Cursor:
    created_at: datetime
    id: uuid.UUID


@dataclass
class RunPage:
    """One page of runs, with what its pager needs."""

    runs: list[Any]
    total: int  # capped at COUNT_CAP
    number: int | None  # None: past the counted runs
    newer: str = ""  # the cursor of "← newer", "" on the first page
    older: str = ""  # the cursor of "older →", "" on the last page
    size: int = PAGE_SIZE

    @property
    def total_exact(self) -> bool:
        return self.total < COUNT_CAP

    @property
    def pages(self) -> int | None:
        """How many pages, or None when there are too many runs to count."""
        if not self.total_exact:
            return None
        return max(1, -(-self.total // self.size))

    @property
    def has_other_pages(self) -> bool:
        return bool(self.newer or self.older)


def cursor_of(run: Any) -> str:
    micros = (run.created_at - _EPOCH) // _MICROSECOND
    return f"{micros}.{run.id.hex}"


def cursor_read(name: str, text: str) -> Cursor:
    """The cursor of a pager link; :class:`BadFilter` for anything this list did not make."""
    found = _CURSOR.fullmatch(text)
    if found is None:
        raise BadFilter(
            f"{name} must be a cursor from the list's own links (microseconds.run-id), "
            f"not {text[:80]!r}."
        )
    micros, hex_id = found.groups()
    try:
        created_at = _EPOCH + int(micros) * _MICROSECOND
    except OverflowError:
        raise BadFilter(f"{name} names a moment past any run's.") from None
    return Cursor(created_at=created_at, id=uuid.UUID(hex_id))


def _older(c: Cursor) -> Q:
    return Q(created_at__lt=c.created_at) | Q(created_at=c.created_at, id__lt=c.id)


def _newer(c: Cursor) -> Q:
    return Q(created_at__gt=c.created_at) | Q(created_at=c.created_at, id__gt=c.id)


def _capped_count(runs: QuerySet[Any]) -> int:
    """At most COUNT_CAP: a count of a limited subquery reads no further than the cap."""
    return runs.order_by().values("pk")[:COUNT_CAP].count()


def run_page(runs: QuerySet[Any], params: Mapping[str, Any], size: int = PAGE_SIZE) -> RunPage:
    """The page of ``runs`` the address asks for: ``after`` a cursor (older runs),
    ``before`` one (newer runs), ``last=1`` (the oldest), or else the first page.

    1. Read the cursor (one of after, before, last; a bad one is a BadFilter).
    2. Fetch one row more than a page in the direction of travel: it says whether there is
       a page beyond.
    3. Number the page by counting the runs newer than its first (capped).
    """
    after, before = str(params.get("after", "")), str(params.get("before", ""))
    last = str(params.get("last", "")) == "1"
    if sum(map(bool, (after, before, last))) > 1:
        raise BadFilter("Ask for one page: after, before or last, not several.")
    total = _capped_count(runs)
    if before:
        return _newer_page(runs, cursor_read("before", before), total, size)
    if last and total <= size:
        return _first_page(runs, total, size)
    if last:
        # The last page holds what is left after full pages, as it would paging forward.
        left = (total % size or size) if total < COUNT_CAP else size
        rows = list(runs.order_by(*OLDEST)[:left])[::-1]
        number = -(-total // size) if total < COUNT_CAP else None
        return RunPage(rows, total, number, newer=cursor_of(rows[0]), size=size)
    if after:
        start = cursor_read("after", after)
        rows = list(runs.filter(_older(start)).order_by(*NEWEST)[: size + 1])
        # Past the oldest run (it was removed, or the cursor was edited): newer ones remain.
        return _numbered(runs, rows, total, size, newer=after if not rows else "")
    return _first_page(runs, total, size)


def _first_page(runs: QuerySet[Any], total: int, size: int) -> RunPage:
    rows = list(runs.order_by(*NEWEST)[: size + 1])
    return _numbered(runs, rows, total, size, newer=None, number=1)


def _newer_page(runs: QuerySet[Any], start: Cursor, total: int, size: int) -> RunPage:
    rows = list(runs.filter(_newer(start)).order_by(*OLDEST)[: size + 1])
    if len(rows) <= size:
        # Back at the top: the first page, full, rather than a short page above it.
        return _first_page(runs, total, size)
    page = rows[:size][::-1]
    return RunPage(
        page,
        total,
        _number(runs, page[0], size),
        newer=cursor_of(page[0]),
        older=cursor_of(page[-1]),
        size=size,
    )


def _numbered(
    runs: QuerySet[Any],
    rows: list[Any],
    total: int,
    size: int,
    *,
    newer: str | None,
    number: int | None = None,
) -> RunPage:
    """A page read newest first; ``newer`` is None on the first page, else the cursor of
    "← newer" when the page is empty ("" to take its first run's)."""
    page, more = rows[:size], len(rows) > size
    if number is None:
        number = _number(runs, page[0], size) if page else None
    if newer == "" and page:
        newer = cursor_of(page[0])
    return RunPage(
        page,
        total,
        number,
        newer=newer or "",
        older=cursor_of(page[-1]) if more else "",
        size=size,
    )


def _number(runs: QuerySet[Any], first: Any, size: int) -> int | None:
    """The page's number: the runs before its first one, in pages (None past the cap)."""
    before = _capped_count(runs.filter(_newer(Cursor(first.created_at, first.id))))
    return None if before >= COUNT_CAP else before // size + 1
