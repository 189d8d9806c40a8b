"""PostgreSQL connections stay bounded under daphne (issue 16, section 4).

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

import pytest
from django.conf import settings
from django.db import connection
from rest_framework.authtoken.models import Token

from harness_console.management.commands.serve import commands
from tests.conftest import SEEDED
from tests.helpers import driven
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
