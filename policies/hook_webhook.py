"""The ``webhook-notifier`` hook's POST: the URL checked when the handler is built, and the
redacted summary of :func:`policies.core.hook_webhook.webhook_body` sent when it runs.

This half lives outside the core because it parses and reaches an address (``urllib``).
A network error or an answer other than 2xx raises :class:`WebhookError`, so the binding's
fail-open setting decides whether the run goes on. Redirects are not followed: a 3xx is an
error like any other, and the console posts only to the URL an admin configured.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from .core.hook_webhook import WebhookError, webhook_body
from .core.hooks import HookSettingsError


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


def _url(text: str) -> tuple[str, str]:
    """The URL to post to, and the part of it errors may name (scheme and host, no path
    and no credentials); HookSettingsError for an address that is not http(s) or has no host."""
    parts = urlsplit(text.strip())
    if parts.scheme.lower() not in ("http", "https"):
        scheme = repr(parts.scheme) if parts.scheme else "schemeless"
        raise HookSettingsError(
            f"url: only http:// and https:// addresses are allowed, not {scheme} ones."
        )
    if not parts.hostname:
        raise HookSettingsError("url: the address has no host.")
    return text.strip(), f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2]}"


def webhook_notifier(settings: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], None]:
    """Reads the event's ``phase``, ``run_id``, ``agent``, ``tool``, ``decision``, ``status``
    and ``now``; POSTs them as JSON to ``url``; returns ``None`` or raises WebhookError."""
    url, host = _url(settings["url"])
    timeout = float(settings.get("timeout", 5))
    headers = {**settings.get("headers", {}), "Content-Type": "application/json"}
    opener = urllib.request.build_opener(_NoRedirects)

    def handler(event: Mapping[str, Any]) -> None:
        data = json.dumps(webhook_body(event)).encode()
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")  # noqa: S310 (scheme checked above)
        try:
            with opener.open(request, timeout=timeout) as response:
                status = response.status
        except urllib.error.HTTPError as error:
            error.close()
            raise WebhookError(f"{host} answered HTTP {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise WebhookError(f"could not reach {host}: {reason}") from None
        if not 200 <= status < 300:
            raise WebhookError(f"{host} answered HTTP {status}")

    return handler
