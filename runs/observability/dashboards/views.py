"""The operations and retrospective dashboards (SPEC O5, O6). Thin: check who is asking,
read the figures of ``figures.py`` (bounded rows whatever the history), chart, render."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from harness_console.roles import may_decide, may_view_dashboards
from harness_console.web.fragments import wants_fragment

from .charts import ops_chart, retro_page
from .figures import WINDOWS, filter_choices, ops_figures, retro_figures
from .plot import percent


def _check(request: HttpRequest) -> None:
    if not may_view_dashboards(request.user):
        raise PermissionDenied("Your role may not open the dashboards.")


@login_required
def ops_dashboard(request: HttpRequest) -> HttpResponse:
    """The live state of the console; the page re-fetches its fragment (this view, asked by
    htmx or with ``fragment=1``) when the ops socket says some run changed."""
    _check(request)
    ops = ops_figures(stuck_after=settings.HARNESS_STUCK_AFTER_SECONDS)
    context = {
        "ops": ops,
        "chart": ops_chart(ops),
        "finished_total": sum(ops.finished_24h.values()),
        "error_rate": percent(ops.last_hour["error_rate"]),
        "may_review": may_decide(request.user),
        "stuck_minutes": ops.stuck_after / 60,
    }
    template = "dashboards/ops_live.html" if wants_fragment(request) else "dashboards/ops.html"
    return render(request, template, context)


class BadQuery(ValueError):
    """A retrospective filter the page cannot honour."""


def _retro_query(params: Any, choices: dict[str, Any]) -> dict[str, Any]:
    raw_days = params.get("days", "").strip() or str(WINDOWS[0])
    if raw_days not in {str(w) for w in WINDOWS}:
        raise BadQuery(f"Choose a window of 7 or 30 days; {raw_days!r} is not one.")
    query: dict[str, Any] = {"days": int(raw_days)}
    for name, rows in (("agent", choices["agents"]), ("workspace", choices["workspaces"])):
        slug = params.get(name, "").strip()
        ids = {row["slug"]: row["pk"] for row in rows}
        if slug and slug not in ids:
            raise BadQuery(f"Unknown {name} {slug!r}.")
        query[name], query[f"{name}_id"] = slug, ids.get(slug)
    return query


# The charts of the retrospective come in a request of their own, which the page's head
# preloads: the server reads the figures while the browser fetches and starts plotly.js,
# instead of before it (issue 19: the first chart within 1 s of a cold load).
CHARTS_PART = "charts"


def _url(request: HttpRequest, query: dict[str, Any], **extra: str) -> str:
    params = {k: query[k] for k in ("days", "agent", "workspace") if query[k]}
    return f"{request.path}?{urlencode({**params, **extra})}"


@login_required
def retro_dashboard(request: HttpRequest) -> HttpResponse:
    """``?days=7|30&agent=<slug>&workspace=<slug>``: trends over the last 7 or 30 UTC days.

    The page is the filters and a place for the charts, which its script fetches from
    ``&part=charts`` (the same checks, the charts alone); ``&inline=1`` gives one page with
    both, for a browser without scripts."""
    _check(request)
    choices = filter_choices()
    context: dict[str, Any] = {
        **choices,
        "windows": WINDOWS,
        "query": {k: request.GET.get(k, "") for k in ("days", "agent", "workspace")},
    }
    try:
        query = _retro_query(request.GET, choices)
    except BadQuery as error:
        context["error"] = str(error)
        return render(request, "dashboards/retro.html", context, status=400)
    context["query"] = query
    part = request.GET.get("part") == CHARTS_PART
    if part or request.GET.get("inline") == "1":
        retro = retro_figures(
            days=query["days"], agent_id=query["agent_id"], workspace_id=query["workspace_id"]
        )
        context["retro"] = retro
        context["page"] = retro_page(retro, agent=query["agent"], workspace=query["workspace"])
    if part:
        return render(request, "dashboards/retro_charts.html", context)
    context["charts_url"] = _url(request, query, part=CHARTS_PART)
    context["inline_url"] = _url(request, query, inline="1")
    return render(request, "dashboards/retro.html", context)
