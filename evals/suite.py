"""Running the eval set (SPEC E1): each case through the real loop in a real worker.

A suite run loads the eval set (``loading``), lays out every case's workspace fixture in
its own folder and points a stable per-case workspace and a per-configuration agent at it
(``fixtures``), creates the runs with the cases' recorded turns and lets the workers take
them as they take any other (``running``). When each run has ended or waits for a person,
what it did is collected from the database and the disk (``collect``) and judged
(``evals.core.judge.judge``); a run left waiting is then cancelled, so no approver is asked
about an eval. One suite runs at a time: the per-case workspaces are shared between suite
runs.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
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
from .fixtures import Prepared, case_prepare, eval_user, mcp_servers_off
from .loading import BROKEN, Loaded, SuiteError, cases_load
from .models import EvalResult, EvalSuiteRun
from .running import case_start, run_cancel_if_waiting, run_settled, runs_await

logger = logging.getLogger(__name__)

STALE_SUITE: Final = timedelta(hours=1)
KEEP_SUITE_FOLDERS: Final = 5
# evals/servers/, beside evals/cases/: the eval set's own MCP servers.
SERVERS_DIR: Final = "servers"


def suite_run(
    *,
    model: str = "replay",
    category: str = "",
    started_by: str = "",
    case_timeout: float = 120.0,
    claim_timeout: float = 30.0,
    progress: Callable[[str], None] = lambda line: None,
) -> EvalSuiteRun:
    """Run the eval set (or one category) and record each case's verdict."""
    if model not in ("replay", "anthropic"):
        raise SuiteError("The model is replay or anthropic.")
    if model == "anthropic" and not model_key_set():
        raise SuiteError("--model anthropic needs ANTHROPIC_API_KEY; the replay needs none.")
    loaded = cases_load(category)
    suite = _suite_begin(model=model, category=category, started_by=started_by)
    try:
        _suite_cases(suite, loaded, model, case_timeout, claim_timeout, progress)
    except BaseException as error:
        EvalSuiteRun.objects.filter(pk=suite.pk).update(
            status=EvalSuiteRun.Status.ERROR,
            error=str(error) or type(error).__name__,
            finished_at=timezone.now(),
        )
        raise
    suite.refresh_from_db()
    return suite


def _suite_begin(*, model: str, category: str, started_by: str) -> EvalSuiteRun:
    """The suite's row, unless another suite runs: at most one row may be running (a
    partial unique constraint, so two suites starting at once cannot both get one)."""
    EvalSuiteRun.objects.filter(
        status=EvalSuiteRun.Status.RUNNING, started_at__lt=timezone.now() - STALE_SUITE
    ).update(status=EvalSuiteRun.Status.ERROR, error="abandoned: it did not finish within an hour")
    try:
        with transaction.atomic():
            return EvalSuiteRun.objects.create(
                model=model, category=category, started_by=started_by
            )
    except IntegrityError:
        running = EvalSuiteRun.objects.filter(status=EvalSuiteRun.Status.RUNNING).first()
        when = f"started {running.started_at:%Y-%m-%d %H:%M} UTC " if running else ""
        who = running.started_by if running and running.started_by else "someone"
        raise SuiteError(
            f"Another eval suite is running ({when}by {who}); the per-case workspaces are "
            "shared, so suites run one at a time."
        ) from None


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


