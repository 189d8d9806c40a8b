"""The ``webhook-notifier`` hook: tells another system that something happened in a run.

The body is a short JSON summary: phase, run id, agent, tool, decision, status, time. Never a
tool's input or output, and every value passes the secret redactor first. A network error or
an answer other than 2xx raises, so the binding's fail-open setting decides whether the run
goes on. Redirects are not followed: a 3xx is an error like any other.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlsplit

from .hook_redaction import DEFAULT_REDACTOR
from .hooks import HookSettingsError

MAX_TIMEOUT: Final = 10
SUMMARY_KEYS: Final = ("phase", "run_id", "agent", "tool", "decision", "status")
MAX_VALUE: Final = 200
SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["url"],
    "properties": {
        "url": {"type": "string", "minLength": 1, "maxLength": 2000},
        "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT},
        "headers": {
            "type": "object",
            "additionalProperties": {"type": "string", "maxLength": 2000},
        },
    },
}
EXAMPLE: Final = {
    "url": "https://hooks.example.com/harness",
    "timeout": 5,
    "headers": {"Authorization": "Bearer …"},
}


class WebhookError(RuntimeError):
    """The webhook could not be delivered; the message names the host, never the full URL
    (a webhook URL's path is often its secret)."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


def _url(text: str) -> tuple[str, str]:
    parts = urlsplit(text.strip())
    if parts.scheme.lower() not in ("http", "https"):
        scheme = repr(parts.scheme) if parts.scheme else "schemeless"
        raise HookSettingsError(
            f"url: only http:// and https:// addresses are allowed, not {scheme} ones."
        )
    if not parts.hostname:
        raise HookSettingsError("url: the address has no host.")
    return text.strip(), f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2]}"


def webhook_body(event: Mapping[str, Any]) -> dict[str, Any]:
    """The summary sent for ``event``: the same keys every time, values short and redacted."""
    body: dict[str, Any] = {}
    for key in SUMMARY_KEYS:
        value = event.get(key)
        body[key] = value if value is None or isinstance(value, int | bool) else str(value)
    now = event.get("now")
    body["at"] = now.isoformat() if isinstance(now, datetime) else None
    shortened = {k: v[:MAX_VALUE] if isinstance(v, str) else v for k, v in body.items()}
    redacted, _ = DEFAULT_REDACTOR.redact(shortened)
    return redacted


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
