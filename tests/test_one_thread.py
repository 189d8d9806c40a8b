"""Under ASGI, a request's middlewares run in one thread (harness_console.web.one_thread),
and every one of them still does its work there."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import SyncToAsync, async_to_sync
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.test import AsyncClient
from django.utils.deprecation import MiddlewareMixin


def _chain(handler: Any) -> list[Any]:
    """The middleware instances of a loaded handler, outermost first."""
    found, seen = [], set()
    current = handler._middleware_chain
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        inner = getattr(current, "__wrapped__", None)  # convert_exception_to_response
        if inner is None and hasattr(current, "get_response"):
            found.append(current)
            inner = current.get_response
        current = inner
    return found


def test_every_middleware_runs_synchronously_under_asgi():
    handler = ASGIHandler()
    chain = _chain(handler)
    names = [f"{type(m).__module__}.{type(m).__qualname__}" for m in chain]
    assert names == settings.MIDDLEWARE
    mixins = [m for m in chain if isinstance(m, MiddlewareMixin)]
    assert mixins, "Django's own middlewares are MiddlewareMixin"
    assert [type(m).__name__ for m in mixins if m.async_mode] == []


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions sent to a thread through sync_to_async, as they are."""
    seen: list[str] = []
    original = SyncToAsync.__call__

    async def counted(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    return seen


def _get(path: str, **extra: Any) -> Any:
    return async_to_sync(AsyncClient(**extra).get)(path)


def test_a_page_crosses_into_a_thread_a_few_times_not_twice_per_middleware(hops):
    response = _get("/login/")
    assert response.status_code == 200
    # No middleware's process_request or process_response crosses on its own: what does
    # is the chain as a whole, the signals, process_view (CSRF), the view, its rendering.
    assert [h for h in hops if h.endswith(("process_request", "process_response"))] == []
    assert any(h.endswith("convert_exception_to_response.<locals>.inner") for h in hops)
    assert len(hops) < len(settings.MIDDLEWARE), hops


def test_the_middlewares_still_do_their_work_in_that_thread():
    page = _get("/login/")
    assert "Content-Security-Policy" in page.headers
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert "csrftoken" in page.cookies
    # The guard, before anything reads the request.
    refused = _get("/login/?access_token=abc")
    assert refused.status_code == 400
    # CSRF on a form post.
    client = AsyncClient(enforce_csrf_checks=True)
    forged = async_to_sync(client.post)("/login/", {"username": "x", "password": "y"})
    assert forged.status_code == 403
