"""``/metrics`` (SPEC O2): Prometheus text for a scraper with the token, or for an admin."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from .metrics import metrics_access, metrics_render

# A refusal says what to send, never a metric.
CHALLENGE = 'Bearer realm="metrics"'
REFUSALS = {
    "no_credentials": (401, CHALLENGE, "Send Authorization: Bearer <METRICS_TOKEN>.\n"),
    "bad_token": (401, f'{CHALLENGE}, error="invalid_token"', "That token is not accepted.\n"),
    "forbidden": (403, "", "Only admins may read the metrics.\n"),
}


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    access = metrics_access(
        authorization=request.headers.get("Authorization", ""), user=request.user
    )
    if access == "granted":
        response = HttpResponse(metrics_render(), content_type=CONTENT_TYPE_LATEST)
    else:
        status, challenge, text = REFUSALS[access]
        response = HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")
        if challenge:
            response["WWW-Authenticate"] = challenge
    # Figures of the moment, and possibly of a token holder: no cache may keep them.
    response["Cache-Control"] = "no-store"
    return response
