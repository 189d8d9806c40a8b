"""Under daphne, HTTP requests run on a fixed set of long-lived threads, not a thread apiece.

Django's ASGI handler serves each request's synchronous code (every view of the console:
the pages, the admin, DRF) in a thread it starts for that request and joins after it
(``asgiref.sync.ThreadSensitiveContext``). A new thread starts with nothing: its own
database connection to open (SQLite: a connection, its pragmas and Django's functions;
PostgreSQL: one taken from the pool), its own cache client, its own copy of every
thread-local, all dropped again when it ends. bench/throughput.py submits its runs through
one daphne: a POST cost it about three times the CPU of the same request served in-process.

Here a request borrows one of ``HARNESS_WEB_THREADS`` threads, each an executor of one
thread, kept for the life of the process (asgiref lets a ``ThreadSensitiveContext`` be
given one: the caller owns it, and it is not shut down at the context's end), and gives it
back when its response is sent. The threads keep their database connections between
requests (``CONN_MAX_AGE``, now that connections are bounded by the threads: one per
thread and database at most). A request that finds every thread busy waits for one, as
it would behind a WSGI server's threads; WebSockets never come here (channels' router
sends them to the consumers, on the event loop).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler


class RequestThreads:
    """``size`` single-thread executors, lent to one request at a time, the one given back
    last lent first (its thread's connections are the most likely still open); made on
    first use, on the event loop that serves the requests (daphne has one)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free: asyncio.LifoQueue[ThreadPoolExecutor] | None = None

    async def take(self) -> ThreadPoolExecutor:
        if self._free is None:
            self._free = asyncio.LifoQueue()
            for n in range(self.size):
                self._free.put_nowait(
                    ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"http-{n}")
                )
        return await self._free.get()

    def give(self, executor: ThreadPoolExecutor) -> None:
        assert self._free is not None
        self._free.put_nowait(executor)


class PooledThreadsASGIHandler(ASGIHandler):
    """Django's ASGI handler, its requests' synchronous code on :class:`RequestThreads`."""

    def __init__(self, threads: int | None = None) -> None:
        super().__init__()
        self.threads = RequestThreads(threads or settings.HARNESS_WEB_THREADS)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = await self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give(executor)
