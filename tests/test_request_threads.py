"""Under daphne, HTTP requests run on a fixed set of long-lived threads
(harness_console.web.request_threads), through the real ASGI application."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from django.core.signals import request_started

from harness_console.web.request_threads import PooledThreadsASGIHandler


def _scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }


async def _get(app: Any, path: str, *, leave: threading.Event | None = None) -> int | None:
    """One request through ``app`` as daphne sends it; the response's status (None: the
    client left, once ``leave`` was set, before its response came)."""
    sent: list[dict[str, Any]] = []
    answered = asyncio.Event()
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if leave is None:
            await answered.wait()  # the client stays until the response is sent
        while leave is not None and not leave.is_set():
            await asyncio.sleep(0.01)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    await app(_scope(path), receive, send)
    return sent[0]["status"] if sent else None


@pytest.fixture
def served(db) -> list[tuple[str, float, float]]:
    """Each request's thread, as its synchronous code sees it (request_started's sync
    receivers run there), with when it began and ended (a tenth of a second apart)."""
    seen: list[tuple[str, float, float]] = []

    def receiver(**kwargs: Any) -> None:
        began = time.monotonic()
        time.sleep(0.1)  # long enough for requests sent together to overlap
        seen.append((threading.current_thread().name, began, time.monotonic()))

    request_started.connect(receiver, dispatch_uid="test-request-threads")
    yield seen
    request_started.disconnect(dispatch_uid="test-request-threads")


def test_requests_reuse_a_few_long_lived_threads(served):
    app = PooledThreadsASGIHandler(threads=2)

    async def one_after_another() -> list[int]:
        return [await _get(app, path) for path in ["/login/", "/nowhere/", "/login/"] * 2]

    assert asyncio.run(one_after_another()) == [200, 404, 200] * 2
    names = [name for name, _, _ in served]
    assert len(names) == 6 and all(name.startswith("http-") for name in names)
    # One request at a time: the first thread is lent again and again, never a new one.
    assert set(names) == {names[0]}


def test_no_more_requests_run_at_once_than_there_are_threads(served):
    app = PooledThreadsASGIHandler(threads=2)

    async def together() -> list[int]:
        return list(await asyncio.gather(*(_get(app, "/login/") for _ in range(6))))

    assert asyncio.run(together()) == [200] * 6
    assert len({name for name, _, _ in served}) == 2
    # At no moment were three requests' sync code running: the others waited for a thread.
    moments = sorted([(began, 1) for _, began, _ in served] + [(end, -1) for _, _, end in served])
    running, most = 0, 0
    for _, step in moments:
        running += step
        most = max(most, running)
    assert most == 2


def test_a_client_that_leaves_mid_request_gives_its_thread_back_once_its_view_returns(
    db, monkeypatch
):
    """The client leaves while the view runs (Django cancels the response): the thread is
    lent again only once that view has returned, and then serves the next request."""
    from django.contrib.auth.views import LoginView

    views: list[tuple[str, float, float]] = []
    entered, release = threading.Event(), threading.Event()
    original = LoginView.get

    def held(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        if not entered.is_set():  # the first request's view waits to be let go
            entered.set()
            release.wait(5)
        response = original(self, request, *args, **kwargs)
        views.append((threading.current_thread().name, began, time.monotonic()))
        return response

    monkeypatch.setattr(LoginView, "get", held)
    app = PooledThreadsASGIHandler(threads=1)

    async def left_then_stayed() -> list[int | None]:
        first = asyncio.ensure_future(_get(app, "/login/", leave=entered))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        second = asyncio.ensure_future(_get(app, "/login/"))
        await asyncio.sleep(0.2)  # the second waits for the one thread meanwhile
        assert not second.done()
        release.set()
        return [await first, await second]

    assert asyncio.run(asyncio.wait_for(left_then_stayed(), 10)) == [None, 200]
    (first_thread, _, first_end), (second_thread, second_began, _) = views
    assert first_thread == second_thread and second_began >= first_end


def test_only_http_comes_to_the_request_threads():
    app = PooledThreadsASGIHandler(threads=1)
    with pytest.raises(ValueError, match="not websocket"):
        asyncio.run(app({"type": "websocket"}, None, None))
