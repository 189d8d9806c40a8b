"""Django's PostgreSQL backend, whose pool hands out the connection given back last
(issue 17).

psycopg's pool hands out the connection idle longest: a run's thread, giving its connection
back between steps and before each tool (``runs.connections``), got a different one every
time, and each of the pool's server processes in turn, its caches cold since its last turn.
A loop step's checkpoint statement took 0.06–0.14 ms longer that way than on the server
process that had just served the same thread (bench/loop.py's 50-step searchDocs runs,
driven in one process, the two orders alternately). Handed out last-in first-out, as
PgBouncer hands out its server connections by default, the busy connections stay few and
warm, and the one handed out was most often in use a moment ago, so the pool's check
passes it without a round trip (``harness_console/db_pool.py``).

Everything else is Django's: its own ``pool`` property makes the pool (from the settings'
OPTIONS, not yet open), and this backend only gives it the handing-out order.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


class LastInFirstOutPool(ConnectionPool):
    """psycopg's pool, taking the connection given back last: its idle connections are a
    deque, the longest idle first, which its own ``_get_ready_connection`` takes from
    (under the pool's lock). The last one given back is moved to the front first; the
    rest keep their order, so the pool's shrinking still closes the longest idle. A call
    that takes none (a wait whose time ran out, after failed checks) puts it back."""

    def _get_ready_connection(self, timeout: float | None) -> Any:
        if not self._pool:
            return super()._get_ready_connection(timeout)
        self._pool.rotate(1)
        try:
            return super()._get_ready_connection(timeout)
        except BaseException:
            self._pool.rotate(-1)
            raise


if not callable(getattr(ConnectionPool, "_get_ready_connection", None)):
    # Fail at start-up rather than go back to the other order without a word.
    raise ImportError("psycopg_pool's ConnectionPool no longer takes its connections here.")


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        """Django's pool, as Django makes it, handing connections out last-in first-out.
        Made here closed (``open=False``) and given its order before anything opens it."""
        pool = super().pool
        if type(pool) is ConnectionPool:
            pool.__class__ = LastInFirstOutPool
        return pool
