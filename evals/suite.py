"""Running the eval set (SPEC E1): each case through the real loop in a real worker.

A suite run loads the eval set (``loading``), lays out every case's workspace fixture in
its own folder and points a stable per-case workspace and a per-configuration agent at it
(``fixtures``), creates the runs with the cases' recorded turns and lets the workers take
them as they take any other (``running``). As each run ends or waits for a person, what it
did is collected from the database and the disk (``collect``) and judged
(``evals.core.judge.judge``), and the suite's row counts it (``progress``: the evals page
watches it live); a run left waiting is then cancelled, so no approver is asked about an
eval. One suite runs at a time (:func:`suite_begin`): the per-case workspaces are shared
between suite runs.

``run_evals`` runs a suite in its own process (:func:`suite_run`); the evals page starts
one that a worker runs (``evals.starting``). Both begin and run it here.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from policies.models import Policy
from runs.model_clients import model_key_set
from runs.models import Run

from .collect import outcome_collect
from .core.cases import CATEGORIES, SAFETY_CATEGORY
from .core.judge import judge
from .fixtures import Listed, Prepared, case_prepare, eval_user, mcp_servers_off
from .loading import BROKEN, Loaded, SuiteError, cases_load
from .models import EvalResult, EvalSuiteRun
from .progress import Progress, suite_news, suites_abandoned_mark
from .running import case_start, run_cancel_if_waiting, run_settled, runs_await

logger = logging.getLogger(__name__)

MODELS: Final = ("replay", "anthropic")
KEEP_SUITE_FOLDERS: Final = 5
# evals/servers/, beside evals/cases/: the eval set's own MCP servers.
SERVERS_DIR: Final = "servers"


def suite_check(*, model: str, category: str) -> None:
    """What can refuse a suite before it begins: the model, its key, the category."""
    if model not in MODELS:
        raise SuiteError("The model is replay or anthropic.")
    if model == "anthropic" and not model_key_set():
        raise SuiteError("--model anthropic needs ANTHROPIC_API_KEY; the replay needs none.")
    if category and category not in CATEGORIES:
        raise SuiteError(f"No category {category!r}; the categories: {', '.join(CATEGORIES)}.")


def suite_run(
    *,
    model: str = "replay",
    category: str = "",
    started_by: str = "",
    worker: str = "",
    case_timeout: float = 120.0,
    claim_timeout: float = 30.0,
    progress: Callable[[str], None] = lambda line: None,
) -> EvalSuiteRun:
    """Run the eval set (or one category) in this process and record each case's verdict."""
    suite_check(model=model, category=category)
    loaded = cases_load(category)
    suite = suite_begin(model=model, category=category, started_by=started_by, worker=worker)
    return suite_execute(
        suite, loaded, case_timeout=case_timeout, claim_timeout=claim_timeout, say=progress
    )


def suite_begin(*, model: str, category: str, started_by: str, worker: str = "") -> EvalSuiteRun:
    """The suite's row, unless another suite runs: the one place that says so. At most one
    row may be running (a partial unique constraint, so two suites starting at once cannot
    both get one); a suite whose runner stopped is ended first, so it blocks nobody."""
    suites_abandoned_mark()
    try:
        with transaction.atomic():
            suite = EvalSuiteRun.objects.create(
                model=model, category=category, started_by=started_by, worker=worker
            )
    except IntegrityError:
        running = EvalSuiteRun.objects.filter(status=EvalSuiteRun.Status.RUNNING).first()
        when = f"started {running.started_at:%Y-%m-%d %H:%M} UTC " if running else ""
        who = running.started_by if running and running.started_by else "someone"
        raise SuiteError(
            f"Another eval suite is running ({when}by {who}); the per-case workspaces are "
            "shared, so suites run one at a time."
        ) from None
    suite_news(suite.pk)
    return suite


def suite_execute(
    suite: EvalSuiteRun,
    loaded: Loaded,
    *,
    case_timeout: float = 120.0,
    claim_timeout: float = 30.0,
    say: Callable[[str], None] = lambda line: None,
) -> EvalSuiteRun:
    """Run a begun suite's cases; whatever breaks it off ends it as an error, said."""
    try:
        _suite_cases(
            _Suite(
                row=suite,
                loaded=loaded,
                case_timeout=case_timeout,
                claim_timeout=claim_timeout,
                progress=Progress(suite.pk, say),
            )
        )
    except BaseException as error:
        suite_fail(suite, str(error) or type(error).__name__)
        raise
    suite.refresh_from_db()
    return suite


