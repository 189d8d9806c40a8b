"""Requests refused before any view sees them: credentials in a URL, NUL characters.

One middleware in front of every page and API view, so no view has to remember:

- **Credentials are never taken from a query string.** A URL is kept by access logs,
  proxies, browser history and ``Referer`` headers, so a token there leaks whether or not
  the console would have used it. A query parameter named like a credential (``token``,
  ``access_token``, ``auth``, ``api_key``, ... in any case, with ``-`` or ``_``), or whose
  value is an API token the console issued, gets a 400 that says where a token goes —
  even for a request that is otherwise authenticated by its session.
- **No NUL character in the path or the query string**: PostgreSQL refuses them in text,
  which would turn a filter such as ``?agent=%00`` into a 500 in every view that queries it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

CREDENTIAL_NAMES = frozenset(
    {
        "token",
        "access_token",
        "accesstoken",
        "auth",
        "auth_token",
        "authtoken",
        "authorization",
        "api_key",
        "apikey",
        "api_token",
        "key",
        "bearer",
        "jwt",
        "id_token",
        "refresh_token",
        "session",
        "sessionid",
        "password",
        "secret",
        "client_secret",
        "metrics_token",
    }
)
# DRF's authtoken keys: 40 lower-case hex characters.
TOKEN_SHAPE = re.compile(r"[0-9a-f]{40}")
WHERE_TOKENS_GO = (
    "Credentials are never accepted in a URL (it is kept in access logs): send the token in "
    "the Authorization header, 'Authorization: Token <key>'."
)


def credential_parameter(name: str) -> bool:
    """``X-Api-Key``, ``ACCESS-TOKEN``, ``auth`` ...: named like a credential."""
    normal = name.strip().lower().replace("-", "_")
    normal = normal.removeprefix("x_")
    return normal in CREDENTIAL_NAMES


def issued_token(value: str) -> bool:
    """A value that is one of the console's API tokens, whatever the parameter's name."""
    if not TOKEN_SHAPE.fullmatch(value):
        return False
    from rest_framework.authtoken.models import Token

    return Token.objects.filter(key=value).exists()


class RequestGuard:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refusal = self.refusal(request)
        if refusal is not None:
            status, message = refusal
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": message}, status=status)
            return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
        return self.get_response(request)

    @staticmethod
    def refusal(request: HttpRequest) -> tuple[int, str] | None:
        if "\x00" in request.path or "\x00" in request.META.get("QUERY_STRING", ""):
            return 400, "NUL characters are not accepted in a URL."
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                return 400, "NUL characters are not accepted in a URL."
            if credential_parameter(name) or any(issued_token(value) for value in values):
                return 400, WHERE_TOKENS_GO
        return None
