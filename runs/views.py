"""Run pages: the list, a new run, and the live run page. Thin: check, call, render."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Exists, OuterRef, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from approvals.models import ApprovalRequest
from harness_console.roles import (
    may_add_eval_case,
    may_decide,
    may_see_evals,
    may_see_runs,
    may_submit_runs,
)
from harness_console.web.fragments import HtmxHttpRequest
from policies.models import Agent, Workspace

from .answer_markdown import answer_html
from .core import status as run_status
from .forms import RunForm
from .grants import grant_revoke
from .model_clients import model_key_set
from .models import Run, SessionGrant
from .observability.turns import turn_table, turns_figure
from .refusals import run_refusals
from .replays import replay_scripts
from .run_columns import extra_columns, runs_with_columns
from .run_filters import (
    SHOWN,
    BadFilter,
    run_filters_described,
    run_filters_query,
    run_filters_read,
    runs_filtered,
)
from .run_pages import COUNT_CAP, SEARCH_COUNT_CAP, run_page
from .selectors import run_get_for_user
from .services import (
    MAX_REQUEST_CHARS,
    run_answer,
    run_cancel,
    run_create,
    run_may_act,
    run_may_roll_back,
    run_rollback,
)
from .tools.rollback import RollbackRefused

TIMELINE_LIMIT = 1000


def _listed(rows: Any, filters: dict[str, str], name: str) -> Any:
    """The filter's choices: the eval set's own only when its runs are shown (or one of
    them is the current choice)."""
    if filters.get("evals"):
        return rows
    return rows.without_evals() | rows.filter(slug=filters.get(name, ""))


def _requesters(filters: dict[str, str]) -> Any:
    """Who submitted runs: of the eval set's runs too only when they are shown (or the
    current choice is one of its requesters)."""
    users = get_user_model().objects.order_by("username")
    # An EXISTS per person, by the runs' requester index: a join with DISTINCT read every
    # run of the history on each page of the list.
    runs = Run.objects.filter(requester=OuterRef("pk"))
    if filters.get("evals"):
        return users.filter(Exists(runs))
    return users.filter(
        Exists(runs.filter(agent__for_evals=False)) | Q(username=filters.get("requester", ""))
    )


@login_required
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    """Runs, newest first, narrowed by the filters of runs.run_filters: the dashboards link
    here with the filters that select exactly the runs behind a figure."""
    if not may_see_runs(request.user):
        raise PermissionDenied("Your role may not see runs.")
    filters = run_filters_read(request.GET)
    context = {
        "filters": filters,
        "status": filters["status"],
        "statuses": run_status.SHOWN_STATUSES,
        "agents": _listed(Agent.objects.order_by("name"), filters, "agent"),
        "workspaces": _listed(Workspace.objects.order_by("name"), filters, "workspace"),
        "requesters": _requesters(filters),
        "hidden": [(k, v) for k, v in filters.items() if v and k not in SHOWN],
        "described": run_filters_described(filters),
        "can_submit": may_submit_runs(request.user),
    }
    try:
        runs = runs_with_columns(runs_filtered(Run.objects.all(), filters), filters)
        cap = SEARCH_COUNT_CAP if filters["q"] else COUNT_CAP
        context["page"] = run_page(runs, request.GET, cap=cap)
    except BadFilter as error:
        context["error"] = str(error)
        context["described"] = []  # a filter that was refused selects nothing to describe
        return render(request, "runs/list.html", context, status=400)
    context["query"] = run_filters_query(filters)
    context["extra"] = extra_columns(filters)
    template = "runs/list_table.html" if request.htmx else "runs/list.html"
    return render(request, template, context)


@login_required
def run_new(request: HttpRequest) -> HttpResponse:
    if not may_submit_runs(request.user):
        raise PermissionDenied("Your role may not submit runs.")
    form = RunForm(request.POST or None, initial=_example_initial(request))
    if request.method == "POST" and form.is_valid():
        try:
            run = run_create(requester=request.user, **form.cleaned_data)
        except ValidationError as error:
            form.add_error(None, error)
        else:
            return redirect("runs:detail", run_id=run.pk)
    status = 400 if request.method == "POST" else 200
    return render(
        request,
        "runs/new.html",
        {
            "form": form,
            "examples": _examples(),
            "has_key": model_key_set(),
            "max_request_chars": MAX_REQUEST_CHARS,
        },
        status=status,
    )


def _examples() -> list[dict[str, Any]]:
    """The offline replay scripts whose agent and workspace exist: one click fills the form."""
    agents = {a.slug: a for a in Agent.objects.all()}
    workspaces = {w.slug: w for w in Workspace.objects.all()}
    return [
        {
            "title": script.title,
            "request": script.request,
            "agent": agents[script.agent],
            "workspace": workspaces[script.workspace],
            "query": urlencode(
                {
                    "agent": agents[script.agent].pk,
                    "workspace": workspaces[script.workspace].pk,
                    "request": script.request,
                }
            ),
        }
        for script in replay_scripts()
        if script.agent in agents and script.workspace in workspaces
    ]


def _example_initial(request: HttpRequest) -> dict[str, str]:
    return {k: request.GET[k] for k in ("agent", "workspace", "request") if k in request.GET}


def _detail_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    user = request.user
    approvals = list(
        ApprovalRequest.objects.filter(run=run)
        .select_related("decided_by")
        .order_by("requested_at")
    )
    is_requester = run.requester_id == user.pk
    state = (run.loop or {}).get("state") or {}
    answer = (
        run.model_calls.order_by("-turn").values_list("text", flat=True).first()
        if run.status in (run_status.COMPLETED, run_status.ROLLED_BACK)
        else None
    )
    return {
        "run": run,
        "task": run.task or {},
        "progress": {"turn": state.get("turn", 0), "max_turns": run.agent.max_turns},
        "approvals": approvals,
        "pending": [a for a in approvals if a.is_pending],
        "steps": run.steps.order_by("index"),
        "tool_calls": run.tool_calls.select_related("approved_by").order_by("started_at"),
        "refusals": run_refusals(run),
        **_turns(run),
        "grants": run.grants.select_related("granted_by", "revoked_by"),
        "can_decide": may_decide(user) and not is_requester,
        "is_requester": is_requester,
        "can_act": run_may_act(user, run),
        "can_rollback": run.status == run_status.COMPLETED and run_may_roll_back(user),
        "active": run.status in run_status.ACTIVE,
        "answer": answer,
        "answer_html": answer_html(answer or ""),
        # "Add to eval set" (SPEC E1): a failed run becomes a replay case of the eval set.
        "can_add_eval": may_add_eval_case(user)
        and run.status in (run_status.FAILED, run_status.ROLLED_BACK),
        "eval_cases": list(run.eval_cases.values_list("name", flat=True))
        if may_see_evals(user)
        else [],
    }


def _turns(run: Run) -> dict[str, Any]:
    table = turn_table(run.model_calls.order_by("turn"))
    return {"turns": table, "turns_figure": turns_figure(table)}


@login_required
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    events = list(run.events.order_by("-seq")[:TIMELINE_LIMIT])[::-1]
    # The run as it is now, read after its events: a page that read the run first could
    # show an older status beside a newer last event, and the live feed (which sends what
    # follows that event) would never correct it.
    run.refresh_from_db()
    return render(
        request,
        "runs/detail.html",
        {
            **_detail_context(request, run),
            "events": events,
            "last_seq": events[-1].seq if events else 0,
            "omitted": max(0, (events[0].seq - 1) if events else 0),
        },
    )


@login_required
def run_panel(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run's task, approvals and actions: re-fetched by the live page when its status
    changes, so buttons appear and disappear without a reload."""
    run = run_get_for_user(user=request.user, run_id=run_id)
    return render(request, "runs/detail_panel.html", _detail_context(request, run))


