"""The ``webhook-notifier`` hook's pure half: its settings schema, and the summary it sends.

The body is a short JSON summary: phase, run id, agent, tool, decision, status, time. Never a
tool's input or output, and every value passes the secret redactor first. The POST itself,
with the checks of the URL, is :mod:`policies.hook_webhook`'s: parsing and reaching an
address takes ``urllib``, and the core does no I/O. There a network error or an answer other
than 2xx raises :class:`WebhookError`, so the binding's fail-open setting decides whether the
run goes on; redirects are not followed, so a 3xx is an error like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from .hook_redaction import DEFAULT_REDACTOR

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
