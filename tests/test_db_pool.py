"""PostgreSQL connections stay bounded under daphne (issue 16, section 4), and the pool
hands out only connections that work, with a round trip only where one can have failed
(harness_console/db_pool.py; issue 17), the one given back last first
(harness_console/postgresql/base.py).

A real daphne on the test database, with a pool of POOL connections, serves many concurrent
API clients: every request succeeds, and PostgreSQL never sees more than the pool's maximum
(plus a small fixed margin) from it, during the load or after it, idle. Its connections are
told apart from everyone else's (the test process, the session's live stack) by the
application name libpq takes from PGAPPNAME.
"""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from psycopg_pool import ConnectionPool
from rest_framework.authtoken.models import Token

from harness_console import db_pool
from harness_console.management.commands.serve import commands
from harness_console.postgresql.base import LastInFirstOutPool
from runs.connections import connection_return
from tests.conftest import SEEDED
from tests.helpers import direct_connection_params, driven
from tests.stack import ROOT, LiveStack, free_port, wait_until

pytestmark = [
    *SEEDED,
    pytest.mark.skipif(
        settings.EMBEDDED, reason="SQLite has no connection pool: PostgreSQL configuration only"
    ),
]

POOL = 4
MARGIN = 2  # the pool's own reconnect after a broken connection, and one being opened
CLIENTS = 16
REQUESTS = 320


def connections_named(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s",
            [name],
        )
        return int(cursor.fetchone()[0])


@pytest.fixture
def daphne(tmp_path):
    """daphne alone (no worker: nothing here runs a task), with a pool of POOL."""
    port = free_port()
    name = f"hc-pool-test-{port}"
    env = LiveStack(log_dir=tmp_path).env()
    env.update({"HARNESS_DB_POOL_SIZE": str(POOL), "PGAPPNAME": name})
    log = open(tmp_path / "web.log", "wb")  # noqa: SIM115 - kept open for the child
    process = subprocess.Popen(
        commands(host="127.0.0.1", port=port)["web"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def ready() -> bool:
        assert process.poll() is None, (tmp_path / "web.log").read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=2):
                return True
        except OSError:
            return False

    try:
        wait_until(ready, timeout=30, what="daphne to answer")
        yield f"http://127.0.0.1:{port}", name
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def test_many_concurrent_api_clients_keep_connections_within_the_pool(
    personas, agent, workspace, docs, daphne
):
    url, name = daphne
    run = driven(personas, agent, workspace)
    key = Token.objects.create(user=personas.ops).key
    paths = ["/api/runs/", f"/api/runs/{run.pk}/", f"/api/runs/{run.pk}/events/"]
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(connections_named(name))
            time.sleep(0.05)
        connection.close()

    def get(i: int) -> int:
        request = urllib.request.Request(
            url + paths[i % len(paths)], headers={"Authorization": f"Token {key}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            statuses = list(pool.map(get, range(REQUESTS)))
    finally:
        done.set()
        watcher.join()
    failed = [s for s in statuses if s != 200]
    assert not failed, f"{len(failed)} of {REQUESTS} failed: {sorted(set(failed))}"
    assert max(seen) <= POOL + MARGIN, f"{max(seen)} connections during the load"
    time.sleep(1.0)  # idle: the pool keeps what it has, and no more
    idle = connections_named(name)
    assert 0 < idle <= POOL + MARGIN, f"{idle} connections left open after idling"


@pytest.fixture
def round_trips(monkeypatch) -> list[object]:
    """The pool's checks that went to the server (ConnectionPool.check_connection)."""
    made: list[object] = []
    check = ConnectionPool.check_connection

    def counted(conn: object) -> None:
        made.append(conn)
        check(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    return made


def _backend(raw: psycopg.Connection) -> int:
    return int(raw.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]


def test_a_connection_handed_out_a_moment_ago_is_handed_out_again_without_a_round_trip(
    round_trips, monkeypatch
):
    """A run's thread gives its connection back between steps and takes one again at once:
    no round trip then. One idle longer than the window is checked on the server, and so
    is one given back for the model's wait, however soon it is taken again."""
    monkeypatch.setattr(db_pool, "FRESH_SECONDS", 3600.0)  # fresh, whatever the machine's pace
    connection.ensure_connection()
    raw = connection.connection
    _backend(raw)  # in use, and working
    db_pool.pool_check(raw)
    assert round_trips == []
    monkeypatch.setattr(db_pool, "FRESH_SECONDS", 0.0)
    db_pool.pool_check(raw)
    assert round_trips == [raw]
    monkeypatch.setattr(db_pool, "FRESH_SECONDS", 3600.0)
    connection_return(recheck=True)  # as before a model call
    db_pool.pool_check(raw)
    assert round_trips == [raw, raw]


def test_a_connection_whose_session_the_server_ended_is_checked_and_never_handed_out(
    round_trips, monkeypatch
):
    """The server ended its session (a restart, a failover, pg_terminate_backend) a moment
    after it was handed out: its socket says so, the round trip fails, and the pool hands
    out a working connection instead."""
    monkeypatch.setattr(db_pool, "FRESH_SECONDS", 3600.0)  # fresh, whatever the machine's pace
    connection.ensure_connection()
    raw = connection.connection
    pid = _backend(raw)
    connection.close()  # back to the pool, idle
    with psycopg.connect(**direct_connection_params(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_until(
            lambda: (
                not other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
            ),
            timeout=10,
            what="the ended session to leave",
        )
    with pytest.raises(psycopg.OperationalError):
        db_pool.pool_check(raw)
    assert round_trips == [raw]
    try:
        with connection.cursor() as cursor:  # whichever connection the pool hands out
            cursor.execute("SELECT pg_backend_pid()")
            assert cursor.fetchone()[0] != pid
    finally:
        connection.close()
        connection.close_pool()  # the next test's pool is whole


@pytest.fixture
def idle_pool():
    """This process's pool with three connections idle, and whole again after the test."""
    pool = connection.pool
    connection.close()
    pool.open()
    held = [pool.getconn() for _ in range(3)]
    for raw in held:
        pool.putconn(raw)

    def settled() -> bool:  # no connection still being opened: none lands after the test's
        stats = pool.get_stats()
        return bool(stats["pool_available"] == stats["pool_size"] >= 3)

    wait_until(settled, timeout=10, what="the pool to stop growing")
    try:
        yield pool
    finally:
        connection.close()
        connection.close_pool()


def test_the_pool_hands_out_the_connection_given_back_last(idle_pool):
    """Last in, first out: a thread that gives its connection back and takes one again
    gets the same one, its server process warm, however many others are idle; the others
    keep their order, the longest idle last to be taken (and first to be closed)."""
    assert isinstance(idle_pool, LastInFirstOutPool)
    assert settings.DATABASES["default"]["ENGINE"] == "harness_console.postgresql"
    first, second, third = (idle_pool.getconn() for _ in range(3))
    for raw in (second, first, third):
        idle_pool.putconn(raw)
    assert idle_pool.getconn() is third
    idle_pool.putconn(third)
    assert idle_pool.getconn() is third
    assert idle_pool.getconn() is first
    assert idle_pool.getconn() is second
    for raw in (first, second, third):
        idle_pool.putconn(raw)


def test_a_run_s_thread_gets_its_own_server_process_back_between_steps(idle_pool):
    """A run's thread gives its connection back between steps and before each tool
    (runs.connections) and takes one again at once: the same server process every time."""
    connection.ensure_connection()
    pid = _backend(connection.connection)
    for _ in range(5):
        connection_return()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            assert cursor.fetchone()[0] == pid