def suite_fail(suite: EvalSuiteRun, error: str) -> None:
    """End a running suite as an error (one already ended keeps how it ended)."""
    EvalSuiteRun.objects.filter(pk=suite.pk, status=EvalSuiteRun.Status.RUNNING).update(
        status=EvalSuiteRun.Status.ERROR, error=error, finished_at=timezone.now()
    )
    suite_news(suite.pk)


@dataclass
class _Suite:
    """One suite as it runs: its row, its cases and what is known so far."""

    row: EvalSuiteRun
    loaded: Loaded
    case_timeout: float
    claim_timeout: float
    progress: Progress
    user: Any = None
    broken: int = 0  # the broken cases recorded so far
    prepared: list[Prepared] = field(default_factory=list)
    policies_before: dict[str, int] = field(default_factory=dict)
    summary: dict[str, dict[str, int]] = field(
        default_factory=lambda: {c: {"passed": 0, "failed": 0} for c in (*CATEGORIES, BROKEN)}
    )

    @property
    def model(self) -> str:
        return self.row.model


def _prune(root: Path, keep: Iterable[str]) -> None:
    """Keep the folders of the last few suite runs (for looking into a recent failure) and
    remove older ones; only folders named by a suite's id, whatever else is there."""
    keep = set(keep)
    for folder in root.iterdir() if root.is_dir() else ():
        if folder.is_dir() and folder.name not in keep and _is_uuid(folder.name):
            shutil.rmtree(folder, ignore_errors=True)


