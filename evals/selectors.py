"""Read paths of the evals pages: who may see a suite run, the suite runs page by page, the
pass rates per category behind the chart, and what the eval set holds."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db.models import Count, Q
from django.http import Http404

from harness_console.roles import may_run_evals, may_see_evals
from runs.selectors import parse_run_id

from .core.cases import CATEGORIES
from .loading import BROKEN, CONSOLE_SOURCE, cases_load
from .models import EvalCase, EvalResult, EvalSuiteRun

PAGE_SIZE = 50
CHART_SUITES = 100  # the chart's window: the newest finished suite runs


class BadPage(ValueError):
    """A page number the suite list cannot show; ``status`` is the answer's code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def evals_check(user: Any) -> None:
    if not may_see_evals(user):
        raise PermissionDenied("Your role may not see the eval set's results.")


def suite_get_for_user(*, user: Any, suite_id: Any) -> EvalSuiteRun:
    """The suite run, if this user may see it: 403 without the right (checked first, so
    nothing is learnt about which suites exist), 404 for an unknown or malformed id."""
    evals_check(user)
    parsed = parse_run_id(suite_id)
    if parsed is None:
        raise Http404(f"{str(suite_id)[:60]!r} is not an eval suite id.")
    try:
        return EvalSuiteRun.objects.get(pk=parsed)
    except EvalSuiteRun.DoesNotExist:
        raise Http404("No such eval suite run.") from None


def suite_runs_page(raw_page: str | None) -> Page:
    """One page of suite runs, newest first; a malformed page number is a 400, one past
    the end a 404 (the runs list forgives both; here a link with a bad page is a bug)."""
    paginator = Paginator(EvalSuiteRun.objects.order_by("-started_at"), PAGE_SIZE)
    raw = (raw_page or "1").strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9 or int(raw) < 1:
        raise BadPage(f"The page must be a whole number from 1; {raw[:20]!r} is not one.", 400)
    number = int(raw)
    if number > paginator.num_pages:
        raise BadPage(
            f"There is no page {number}: the suite runs fill {paginator.num_pages} "
            f"page{'s' if paginator.num_pages != 1 else ''}.",
            404,
        )
    return paginator.page(number)


@dataclass(frozen=True)
class Rate:
    passed: int
    total: int

    @property
    def percent(self) -> float:
        return round(100 * self.passed / self.total, 1) if self.total else 0.0


@dataclass
class PassRates:
    """Per finished suite run (oldest first), each category's passed of judged cases.
    Skipped cases were not judged and do not count; broken case files are no category."""

    suites: list[EvalSuiteRun] = field(default_factory=list)
    rates: dict[str, dict[Any, Rate]] = field(default_factory=dict)  # category -> suite pk


def pass_rates(limit: int = CHART_SUITES) -> PassRates:
    """The pass rates from the results themselves: two queries, bounded by ``limit``."""
    suites = list(
        EvalSuiteRun.objects.filter(status=EvalSuiteRun.Status.FINISHED).order_by("-started_at")[
            :limit
        ]
    )[::-1]
    rows = (
        EvalResult.objects.filter(suite__in=[s.pk for s in suites], skipped=False)
        .exclude(category=BROKEN)
        .values("suite_id", "category")
        .annotate(passed=Count("pk", filter=Q(passed=True)), total=Count("pk"))
    )
    rates: dict[str, dict[Any, Rate]] = {}
    for row in rows:
        rates.setdefault(row["category"], {})[row["suite_id"]] = Rate(row["passed"], row["total"])
    order = {c: i for i, c in enumerate(CATEGORIES)}
    ordered = dict(sorted(rates.items(), key=lambda item: (order.get(item[0], 99), item[0])))
    return PassRates(suites=suites, rates=ordered)


@dataclass
class EvalSet:
    """What the eval set holds now: shipped case files per category, the console's own
    cases, and the case files that cannot be parsed."""

    shipped: dict[str, int]
    console: list[EvalCase]
    errors: list[str]


def eval_set() -> EvalSet:
    loaded = cases_load()
    shipped = Counter(c.category for c in loaded.cases if not c.source.startswith(CONSOLE_SOURCE))
    return EvalSet(
        shipped={c: shipped.get(c, 0) for c in CATEGORIES},
        console=list(
            EvalCase.objects.select_related("source_run", "created_by").order_by(
                "-created_at", "name"
            )
        ),
        errors=loaded.errors,
    )


def suite_results(suite: EvalSuiteRun) -> list[tuple[str, list[EvalResult]]]:
    """The suite's results grouped by category (the eval set's order, broken files last),
    failures first within a category."""
    groups: dict[str, list[EvalResult]] = {}
    for result in suite.results.select_related("run").order_by("passed", "skipped", "case"):
        groups.setdefault(result.category, []).append(result)
    order = {c: i for i, c in enumerate((*CATEGORIES, BROKEN))}
    return sorted(groups.items(), key=lambda item: (order.get(item[0], 99), item[0]))


def suite_progress() -> EvalSuiteRun | None:
    """The suite the evals page follows: the running one, else the newest."""
    running = EvalSuiteRun.objects.filter(status=EvalSuiteRun.Status.RUNNING).first()
    return running or EvalSuiteRun.objects.order_by("-started_at").first()


def progress_context(user: Any) -> dict[str, Any]:
    """What the progress fragment (evals/index_progress.html) shows this user: the suite
    it follows, and whether the user may start one (then the start button's state too)."""
    return {"progress": suite_progress(), "may_run": may_run_evals(user)}
