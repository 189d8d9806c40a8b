"""Daily rollups kept current as runs finish, and reconciled from the raw rows (SPEC O6).

A run adds its figures (runs.observability.core.rollup.contribution) to its day's cell in the same
transaction that ends it, under the cell's row lock, so the dashboards are current and a
run counts exactly once. Reconciliation rebuilds days from the raw rows with the same
function: it repairs whatever changed after a run ended (an approval cancelled later, a row
fixed by hand) and builds the cells of a history that predates them.

The row readers take the model classes as arguments so that a data migration can run
them against its historical models.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals.models import ApprovalRequest
from policies.models import Agent

from ..core import status as run_status
from ..models import DailyRollup, DailyTotal, ModelCall, Run, ToolCall
from .core import rollup

logger = logging.getLogger(__name__)

FINISHED = (run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK)
RUN_FIELDS = (
    "id",
    "agent_id",
    "workspace_id",
    "status",
    "failure_kind",
    "created_at",
    "finished_at",
    "verification",
)
CALL_FIELDS = (
    "run_id",
    "model",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cost_usd",
    "cost_basis",
    "latency_ms",
)
TOOL_FIELDS = ("run_id", "tool", "decision", "status")
APPROVAL_FIELDS = ("run_id", "status", "requested_at", "decided_at")


def day_of(moment: datetime) -> date:
    """Rollups count in UTC days, whatever the viewer's zone."""
    return moment.astimezone(UTC).date()


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time.min, tzinfo=UTC)
    return start, start + timedelta(days=1)


def _facts(run: dict[str, Any], status: str | None = None) -> rollup.RunFacts:
    verification = run["verification"] or {}
    return rollup.RunFacts(
        status=status or run["status"],
        failure_kind=run["failure_kind"],
        created_at=run["created_at"],
        finished_at=run["finished_at"],
        verification=verification.get("result", "") if isinstance(verification, dict) else "",
    )


def _calls(rows: Iterable[dict[str, Any]]) -> list[rollup.CallFacts]:
    return [
        rollup.CallFacts(
            model=row["model"],
            input=row["input_tokens"],
            output=row["output_tokens"],
            cache_write=row["cache_creation_input_tokens"],
            cache_read=row["cache_read_input_tokens"],
            cost=row["cost_usd"],
            basis=row["cost_basis"],
            latency_ms=row["latency_ms"],
        )
        for row in rows
    ]


def _tools(rows: Iterable[dict[str, Any]]) -> list[rollup.ToolFacts]:
    return [rollup.ToolFacts(row["tool"], row["decision"], row["status"]) for row in rows]


def _approvals(rows: Iterable[dict[str, Any]]) -> list[rollup.ApprovalFacts]:
    return [
        rollup.ApprovalFacts(row["status"], row["requested_at"], row["decided_at"]) for row in rows
    ]


def _children(
    run_id: Any,
) -> tuple[list[rollup.CallFacts], list[rollup.ToolFacts], list[rollup.ApprovalFacts]]:
    """A run's model calls, tool calls and approval requests, as its contribution counts."""
    return (
        _calls(ModelCall.objects.filter(run_id=run_id).values(*CALL_FIELDS)),
        _tools(ToolCall.objects.filter(run_id=run_id).values(*TOOL_FIELDS)),
        _approvals(ApprovalRequest.objects.filter(run_id=run_id).values(*APPROVAL_FIELDS)),
    )


def cell_locked(rollup_model: Any, day: date, agent_id: Any, workspace_id: Any) -> Any:
    """The cell's row, created if missing, locked until the caller's transaction ends."""
    key = {"day": day, "agent_id": agent_id, "workspace_id": workspace_id}
    return _locked(rollup_model, key, rollup_model(**key, data={}))


def total_locked(total_model: Any, day: date) -> Any:
    """The day's total row, created if missing, locked until the caller's transaction ends.
    Always taken after the cells it sums, everywhere, so two writers never deadlock."""
    return _locked(total_model, {"day": day}, total_model(day=day, data={}))


def _locked(model: Any, key: dict[str, Any], empty: Any) -> Any:
    """The row of ``key`` locked, created first only when missing (once a day per cell):
    a row another writer creates meanwhile is kept, and then locked."""
    try:
        return model.objects.select_for_update().get(**key)
    except model.DoesNotExist:
        model.objects.bulk_create([empty], ignore_conflicts=True)
        return model.objects.select_for_update().get(**key)


def _cell_apply(run: Any, change: dict[str, Any], sign: int = 1) -> None:
    day = day_of(run.finished_at)
    cell = cell_locked(DailyRollup, day, run.agent_id, run.workspace_id)
    cell.data = rollup.merge(cell.data, change, sign)
    cell.save(update_fields=["data", "updated_at"])
    if run.agent.for_evals:
        return  # the eval set's runs have their own cells, and stay out of the day totals
    total = total_locked(DailyTotal, day)
    total.data = rollup.merge(total.data, change, sign)
    total.save(update_fields=["data", "updated_at"])