def _is_uuid(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def _suite_cases(run: _Suite) -> None:
    root = Path(settings.HARNESS_EVAL_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    recent = EvalSuiteRun.objects.order_by("-started_at").values_list("pk", flat=True)
    _prune(root, (str(pk) for pk in recent[:KEEP_SUITE_FOLDERS]))
    run.user = eval_user()
    try:
        _suite_steps(run, root / str(run.row.pk))
    except BaseException:
        for item in run.prepared:  # no run of a suite that broke off is left for a worker
            if item.run is not None:
                run_cancel_if_waiting(item.run, run.user)
        raise
    finally:
        mcp_servers_off(run.loaded.cases)


def _suite_steps(run: _Suite, suite_dir: Path) -> None:
    """1. Lay out every case (against a live model, a replay-only case is skipped).
    2. Note every policy's version.
    3. Count the cases, record each broken and each skipped one.
    4. Start the runs, HARNESS_EVAL_RUNS_AT_ONCE in flight at most, and wait for them,
       judging each as soon as it ends or waits for a person (a run refused at its start
       makes its case broken).
    5. Record the suite's totals.
    """
    _prepare_all(run, suite_dir)
    run.policies_before = dict(Policy.objects.values_list("name", "version"))
    to_run = [p for p in run.prepared if not p.skipped]
    skipped = [p for p in run.prepared if p.skipped]
    run.progress.total(len(to_run) + len(skipped) + len(run.loaded.errors))
    for error in run.loaded.errors:
        _broken_record(run, error)
    for item in skipped:
        _judge_one(run, item)
    at_once = settings.HARNESS_EVAL_RUNS_AT_ONCE
    run.progress.say(f"running {len(to_run)} cases, {at_once} at a time")
    runs_await(
        to_run,
        run.case_timeout,
        run.claim_timeout,
        on_settled=lambda item: _judge_one(run, item),
        tick=run.progress.beat,
        start=lambda item: _start_one(run, item),
        at_once=at_once,
    )
    _suite_finish(run)


def _prepare_all(run: _Suite, suite_dir: Path) -> None:
    servers_dir = Path(__file__).resolve().parent / SERVERS_DIR
    listed: Listed = {}  # each server script is started once to list its tools
    for case in run.loaded.cases:
        run.progress.beat()
        if run.model == "anthropic" and case.model == "replay":
            run.prepared.append(Prepared(case, suite_dir, None, skipped="replay-only case"))
            continue
        try:
            run.prepared.append(case_prepare(case, suite_dir, servers_dir, listed))
        except Exception as error:  # a case that cannot be laid out is broken, not fatal
            logger.warning("Eval case %s could not be prepared", case.source, exc_info=True)
            run.loaded.errors.append(f"{case.source}: {error}")


def _start_one(run: _Suite, item: Prepared) -> bool:
    """The case's run, started; a refused request makes the case broken, recorded now."""
    run.progress.beat()
    try:
        case_start(item, model=run.model, user=run.user)
    except Exception as error:
        item.run = None
        _broken_record(run, f"{item.case.source}: the run could not start: {error}")
        return False
    return True


def _broken_record(run: _Suite, error: str) -> None:
    """A broken case as a failed result of its own: a case must not pass by not running."""
    run.broken += 1
    source = error.split(": ", 1)[0]
    EvalResult.objects.create(
        suite=run.row,
        case=f"broken:{run.broken}",  # a name no case can have
        category=BROKEN,
        source=source[:300],
        passed=False,
        failures=[error],
    )
    run.summary[BROKEN]["failed"] += 1
    run.progress.recorded("failed", f"BROKEN {error}")


def _suite_finish(run: _Suite) -> None:
    """The totals from the verdicts themselves (the counts the runner kept as it went
    agree with them); a suite ended meanwhile as abandoned stays ended."""
    counts = {k: v for k, v in run.summary.items() if v["passed"] or v["failed"]}
    EvalSuiteRun.objects.filter(pk=run.row.pk, status=EvalSuiteRun.Status.RUNNING).update(
        status=EvalSuiteRun.Status.FINISHED,
        summary=counts,
        passed=sum(v["passed"] for v in counts.values()),
        failed=sum(v["failed"] for v in counts.values()),
        skipped=sum(1 for p in run.prepared if p.skipped),
        finished_at=timezone.now(),
    )
    suite_news(run.row.pk)


def _judge_one(run: _Suite, item: Prepared) -> None:
    case = item.case
    row = EvalResult(suite=run.row, case=case.name, category=case.category, title=case.title)
    row.source = case.source[:300]
    if item.skipped:
        row.passed, row.skipped, row.failures = False, True, [f"skipped: {item.skipped}"]
        row.save()
        run.progress.recorded("skipped", f"SKIP {case.category}/{case.name}: {item.skipped}")
        return
    assert item.run is not None  # not skipped: its run started
    failures = _verdict(run, item)
    done = Run.objects.get(pk=item.run.pk)
    row.passed, row.failures, row.run = not failures, failures, done
    ended = done.finished_at or timezone.now()
    row.seconds = round(ended.timestamp() - done.created_at.timestamp(), 3)
    row.save()
    verdict = "passed" if not failures else "failed"
    run.summary[case.category][verdict] += 1
    lines = [f"{'PASS' if not failures else 'FAIL'} {case.category}/{case.name}"]
    run.progress.recorded(verdict, "\n".join([*lines, *(f"    {f}" for f in failures)]))


def _verdict(run: _Suite, item: Prepared) -> list[str]:
    """Every way the case's run missed the case; the run is cancelled if left waiting."""
    assert item.run is not None
    current = Run.objects.get(pk=item.run.pk)
    outcome = outcome_collect(item, run.policies_before)
    failures = judge(item.case, outcome, replayed=run.model == "replay")
    if item.decision_error:
        failures.insert(0, item.decision_error)
    if not run_settled(current):
        failures.insert(0, f"did not end or wait within its time (still {current.status})")
    run_cancel_if_waiting(current, run.user)
    return failures


def suite_report(suite: EvalSuiteRun) -> dict[str, Any]:
    """The JSON report: per category passed and failed, and each failure with its reasons."""
    return {
        "suite": str(suite.pk),
        "model": suite.model,
        "status": suite.status,
        "categories": {
            name: {"passed": counts["passed"], "failed": counts["failed"]}
            for name, counts in sorted(suite.summary.items())
        },
        "failures": [
            {
                "case": r.case,
                "category": r.category,
                "source": r.source,
                "run": str(r.run_id) if r.run_id else None,
                "reasons": r.failures,
            }
            for r in suite.results.filter(passed=False, skipped=False).order_by("category", "case")
        ],
        "skipped": list(suite.results.filter(skipped=True).values_list("case", flat=True)),
        "passed": suite.passed,
        "failed": suite.failed,
    }


def suite_unsafe(suite: EvalSuiteRun) -> str:
    """Why the suite says the defences did not hold ("" when they did): a malicious case
    failed, a case file was broken, or no malicious case ran where they should have (an
    empty or misplaced case folder must not read as safe)."""
    results = suite.results.filter(skipped=False)
    failed = results.filter(passed=False, category__in=[SAFETY_CATEGORY, BROKEN]).count()
    if failed:
        return f"{failed} malicious or broken case(s) failed"
    if (
        suite.category in ("", SAFETY_CATEGORY)
        and not results.filter(category=SAFETY_CATEGORY).exists()
    ):
        return "no malicious case ran: the defences were not tested"
    return ""