def _suite_cases(
    suite: EvalSuiteRun,
    loaded: Loaded,
    model: str,
    case_timeout: float,
    claim_timeout: float,
    progress: Callable[[str], None],
) -> None:
    root = Path(settings.HARNESS_EVAL_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    recent = EvalSuiteRun.objects.order_by("-started_at").values_list("pk", flat=True)
    _prune(root, (str(pk) for pk in recent[:KEEP_SUITE_FOLDERS]))
    suite_dir = root / str(suite.pk)
    user = eval_user()
    prepared: list[Prepared] = []
    try:
        _suite_steps(
            suite, loaded, prepared, model, case_timeout, claim_timeout, progress, suite_dir, user
        )
    except BaseException:
        for item in prepared:  # no run of a suite that broke off is left for a worker
            if item.run is not None:
                run_cancel_if_waiting(item.run, user)
        raise
    finally:
        mcp_servers_off(loaded.cases)


def _suite_steps(
    suite: EvalSuiteRun,
    loaded: Loaded,
    prepared: list[Prepared],
    model: str,
    case_timeout: float,
    claim_timeout: float,
    progress: Callable[[str], None],
    suite_dir: Path,
    user: Any,
) -> None:
    """1. Lay out every case (against a live model, a replay-only case is skipped).
    2. Note every policy's version, then start every run.
    3. Record each broken case, wait for the runs and judge each.
    4. Record the suite's totals.
    """
    _prepare_all(loaded, prepared, model, suite_dir)
    policies_before = dict(Policy.objects.values_list("name", "version"))
    _start_all(loaded, prepared, model, user)
    summary = {c: {"passed": 0, "failed": 0} for c in (*CATEGORIES, BROKEN)}
    _broken_record(suite, loaded.errors, summary, progress)
    progress(f"started {sum(1 for p in prepared if p.run)} runs")
    runs_await(prepared, case_timeout, claim_timeout)
    for item in prepared:
        _judge_one(suite, item, model, policies_before, user, summary, progress)
    _suite_finish(suite, prepared, summary)


def _prepare_all(loaded: Loaded, prepared: list[Prepared], model: str, suite_dir: Path) -> None:
    servers_dir = Path(__file__).resolve().parent / SERVERS_DIR
    for case in loaded.cases:
        if model == "anthropic" and case.model == "replay":
            prepared.append(Prepared(case, suite_dir, None, skipped="replay-only case"))
            continue
        try:
            prepared.append(case_prepare(case, suite_dir, servers_dir))
        except Exception as error:  # a case that cannot be laid out is broken, not fatal
            logger.warning("Eval case %s could not be prepared", case.source, exc_info=True)
            loaded.errors.append(f"{case.source}: {error}")


def _start_all(loaded: Loaded, prepared: list[Prepared], model: str, user: Any) -> None:
    for item in prepared:
        if not item.skipped:
            try:
                case_start(item, model=model, user=user)
            except Exception as error:  # a refused request: the case is broken
                item.run = None
                loaded.errors.append(f"{item.case.source}: the run could not start: {error}")


def _broken_record(
    suite: EvalSuiteRun,
    errors: list[str],
    summary: dict[str, dict[str, int]],
    progress: Callable[[str], None],
) -> None:
    """Each broken case as a failed result of its own: a case must not pass by not running."""
    for number, error in enumerate(errors, 1):
        source = error.split(": ", 1)[0]
        EvalResult.objects.create(
            suite=suite,
            case=f"broken:{number}",  # a name no case can have
            category=BROKEN,
            source=source[:300],
            passed=False,
            failures=[error],
        )
        summary[BROKEN]["failed"] += 1
        progress(f"BROKEN {error}")


def _suite_finish(
    suite: EvalSuiteRun, prepared: list[Prepared], summary: dict[str, dict[str, int]]
) -> None:
    counts = {k: v for k, v in summary.items() if v["passed"] or v["failed"]}
    EvalSuiteRun.objects.filter(pk=suite.pk).update(
        status=EvalSuiteRun.Status.FINISHED,
        summary=counts,
        passed=sum(v["passed"] for v in counts.values()),
        failed=sum(v["failed"] for v in counts.values()),
        skipped=sum(1 for p in prepared if p.skipped),
        finished_at=timezone.now(),
    )


def _judge_one(
    suite: EvalSuiteRun,
    item: Prepared,
    model: str,
    policies_before: dict[str, int],
    user: Any,
    summary: dict[str, dict[str, int]],
    progress: Callable[[str], None],
) -> None:
    case = item.case
    if item.run is None and not item.skipped:
        return  # its start failed: recorded as a broken case
    row = EvalResult(suite=suite, case=case.name, category=case.category, title=case.title)
    row.source = case.source[:300]
    if item.skipped:
        row.passed, row.skipped, row.failures = False, True, [f"skipped: {item.skipped}"]
        row.save()
        progress(f"SKIP {case.category}/{case.name}: {item.skipped}")
        return
    assert item.run is not None  # not skipped: its run started
    run = Run.objects.get(pk=item.run.pk)
    outcome = outcome_collect(item, policies_before)
    failures = judge(case, outcome, replayed=model == "replay")
    if item.decision_error:
        failures.insert(0, item.decision_error)
    if not run_settled(run):
        failures.insert(0, f"did not end or wait within its time (still {run.status})")
    run_cancel_if_waiting(run, user)
    row.passed, row.failures, row.run = not failures, failures, run
    ended = run.finished_at or timezone.now()
    row.seconds = round(ended.timestamp() - run.created_at.timestamp(), 3)
    row.save()
    summary[case.category]["passed" if not failures else "failed"] += 1
    progress(f"{'PASS' if not failures else 'FAIL'} {case.category}/{case.name}")
    for failure in failures:
        progress(f"    {failure}")


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
