"""Pages that refresh a part of themselves: which requests want only that part."""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's middleware leaves it, for the type checker."""

    htmx: HtmxDetails


def wants_fragment(request: HttpRequest) -> bool:
    """An htmx request (except htmx restoring history, which needs the whole page), or an
    explicit ``?fragment=1`` (the live pages' scripts after a WebSocket notice)."""
    htmx = getattr(request, "htmx", None)
    if htmx and not htmx.history_restore_request:
        return True
    return request.GET.get("fragment") == "1"
