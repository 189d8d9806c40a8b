"""Under daphne, HTTP requests run on a fixed set of long-lived threads, not a thread apiece.

Django's ASGI handler serves each request's synchronous code (every view of the console:
the pages, the admin, DRF) in a thread it starts for that request and joins after it
(``asgiref.sync.ThreadSensitiveContext``): a thread started and joined for every request,
and, with many requests in flight, as many threads fighting over the GIL. bench/
throughput.py submits its runs through one daphne: a POST cost it about three times the
CPU of the same request served in-process.

Here a request borrows one of ``HARNESS_WEB_THREADS`` threads, each an executor of one
thread, kept for the life of the process (asgiref lets a ``ThreadSensitiveContext`` be
given one: the caller owns it, and it is not shut down at the context's end), and gives it
back when its response is sent (a request whose client left gives it back only once its
view has returned: asgiref waits for it). A request that finds every thread busy waits for
one, as it would behind a WSGI server's threads; WebSockets never come here (channels'
router sends them to the consumers, on the event loop). Connections are still closed at
each request's end (``CONN_MAX_AGE`` 0; on PostgreSQL the pool takes them back): what a
request saves is the thread's start and join, and the fight for the GIL of as many threads
as requests in flight (measured: 200 POSTs by 16 clients cost daphne about half the CPU).
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
    last lent first (its thread the most likely still in the CPU's caches); made on first
    use, on the event loop that serves the requests: daphne has one, and the queue belongs
    to it (another loop waiting on it would raise)."""

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
