"""The pool's check decides when a connection needs its round trip (harness_console/db_pool.py),
on both configurations: a stand-in connection over a real socket pair, the server's end in
the test's hands, and psycopg_pool's own check counted (PostgreSQL's tests, in
test_db_pool.py, drive real connections a real server ends)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from psycopg_pool import ConnectionPool

from harness_console import db_pool


class StandIn:
    """What the check reads of a psycopg connection: ``broken`` and its socket."""

    def __init__(self, fd: int) -> None:
        self.broken = False
        self.pgconn = SimpleNamespace(socket=fd)


@pytest.fixture
def pair() -> Iterator[tuple[StandIn, socket.socket]]:
    ours, server = socket.socketpair()
    yield StandIn(ours.fileno()), server
    ours.close()
    server.close()


@pytest.fixture
def round_trips(monkeypatch) -> list[object]:
    made: list[object] = []
    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(made.append))
    monkeypatch.setattr(db_pool, "FRESH_SECONDS", 3600.0)
    return made


def test_the_first_handout_has_the_round_trip_and_the_next_one_a_moment_later_not(
    pair, round_trips
):
    conn, _ = pair
    db_pool.pool_check(conn)
    db_pool.pool_check(conn)
    assert round_trips == [conn]


def test_anything_on_the_socket_since_means_the_round_trip(pair, round_trips):
    conn, server = pair
    db_pool.pool_check(conn)
    server.send(b"E")  # what an ending session sends first (an ErrorResponse)
    db_pool.pool_check(conn)
    assert round_trips == [conn, conn]


def test_a_socket_the_server_closed_means_the_round_trip(pair, round_trips):
    conn, server = pair
    db_pool.pool_check(conn)
    server.close()
    db_pool.pool_check(conn)
    assert round_trips == [conn, conn]


def test_a_broken_or_socketless_connection_means_the_round_trip(pair, round_trips):
    conn, _ = pair
    db_pool.pool_check(conn)
    conn.broken = True
    db_pool.pool_check(conn)
    conn.broken = False
    conn.pgconn = SimpleNamespace()  # closed: psycopg raises on its socket
    db_pool.pool_check(conn)
    assert round_trips == [conn, conn, conn]


def test_a_recheck_or_a_stale_handout_means_the_round_trip(pair, round_trips, monkeypatch):
    conn, _ = pair
    db_pool.pool_check(conn)
    db_pool.pool_recheck(conn)
    db_pool.pool_check(conn)
    monkeypatch.setattr(db_pool, "FRESH_SECONDS", 0.0)
    db_pool.pool_check(conn)
    assert round_trips == [conn, conn, conn]


def test_a_failed_round_trip_is_the_pool_s_to_handle():
    """The check raises what the round trip raised: the pool discards the connection."""

    class Dead(StandIn):
        def execute(self, query: str) -> None:
            raise OSError("server closed the connection")

    dead = Dead(-1)
    dead.autocommit = True  # type: ignore[attr-defined]
    with pytest.raises(OSError, match="closed"):
        db_pool.pool_check(dead)


def test_the_pool_is_checked_by_pool_check():
    options = db_pool.pool_options(4, 2.5)
    assert options["check"] is db_pool.pool_check
    assert (options["min_size"], options["max_size"], options["timeout"]) == (2, 4, 2.5)
