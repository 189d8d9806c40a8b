"""Daily rollups kept current as runs finish, and reconciled from the raw rows (SPEC O6).

A run's figures (runs.observability.core.rollup.contribution) are written in the same
transaction that ends it, as a delta row (``RollupDelta``): a run counts exactly once, and
runs ending together wait on nothing of each other's. A fold moves the deltas into their
cells and day totals, each delta deleted in the transaction that adds it: the readers fold
before they read (so the dashboards are current), and the housekeeping worker folds every
few seconds. Reconciliation rebuilds days from the raw rows with the same function: it
repairs whatever changed after a run ended (an approval cancelled later, a row fixed by
hand) and builds the cells of a history that predates them.

Locks, always in this order: the delta table (a fold's ``FOR UPDATE``, a reconciliation's
``EXCLUSIVE`` table lock, which waits for every fold and ending run under way and holds
off the next until it commits), then cells by key, then day totals by day.

The row readers take the model classes as arguments so that a data migration can run
them against its historical models.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from approvals.models import ApprovalRequest
from policies.models import Agent

from ..core import status as run_status
from ..models import DailyRollup, DailyTotal, ModelCall, RollupDelta, Run, ToolCall
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
    """A run's model calls, tool calls and approval requests, as its contribution counts;
    in no order (their models' own ordering joined the run's row, or sorted, for nothing)."""
    return (
        _calls(ModelCall.objects.filter(run_id=run_id).order_by().values(*CALL_FIELDS)),
        _tools(ToolCall.objects.filter(run_id=run_id).order_by().values(*TOOL_FIELDS)),
        _approvals(
            ApprovalRequest.objects.filter(run_id=run_id).order_by().values(*APPROVAL_FIELDS)
        ),
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


def rollup_run_ended(run: Any, previous: str) -> None:
    """Inside the transaction that ends ``run``: what it adds to its day, as a delta.

    A completed run that is rolled back later moves from completed to rolled back in the
    day it finished (and, when it had passed verification, counts as an escape)."""
    facts = {name: getattr(run, name) for name in RUN_FIELDS}  # ``run`` is its row, current
    children = _children(run.pk)
    change = rollup.contribution(_facts(facts), *children)
    if run.status == run_status.ROLLED_BACK and previous == run_status.COMPLETED:
        counted = rollup.contribution(_facts(facts, run_status.COMPLETED), *children)
        change = rollup.merge(change, counted, -1)
    RollupDelta.objects.create(
        day=day_of(run.finished_at),
        agent_id=run.agent_id,
        workspace_id=run.workspace_id,
        data=change,
    )


# --- folding -------------------------------------------------------------------------------
FOLD_BATCH = 500  # deltas per transaction: a fold never holds the cells for long

Cell = tuple[date, Any, Any]  # (day, agent_id, workspace_id)


def rollups_fold() -> int:
    """Move every pending delta into its cell and its day's total; how many moved. Cheap
    when there are none (one read, no transaction): readers call it before they read."""
    if not RollupDelta.objects.exists():
        return 0
    moved = 0
    while True:
        with transaction.atomic():
            taken = _deltas_take(RollupDelta.objects.order_by("pk"), FOLD_BATCH)
            _cells_add(taken, left_out=_eval_agents() if taken else set())
        count = sum(len(parts) for parts in taken.values())
        moved += count
        if count < FOLD_BATCH:
            return moved


def _deltas_take(pending: Any, limit: int | None = None) -> dict[Cell, list[dict[str, Any]]]:
    """Up to ``limit`` of the ``pending`` deltas, deleted in the caller's transaction (so
    back if it fails), by cell. On PostgreSQL only those no other fold holds: two folds
    take different deltas, and wait for each other only at a cell both change."""
    if connection.features.has_select_for_update_skip_locked:
        pending = pending.select_for_update(skip_locked=True)
    rows = list(pending.values_list("pk", "day", "agent_id", "workspace_id", "data")[:limit])
    if rows:
        pending.model.objects.filter(pk__in=[row[0] for row in rows]).delete()
    taken: dict[Cell, list[dict[str, Any]]] = {}
    for _pk, day, agent_id, workspace_id, data in rows:
        taken.setdefault((day, agent_id, workspace_id), []).append(data)
    return taken


def _eval_agents() -> set[Any]:
    """The eval set's agents: their cells stay out of the day totals."""
    return set(Agent.objects.of_evals().values_list("pk", flat=True))


def _cells_add(
    changes: dict[Cell, list[dict[str, Any]]],
    *,
    left_out: set[Any],
    cell_model: Any = DailyRollup,
    total_model: Any = DailyTotal,
) -> None:
    """Add ``changes`` to their cells, and those of agents not ``left_out`` to their days'
    totals, in the caller's transaction: cells locked in key order, then totals in day
    order, as every writer of them does, so two never deadlock. The rows' trees were just
    read under their locks: the changes are added to them in place."""
    totals: dict[date, dict[str, Any]] = {}
    for key in sorted(changes):
        cell = cell_locked(cell_model, *key)
        for part in changes[key]:
            rollup.accumulate(cell.data, part)
            if key[1] not in left_out:
                rollup.accumulate(totals.setdefault(key[0], {}), part)
        cell.save(update_fields=["data", "updated_at"])
    for day in sorted(totals):
        total = total_locked(total_model, day)
        rollup.accumulate(total.data, totals[day])
        total.save(update_fields=["data", "updated_at"])


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
    delta_model: Any = None,  # None: before runs ended as deltas (an older data migration)
    left_out: Iterable[Any] = (),  # agents whose cells the total leaves out: the eval set's
) -> int:
    """Make ``day``'s cells and total equal the raw rows; returns how many were wrong.

    The delta table is locked before the raw rows are read, and the day's pending deltas
    folded: a run ending meanwhile waits for the lock and then adds its delta, folded into
    the rebuilt cell later, so it is neither lost nor counted twice."""
    models = {
        "run_model": run_model,
        "call_model": call_model,
        "tool_model": tool_model,
        "approval_model": approval_model,
    }
    with transaction.atomic():
        if delta_model is not None:  # the day's pending deltas, in its cells first
            _deltas_hold(delta_model)
            changes = _deltas_take(delta_model.objects.filter(day=day))
            _cells_add(
                changes, left_out=set(left_out), cell_model=rollup_model, total_model=total_model
            )
        existing = {
            (cell.agent_id, cell.workspace_id): cell
            # In key order, as _cells_add locks them; the cells' rows only (their ordering
            # by agent and workspace joined those rows, and locked them too).
            for cell in rollup_model.objects.select_for_update(of=("self",))
            .filter(day=day)
            .order_by("agent_id", "workspace_id")
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


def _deltas_hold(delta_model: Any) -> None:
    """Until the transaction ends, no delta is added or taken but by it: on PostgreSQL the
    table locked EXCLUSIVE (plain reads go on), after every fold and ending run under way;
    on SQLite a write transaction excludes every other writer already."""
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(delta_model._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")


def rollups_reconcile(days: Iterable[date] | None = None) -> int:
    """Rebuild ``days`` (default: yesterday and today, UTC) from the raw rows."""
    left_out = _eval_agents()
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
            delta_model=RollupDelta,
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