def _after_action(request: HtmxHttpRequest, run: Run, error: str = "") -> HttpResponse:
    """htmx swaps only successful answers, so a refusal comes back as the panel with its
    message (status 200, marked by a header), never as a page-wide error."""
    if request.htmx:
        run.refresh_from_db()
        context = {**_detail_context(request, run), "error": error}
        response = render(request, "runs/detail_panel.html", context)
        if error:
            response["X-Harness-Refused"] = "1"
        return response
    if error:
        messages.error(request, error)
    return redirect("runs:detail", run_id=run.pk)


def _message(error: ValidationError) -> str:
    if hasattr(error, "error_dict"):
        return " ".join(f"{m}" for msgs in error.message_dict.values() for m in msgs)
    return " ".join(error.messages)


@login_required
@require_POST
def run_cancel_view(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    try:
        run_cancel(run=run, user=request.user)
    except ValidationError as error:
        return _after_action(request, run, _message(error))
    return _after_action(request, run)


@login_required
@require_POST
def run_rollback_view(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    try:
        run_rollback(run=run, user=request.user)
    except RollbackRefused as error:
        return _after_action(request, run, str(error))
    return _after_action(request, run)


@login_required
@require_POST
def run_answer_view(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    asked = [m["name"] for m in (run.task or {}).get("missing", [])]
    answers = {name: request.POST.get(f"answer-{name}", "") for name in asked}
    try:
        run_answer(run=run, user=request.user, answers={k: v for k, v in answers.items() if v})
    except ValidationError as error:
        return _after_action(request, run, _message(error))
    return _after_action(request, run)


@login_required
@require_POST
def grant_revoke_view(request: HttpRequest, run_id: str, grant_id: int) -> HttpResponse:
    run = run_get_for_user(user=request.user, run_id=run_id)
    grant = get_object_or_404(SessionGrant, pk=grant_id, run=run)
    grant_revoke(grant=grant, user=request.user)
    return redirect("runs:detail", run_id=run.pk)
