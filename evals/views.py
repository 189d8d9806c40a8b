"""The evals pages (SPEC E1, issue points 4 and 5): every suite run with the pass rates per
category over time, a suite started from the page and followed live, one suite's failures
linked to their runs, and "add to eval set" on a failed run. Thin: check who is asking,
call a selector or the service, render."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from harness_console.roles import may_add_eval_case, may_run_evals, may_see_evals
from harness_console.web.fragments import wants_fragment
from runs.model_clients import model_key_set
from runs.models import Run
from runs.selectors import run_get_for_user

from .charts import pass_rate_chart
from .forms import EvalCaseForm, SuiteStartForm, eval_case_initial
from .from_runs import EvalCaseRefused, eval_case_from_run, eval_case_refusal
from .loading import SuiteError
from .selectors import (
    BadPage,
    eval_set,
    evals_check,
    pass_rates,
    progress_context,
    suite_get_for_user,
    suite_results,
    suite_runs_page,
)
from .starting import suite_start
from .suite import suite_report


@login_required
def evals_index(request: HttpRequest) -> HttpResponse:
    """``?page=N``: the suite runs, newest first, the chart, what the eval set holds, and
    the suite in progress (alone for an htmx request: ``evals/index_progress.html``)."""
    evals_check(request.user)
    if wants_fragment(request):
        return render(request, "evals/index_progress.html", progress_context(request.user))
    return _index(request, SuiteStartForm(key_set=model_key_set()))


def _index(request: HttpRequest, form: SuiteStartForm, status: int = 200) -> HttpResponse:
    context: dict[str, Any] = {
        "eval_set": eval_set(),
        "chart": pass_rate_chart(pass_rates()),
        "start_form": form,
        "key_set": model_key_set(),
        **progress_context(request.user),
    }
    try:
        context["page"] = suite_runs_page(request.GET.get("page"))
    except BadPage as error:
        context["error"] = str(error)
        status = error.status
    return render(request, "evals/index.html", context, status=status)


@login_required
@require_POST
def evals_start(request: HttpRequest) -> HttpResponse:
    """Start a suite for a worker to run (ops and admins); the page then follows it live.
    Bad input is a 400 and a second suite a 409, each said on the page's form."""
    if not may_run_evals(request.user):
        raise PermissionDenied("Your role may not start eval suites.")
    form = SuiteStartForm(request.POST, key_set=model_key_set())
    status = 400
    if form.is_valid():
        try:
            suite = suite_start(
                model=form.cleaned_data["model"],
                category=form.cleaned_data["category"],
                user=request.user,
            )
        except SuiteError as error:
            form.add_error(None, str(error))
            status = 409
        else:
            what = suite.category or "every category"
            messages.success(request, f"Started a suite of {what}: its progress shows below.")
            return redirect(f"{reverse('evals:index')}#eval-run")
    return _index(request, form, status)


@login_required
def evals_suite(request: HttpRequest, suite_id: str) -> HttpResponse:
    suite = suite_get_for_user(user=request.user, suite_id=suite_id)
    return render(request, "evals/suite.html", {"suite": suite, "groups": suite_results(suite)})


@login_required
def evals_report(request: HttpRequest, suite_id: str) -> JsonResponse:
    """The command's JSON report of one suite run (``evals.suite.suite_report``)."""
    suite = suite_get_for_user(user=request.user, suite_id=suite_id)
    return JsonResponse(suite_report(suite), json_dumps_params={"indent": 2})


def _add_check(request: HttpRequest, run_id: str) -> Run:
    """The right first (nothing is learnt about runs without it), then the run."""
    if not may_add_eval_case(request.user):
        raise PermissionDenied("Your role may not add cases to the eval set.")
    return run_get_for_user(user=request.user, run_id=run_id)


@login_required
def eval_case_add(request: HttpRequest, run_id: str) -> HttpResponse:
    """GET: the form, pre-filled so the case replays to the same failure; POST: the case."""
    run = _add_check(request, run_id)
    refusal = eval_case_refusal(run)
    form = EvalCaseForm(request.POST or None, initial=eval_case_initial(run))
    if request.method == "POST" and not refusal and form.is_valid():
        try:
            case = eval_case_from_run(
                run=run,
                name=form.cleaned_data["name"],
                title=form.cleaned_data["title"],
                expect=form.expect(),
                user=request.user,
            )
        except EvalCaseRefused as error:
            form.add_error(error.field, str(error))
        else:
            messages.success(
                request, f"Added {case.name} to the eval set: the next suite run replays it."
            )
            if may_see_evals(request.user):
                return redirect(f"{reverse('evals:index')}#case-{case.name}")
            return redirect("runs:detail", run_id=run.pk)
    context = {
        "run": run,
        "form": form,
        "refusal": refusal,
        "turns": run.messages.filter(kind="assistant").count(),
        "existing": list(run.eval_cases.values_list("name", flat=True)),
    }
    status = 400 if refusal or request.method == "POST" else 200
    return render(request, "evals/add.html", context, status=status)
