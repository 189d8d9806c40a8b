"""What the benches share once Django is set up (bench/_place.py first): their own
databases and Redis keys, a real worker (and daphne) on their own queues, the fix-a-link
replay, and percentiles."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _place import Place
from django.conf import settings
from django.db import connection, connections
from django.test.utils import setup_databases, teardown_databases

from harness_console.management.commands.serve import commands
from runs.core import status as run_status
from runs.models import Run
from tests.stack import LiveStack, wait_until

BROKEN = "# Page {i}\n\nSee [the guide](getting-startd.md).\n"
USAGE = {"input_tokens": 300, "output_tokens": 20}


class BenchStack(LiveStack):
    """The run worker, and daphne when ``web``, or every process ``serve`` starts when
    ``whole``, on the bench's database and queues (_place.py gives them the bench's prefix,
    so a worker of another stack on the same Redis takes none of its tasks)."""

    web = False
    whole = False

    def env(self) -> dict[str, str]:
        env = super().env()
        env["HARNESS_USE_TEST_DATABASES"] = "false"
        env["HARNESS_RUN_PROCESSES"] = str(settings.HARNESS_RUN_PROCESSES)  # serve's, not the tests
        return env

    def start(self, *, collectstatic: bool = False) -> BenchStack:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = commands(host="127.0.0.1", port=self.port, worker_name=f"{prefix()}-{self.port}@%h")
        names = tuple(argv) if self.whole else ("web", "worker") if self.web else ("worker",)
        for name in names:
            self._spawn(name, argv[name])

        def ready() -> bool:
            self._check_alive()
            return all(
                "ready." in self.log(name)
                for name in names
                if name.startswith("worker") or name == "housekeeping"
            )

        wait_until(ready, timeout=60, what="the Celery workers")
        if "web" in names:
            wait_until(self._web_ready, timeout=30, what="daphne to answer")
        return self


def prefix() -> str:
    return os.environ["HARNESS_REDIS_PREFIX"]


def redis_clean() -> None:
    """Our own keys only: the cache's and channel layer's prefix, our queue and its binding."""
    if settings.EMBEDDED:
        return
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(client.scan_iter(match=f"*{prefix()}*", count=1000))
    if keys:
        client.delete(*keys)


@contextmanager
def own_databases(place: Place, logs: str) -> Iterator[None]:
    """The bench's databases (and Redis keys) for the body, dropped after it; the place's
    folder too when the body succeeded, kept with the logs otherwise."""
    for alias in settings.DATABASES:  # the bench's own database, under its own name
        connections[alias].settings_dict["TEST"]["NAME"] = connections[alias].settings_dict["NAME"]
    redis_clean()
    old = setup_databases(verbosity=0, interactive=False, aliases=set(settings.DATABASES))
    ok = False
    try:
        yield
        ok = True
    finally:
        connection.close()
        teardown_databases(old, verbosity=0)
        redis_clean()
        if ok:
            shutil.rmtree(place.var_dir, ignore_errors=True)
        else:
            print(f"Kept {place.var_dir} ({logs} in logs/).", file=sys.stderr)


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def fix_script(place: Place, i: int) -> str:
    """A replay that patches page i's broken link in a draft, then ends: the commit waits."""
    path = f"docs/page-{i:02d}.md"
    request = f"Fix the broken link in {path}"
    patch = {"path": path, "search": "(getting-startd.md)", "replace": "(getting-started.md)"}
    turns = [
        {
            "stop_reason": "tool_use",
            "content": [
                {"type": "tool_use", "id": "toolu_patch", "name": "patchDraft", "input": patch}
            ],
            "usage": USAGE,
        },
        {"stop_reason": "end_turn", "content": [{"type": "text", "text": "Fixed."}]},
    ]
    body = {"request": request, "agent": "bench", "workspace": "bench", "turns": turns}
    (place.replays / f"fix-{i:02d}.json").write_text(json.dumps(body))
    return request


def wait_status(run_id: Any, wanted: set[str], timeout: float) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status in wanted:
            return run
        if run.status == run_status.FAILED:
            raise RuntimeError(f"Run {run_id} failed: {run.failure_reason}")
        time.sleep(0.02)
    raise TimeoutError(f"Run {run_id} is still {run.status} after {timeout} s.")


def time_page(
    client: Any, url: str, samples: int, *, warmups: int = 5, show: bool = False
) -> tuple[list[float], int]:
    """Seconds of each of ``samples`` requests of ``url`` through Django's test client
    (after ``warmups`` untimed ones), and the queries of one more; ``show`` prints them."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(warmups):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        client.get(url)
        times.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    for query in queries.captured_queries if show else ():
        print(f"      {float(query['time']) * 1000:7.1f} ms  {query['sql'][:150]}")
    return times, len(queries)
