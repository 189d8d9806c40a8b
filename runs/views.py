"""Run pages: the list, a new run, and the live run page. Thin: check, call, render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from .core import status as run_status
from .forms import RunForm
from .grants import grant_revoke
from .models import Run, SessionGrant
from .selectors import run_get_for_user
from .services import run_create

PAGE_SIZE = 50
TIMELINE_LIMIT = 1000


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm("runs.view_run"):
        raise PermissionDenied("Your role may not see runs.")
    status = request.GET.get("status", "")
    runs = Run.objects.select_related("agent", "workspace", "requester")
    if status:
        if status not in run_status.STATUSES:
            return render(
                request,
                "runs/list.html",
                {"error": f"Unknown status {status!r}.", "statuses": run_status.STATUSES},
                status=400,
            )
        runs = runs.filter(status=status)
    page = Paginator(runs, PAGE_SIZE).get_page(request.GET.get("page"))
    template = "runs/list_table.html" if request.htmx else "runs/list.html"
    return render(
        request,
        template,
        {
            "page": page,
            "status": status,
            "statuses": run_status.STATUSES,
            "can_submit": request.user.has_perm("runs.add_run"),
        },
    )


@login_required
def run_new(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm("runs.add_run"):
        raise PermissionDenied("Your role may not submit runs.")
    form = RunForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run = run_create(requester=request.user, **form.cleaned_data)
        except ValidationError as error:
            form.add_error(None, error)
        else:
            return redirect("runs:detail", run_id=run.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "runs/new.html", {"form": form}, status=status)


@login_required
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    events = list(run.events.order_by("-seq")[:TIMELINE_LIMIT])[::-1]
    return render(
        request,
        "runs/detail.html",
        {
            "run": run,
            "events": events,
            "last_seq": events[-1].seq if events else 0,
            "omitted": max(0, (events[0].seq - 1) if events else 0),
            "grants": run.grants.select_related("granted_by", "revoked_by"),
            "can_decide": request.user.has_perm("runs.decide_approval"),
        },
    )


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Runs per state right now; the full operations dashboard builds on this page."""
    if not request.user.has_perm("runs.view_dashboards"):
        raise PermissionDenied("Your role may not open the dashboards.")
    counts = dict(Run.objects.values_list("status").annotate(n=Count("pk")).order_by())
    rows = [(s, counts.get(s, 0)) for s in run_status.STATUSES]
    return render(request, "dashboards/index.html", {"rows": rows, "total": sum(counts.values())})


@login_required
@require_POST
def grant_revoke_view(request: HttpRequest, run_id: str, grant_id: int) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    grant = get_object_or_404(SessionGrant, pk=grant_id, run=run)
    grant_revoke(grant=grant, user=request.user)
    return redirect("runs:detail", run_id=run.pk)
