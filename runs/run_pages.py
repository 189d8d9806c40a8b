"""The runs list's pages: keyset paging, newest first (issue 19).

A page is the runs just older (``after``) or just newer (``before``) than a cursor, the
(created_at, id) of the run at its edge: an index range (``run_list_idx``), as fast on the
millionth run as on the first, where an offset would read and drop every run before it.
The id breaks ties, so runs created in the same microsecond are neither skipped nor
repeated. A pager link's cursor carries the number of the page it leads to, so paging
counts nothing but the total, which stops at ``COUNT_CAP``: exact below it, "many" beyond
(a cursor without a number, made by hand, is numbered by a capped count).
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
# A search's count stops sooner: a common word matches most runs, each one a text search
# to count (PostgreSQL computes the vector per row), and no chart links to a search.
SEARCH_COUNT_CAP = 10_000
NEWEST = ("-created_at", "-id")
OLDEST = ("created_at", "id")
# A cursor: the run's created_at in microseconds since the epoch, a dot, its id in hex,
# and the number of the page the link leads to (optional).
_CURSOR = re.compile(r"(\d{1,17})\.([0-9a-f]{32})(?:\.([1-9]\d{0,8}))?")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Cursor:
    created_at: datetime
    id: uuid.UUID
    page: int | None = None


@dataclass
class RunPage:
    """One page of runs, with what its pager needs."""

    runs: list[Any]
    total: int  # capped at ``cap``
    number: int | None  # None: not known (past the counted runs)
    newer: str = ""  # the cursor of "← newer", "" on the first page
    older: str = ""  # the cursor of "older →", "" on the last page
    size: int = PAGE_SIZE
    cap: int = COUNT_CAP

    @property
    def total_exact(self) -> bool:
        return self.total < self.cap

    @property
    def pages(self) -> int | None:
        """How many pages, or None when there are too many runs to count."""
        if not self.total_exact:
            return None
        return max(1, -(-self.total // self.size))

    @property
    def has_other_pages(self) -> bool:
        return bool(self.newer or self.older)


def cursor_of(run: Any, page: int | None = None) -> str:
    micros = (run.created_at - _EPOCH) // _MICROSECOND
    return f"{micros}.{run.id.hex}" + (f".{page}" if page else "")


def cursor_read(name: str, text: str) -> Cursor:
    """The cursor of a pager link; :class:`BadFilter` for anything this list did not make."""
    found = _CURSOR.fullmatch(text)
    if found is None:
        raise BadFilter(
            f"{name} must be a cursor from the list's own links (microseconds.run-id), "
            f"not {text[:80]!r}."
        )
    micros, hex_id, page = found.groups()
    try:
        created_at = _EPOCH + int(micros) * _MICROSECOND
    except OverflowError:
        raise BadFilter(f"{name} names a moment past any run's.") from None
    return Cursor(created_at, uuid.UUID(hex_id), int(page) if page else None)


def _older(c: Cursor) -> Q:
    return Q(created_at__lt=c.created_at) | Q(created_at=c.created_at, id__lt=c.id)


def _newer(c: Cursor) -> Q:
    return Q(created_at__gt=c.created_at) | Q(created_at=c.created_at, id__gt=c.id)


def _capped_count(runs: QuerySet[Any], cap: int = COUNT_CAP) -> int:
    """At most ``cap``: a count of a limited subquery reads no further than the cap (of
    agent_id, which the agent index covers when no other filter needs the row)."""
    return runs.order_by().values("agent_id")[:cap].count()


def run_page(
    runs: QuerySet[Any], params: Mapping[str, Any], size: int = PAGE_SIZE, cap: int = COUNT_CAP
) -> RunPage:
    """The page of ``runs`` the address asks for: ``after`` a cursor (older runs),
    ``before`` one (newer runs), ``last=1`` (the oldest), or else the first page.

    1. Read the cursor (one of after, before, last; a bad one is a BadFilter).
    2. Fetch one row more than a page in the direction of travel: it says whether there is
       a page beyond.
    3. Number the page as its cursor says (or by a capped count of the runs before it).
    """
    after, before = str(params.get("after", "")), str(params.get("before", ""))
    last = str(params.get("last", "")) == "1"
    if sum(map(bool, (after, before, last))) > 1:
        raise BadFilter("Ask for one page: after, before or last, not several.")
    total = _capped_count(runs, cap)
    if before:
        page = _newer_page(runs, cursor_read("before", before), total, size)
    elif after:
        page = _older_page(runs, cursor_read("after", after), after, total, size)
    else:
        page = _end_page(runs, total, size, last=last, cap=cap)
    page.cap = cap
    return page


def _end_page(runs: QuerySet[Any], total: int, size: int, *, last: bool, cap: int) -> RunPage:
    """The first page, or with ``last`` the last."""
    if last and total > size:
        # The last page holds what is left after full pages, as it would paging forward.
        exact = total < cap
        rows = list(runs.order_by(*OLDEST)[: (total % size or size) if exact else size])[::-1]
        number = -(-total // size) if exact else None
        return _page(rows, total, size, number, top=False, more=False)
    rows = list(runs.order_by(*NEWEST)[: size + 1])
    return _page(rows[:size], total, size, 1, top=True, more=len(rows) > size)


def _older_page(runs: QuerySet[Any], start: Cursor, text: str, total: int, size: int) -> RunPage:
    rows = list(runs.filter(_older(start)).order_by(*NEWEST)[: size + 1])
    if not rows:
        # Past the oldest run (it was removed, or the cursor was edited): newer ones remain.
        return RunPage([], total, None, newer=text, size=size)
    number = start.page or _number(runs, rows[0], size)
    return _page(rows[:size], total, size, number, top=False, more=len(rows) > size)


def _newer_page(runs: QuerySet[Any], start: Cursor, total: int, size: int) -> RunPage:
    rows = list(runs.filter(_newer(start)).order_by(*OLDEST)[: size + 1])
    if len(rows) <= size:
        # Back at the top: the first page, full, rather than a short page above it.
        first = list(runs.order_by(*NEWEST)[: size + 1])
        return _page(first[:size], total, size, 1, top=True, more=len(first) > size)
    page = rows[:size][::-1]
    # Runs created since the link was made may put this page below the first: then count.
    number = start.page if (start.page or 0) > 1 else _number(runs, page[0], size)
    return _page(page, total, size, number, top=False, more=True)


def _page(
    rows: list[Any], total: int, size: int, number: int | None, *, top: bool, more: bool
) -> RunPage:
    """A page of ``rows`` (newest first) and the cursors of its neighbours, each with the
    neighbour's number when this page's is known."""
    if not rows:
        return RunPage([], total, number, size=size)
    above = number - 1 if number and number > 1 else None
    return RunPage(
        rows,
        total,
        number,
        newer="" if top else cursor_of(rows[0], above),
        older=cursor_of(rows[-1], number + 1 if number else None) if more else "",
        size=size,
    )


def _number(runs: QuerySet[Any], first: Any, size: int) -> int | None:
    """The page's number: the runs before its first one, in pages (None past the cap)."""
    before = _capped_count(runs.filter(_newer(Cursor(first.created_at, first.id))))
    return None if before >= COUNT_CAP else before // size + 1
