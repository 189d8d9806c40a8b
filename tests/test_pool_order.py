"""The console's PostgreSQL backend makes Django's pool hand out the connection given back
last (harness_console/postgresql/base.py), without a server: the pool is made closed, and
its order is its own (tests/test_db_pool.py has it hand out real connections)."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg_pool import ConnectionPool, PoolTimeout

from harness_console.postgresql.base import DatabaseWrapper, LastInFirstOutPool

ALIAS = "pool-order-test"


def _wrapper(pool: Any) -> DatabaseWrapper:
    return DatabaseWrapper(
        {
            "ENGINE": "harness_console.postgresql",
            "NAME": "nowhere",
            "USER": "",
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": "1",
            "OPTIONS": {"pool": pool} if pool else {},
            "CONN_MAX_AGE": 0,
            "CONN_HEALTH_CHECKS": False,
            "TIME_ZONE": None,
            "AUTOCOMMIT": True,
            "ATOMIC_REQUESTS": False,
            "TEST": {},
        },
        alias=ALIAS,
    )


def test_django_s_pool_is_made_with_the_last_in_first_out_order_and_left_closed():
    wrapper = _wrapper({"min_size": 1, "max_size": 3})
    try:
        pool = wrapper.pool
        assert isinstance(pool, LastInFirstOutPool) and isinstance(pool, ConnectionPool)
        assert pool.closed and pool.max_size == 3  # Django's options, not opened here
        assert wrapper.pool is pool  # made once, as Django keeps it
        # Idle connections queue the longest idle first: the one given back last goes out
        # first, and the others keep their order.
        pool._pool.extend(["longest idle", "idle", "given back last"])
        # A wait whose time ran out (after failed checks) takes none and moves none.
        with pytest.raises(PoolTimeout):
            pool._get_ready_connection(0.0)
        assert list(pool._pool) == ["longest idle", "idle", "given back last"]
        taken = [pool._get_ready_connection(None) for _ in range(3)]
        assert taken == ["given back last", "idle", "longest idle"]
        assert pool._get_ready_connection(None) is None  # none idle: the caller waits
    finally:
        DatabaseWrapper._connection_pools.pop(ALIAS, None)


def test_without_the_pool_option_there_is_no_pool():
    assert _wrapper(None).pool is None
