"""The navigation of every page: what the user's role may open. It sits above the apps (it
counts an approver's pending requests), so no app imports it; settings name it as a
template context processor."""

from __future__ import annotations

from functools import cache, partial
from typing import Any

from django.http import HttpRequest

from approvals.selectors import pending_count_for

from .roles import may_decide, may_see_evals, may_see_runs, may_view_dashboards


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The navigation shows only what the user's role may open; an approver's shows how
    many requests wait for them. That count is one COUNT query, made only by a template
    that shows it (a fragment re-fetched by a live page usually does not)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav": []}
    items: list[tuple[str, str, str]] = []
    context: dict[str, Any] = {"nav": items}
    if may_see_runs(user):
        items.append(("runs", "Runs", "runs:list"))
    if may_decide(user):
        items.append(("approvals", "Approvals", "approvals:queue"))
        context["approvals_pending"] = cache(partial(pending_count_for, user))
        context["approvals_live"] = True  # the page loads approvals.js: a live count
    if may_view_dashboards(user):
        items.append(("dashboards", "Dashboards", "dashboards"))
    if may_see_evals(user):
        items.append(("evals", "Evals", "evals:index"))
    if user.is_staff:
        items.append(("admin", "Admin", "admin:index"))
    return context
