"""Under daphne, a request's middlewares run in one thread, not a thread hop apiece.

Every view of the console is synchronous (the pages, the admin, DRF), and so is every
middleware's work. Django picks each middleware's mode from the handler below it
(``BaseHandler.load_middleware``): under ASGI the innermost handler is async, so each
async-capable middleware above it (``MiddlewareMixin``: sessions, CSRF, auth, messages,
security, CSP...) ran in async mode, and that mode sends ``process_request`` and
``process_response`` each through ``sync_to_async``: two thread hops per middleware, about
fifteen per request, which cost more CPU than the API's whole run submission (bench/
throughput.py: 200 runs are submitted through one daphne, and the last one starts late).

This one, last in ``MIDDLEWARE`` and synchronous only, makes every middleware above it run
synchronously in the request's thread. What is left is one hop into that thread, one back
to the event loop for the view's resolution, and one per ``process_view`` and for the
view. WebSockets never pass here (channels' router sends them to the consumers).
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase


class OneThread:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)