def rollup_run_ended(run: Any, previous: str) -> None:
    """Inside the transaction that ends ``run`` (its row locked): count it in its day.

    A completed run that is rolled back later moves from completed to rolled back in the
    day it finished (and, when it had passed verification, counts as an escape)."""
    facts = {name: getattr(run, name) for name in RUN_FIELDS}  # ``run`` is its row, current
    children = _children(run.pk)
    if run.status == run_status.ROLLED_BACK and previous == run_status.COMPLETED:
        _cell_apply(run, rollup.contribution(_facts(facts, run_status.COMPLETED), *children), -1)
    _cell_apply(run, rollup.contribution(_facts(facts), *children))


# --- reconciliation --------------------------------------------------------------------------
def cells_from_raw(
    day: date, *, run_model: Any, call_model: Any, tool_model: Any, approval_model: Any
) -> dict[tuple[Any, Any], dict[str, Any]]:
    """Every cell of ``day`` computed from the raw rows: {(agent_id, workspace_id): data}."""
    start, end = day_bounds(day)
    runs = run_model.objects.filter(
        finished_at__gte=start, finished_at__lt=end, status__in=FINISHED
    ).order_by()
    of_day: dict[str, Any] = {
        "run__finished_at__gte": start,
        "run__finished_at__lt": end,
        "run__status__in": FINISHED,
    }
    children: dict[str, dict[Any, list[dict[str, Any]]]] = {}
    parts: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
        ("calls", call_model, CALL_FIELDS),
        ("tools", tool_model, TOOL_FIELDS),
        ("approvals", approval_model, APPROVAL_FIELDS),
    )
    for name, model, columns in parts:
        grouped: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for row in model.objects.filter(**of_day).order_by().values(*columns).iterator(5000):
            grouped[row["run_id"]].append(row)
        children[name] = grouped
    cells: dict[tuple[Any, Any], dict[str, Any]] = {}
    for run in runs.values(*RUN_FIELDS).iterator(5000):
        key = (run["agent_id"], run["workspace_id"])
        part = rollup.contribution(
            _facts(run),
            _calls(children["calls"].get(run["id"], ())),
            _tools(children["tools"].get(run["id"], ())),
            _approvals(children["approvals"].get(run["id"], ())),
        )
        rollup.accumulate(cells.setdefault(key, {}), part)
    return cells


def reconcile_day(
    day: date,
    *,
    run_model: Any,
    call_model: Any,
    tool_model: Any,
    approval_model: Any,
    rollup_model: Any,
    total_model: Any = None,  # None: before totals existed (an older data migration)
    left_out: Iterable[Any] = (),  # agents whose cells the total leaves out: the eval set's
) -> int:
    """Make ``day``'s cells and total equal the raw rows; returns how many were wrong.

    The day's cells are locked before the raw rows are read: a run ending meanwhile waits
    for the lock and then adds itself to the rebuilt cell, so it is neither lost nor
    counted twice."""
    models = {
        "run_model": run_model,
        "call_model": call_model,
        "tool_model": tool_model,
        "approval_model": approval_model,
    }
    with transaction.atomic():
        existing = {
            (cell.agent_id, cell.workspace_id): cell
            for cell in rollup_model.objects.select_for_update().filter(day=day)
        }
        truth = cells_from_raw(day, **models)
        fixed = 0
        for key, data in truth.items():
            cell = existing.pop(key, None)
            if cell is None:
                cell = cell_locked(rollup_model, day, *key)
            if not rollup.same(cell.data, data):
                fixed += 1
                cell.data = data
                cell.save(update_fields=["data", "updated_at"])
        for cell in existing.values():
            if cell.data:
                fixed += 1
            cell.delete()
        if total_model is None:
            return fixed
        skip = set(left_out)
        whole = rollup.total(data for (agent, _), data in truth.items() if agent not in skip)
        total = total_locked(total_model, day)
        if not rollup.same(total.data, whole):
            fixed += 1
            total.data = whole
            total.save(update_fields=["data", "updated_at"])
    return fixed


def rollups_reconcile(days: Iterable[date] | None = None) -> int:
    """Rebuild ``days`` (default: yesterday and today, UTC) from the raw rows."""
    left_out = set(Agent.objects.of_evals().values_list("pk", flat=True))
    if days is None:
        today = day_of(timezone.now())
        days = (today - timedelta(days=1), today)
    fixed = 0
    for day in days:
        fixed += reconcile_day(
            day,
            run_model=Run,
            call_model=ModelCall,
            tool_model=ToolCall,
            approval_model=ApprovalRequest,
            rollup_model=DailyRollup,
            total_model=DailyTotal,
            left_out=left_out,
        )
    if fixed:
        logger.info("Reconciliation rewrote %d rollup cells from the raw rows.", fixed)
    return fixed


def days_with_runs(run_model: Any) -> list[date]:
    """Every day on which some run finished, for a full rebuild."""
    first = (
        run_model.objects.filter(status__in=FINISHED, finished_at__isnull=False)
        .order_by("finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    if first is None:
        return []
    start, today = day_of(first), day_of(timezone.now())
    return [start + timedelta(days=n) for n in range((today - start).days + 1)]
