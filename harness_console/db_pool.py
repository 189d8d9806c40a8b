"""The PostgreSQL pool, and how a connection is checked before it is handed out (issue 17).

The pool's check (``ConnectionPool.check_connection``) is a round trip: a connection a
PostgreSQL restart, a failover or ``pg_terminate_backend`` cut is replaced before a run or
a request gets it. But a run worker's thread gives its connection back between steps and
before each tool (``runs.connections``), and takes one again a moment later: two round
trips a step, a tenth of its overhead, for a connection that was working milliseconds ago.

So a connection handed out less than ``FRESH_SECONDS`` ago is handed out again unchecked,
unless something arrived on its socket meanwhile: an idle connection receives nothing,
and the server that ends a session says so (a FATAL message) and closes the socket, which
makes it readable. Anything else, and every connection idle longer, has the round trip.
The socket says so only once the ended session's process has run: a connection given back
for a wait nobody can bound (the model's) is marked to have the round trip whatever its
age (:func:`pool_recheck`), so a restart during that wait never reaches the run.
"""

from __future__ import annotations

import select
import time
from typing import Any

FRESH_SECONDS = 1.0
_HANDED = "_harness_handed_at"


def pool_options(size: int, timeout: float) -> dict[str, Any]:
    """Django's psycopg pool of at most ``size`` connections (a request waits ``timeout``
    seconds for one), checked by :func:`pool_check`."""
    return {
        "min_size": min(2, size),
        "max_size": size,
        "timeout": timeout,
        "max_idle": 60,  # above min_size, a connection a minute unused closes
        "check": pool_check,
    }


def pool_check(conn: Any) -> None:
    """The pool's ``check``: return quietly if ``conn`` can be handed out, raise if not
    (the pool then discards it and takes another)."""
    # Here, not above: settings import this module on the embedded default too, which
    # has no pool (and need not load libpq); in a pooled process it is imported already.
    from psycopg_pool import ConnectionPool

    now = time.monotonic()
    handed = getattr(conn, _HANDED, None)
    if handed is None or now - handed >= FRESH_SECONDS or conn.broken or _readable(conn):
        ConnectionPool.check_connection(conn)
    setattr(conn, _HANDED, now)


def pool_recheck(conn: Any) -> None:
    """The next handout of ``conn`` has the round trip, however soon it comes."""
    setattr(conn, _HANDED, None)


def _readable(conn: Any) -> bool:
    """Whether the server sent anything to this idle connection (or closed it)."""
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except Exception:  # a socket gone altogether: the round trip says what is wrong
        return True
