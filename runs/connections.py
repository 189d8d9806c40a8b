"""When a run's thread gives its database connection back (SPEC R9; issue 17).

A run worker drives hundreds of runs on threads, and on PostgreSQL each process has a pool
of at most HARNESS_DB_POOL_SIZE connections that its threads and its lease keeper share. A
thread keeps the connection it took until it closes it, so a thread that went on holding
one through a tool call (an MCP server starting, a shell command running to its timeout)
or from one step to the next left the others, and the keeper renewing every lease of the
process, waiting for the pool until their wait ran out: leases were lost while their
workers were alive. So a thread holds a connection only while it talks to the database:
it gives it back before anything it waits for, and at the end of each step.
"""

from __future__ import annotations

from django.db import connection

from harness_console.db_pool import pool_recheck


def connection_return(*, recheck: bool = False) -> None:
    """Give this thread's connection back to the pool; the next query takes one again.
    ``recheck``: for a wait of unknown length (the model's), the pool checks it on the
    server before it hands it out again, however soon (``harness_console/db_pool.py``).

    Kept inside a transaction (it is the transaction's), and on SQLite, which has no pool
    and no limit: there, reopening the file would cost every step for nothing."""
    if connection.vendor != "sqlite" and not connection.in_atomic_block:
        if recheck and connection.connection is not None:
            pool_recheck(connection.connection)
        connection.close()
