"""The figures of the operations and retrospective dashboards (SPEC O5, O6), as plain data.

The retrospective reads only rollups (day totals, and cells per day, agent and workspace),
so its cost does not grow with the history; the operations view reads the runs that are live now
(few, by the status index) and the last day's finished runs (by the finished_at index).
Views turn these into tables and Plotly charts; tests compare them with the raw rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Max, Q, QuerySet
from django.utils import timezone

from approvals.models import ApprovalRequest
from policies.core.default_policy import DEFAULT_POLICY_NAME
from policies.models import Agent, InstructionVersion, PolicyChange, Workspace

from ...core import status as run_status
from ...core.failures import LABELS as FAILURE_LABELS
from ...models import DailyRollup, DailyTotal, Run
from ...refusals import refusals_recent
from ..core import rollup
from ..core.retro import SHOWN_OUTCOMES, Retro, retro_compute
from ..rollups import day_of, rollups_fold

WINDOWS = (7, 30)
WORKING = (run_status.PLANNING, run_status.RUNNING, run_status.VERIFYING)
RECENT_FAILURES = 10


# --- retrospective -----------------------------------------------------------------------
def window(days: int, today: date | None = None) -> list[date]:
    last = today or day_of(timezone.now())
    return [last - timedelta(days=n) for n in range(days - 1, -1, -1)]


def retro_figures(
    *,
    days: int,
    agent_id: int | None = None,
    workspace_id: int | None = None,
    today: date | None = None,
) -> Retro:
    """The retrospective over the last ``days`` UTC days (today included).

    Unfiltered, it reads the window's day totals and only the ``models`` part of each cell
    (for cost and tokens by agent); filtered by agent or workspace, that slice's cells."""
    rollups_fold()  # the runs that ended since the last fold, in their cells
    span = window(days, today)
    index = {day: n for n, day in enumerate(span)}
    cells = DailyRollup.objects.filter(day__gte=span[0], day__lte=span[-1]).order_by()
    daily: list[dict[str, Any]] = [{} for _ in span]
    per_agent: Iterable[tuple[date, int, Any]]
    if agent_id is None and workspace_id is None:
        totals = DailyTotal.objects.filter(day__gte=span[0], day__lte=span[-1])
        for day, data in totals.values_list("day", "data"):
            daily[index[day]] = data
        # The day totals leave the eval set's runs out; so does the cost by agent.
        per_agent = cells.without_evals().values_list("day", "agent_id", "data__models")
    else:
        if agent_id is not None:
            cells = cells.filter(agent_id=agent_id)
        if workspace_id is not None:
            cells = cells.filter(workspace_id=workspace_id)
        rows = list(cells.values_list("day", "agent_id", "data"))
        for day, _agent, data in rows:
            rollup.accumulate(daily[index[day]], data)
        per_agent = [(day, agent, data.get("models")) for day, agent, data in rows]
    slugs = dict(Agent.objects.values_list("pk", "slug"))
    changes = changes_between(span[0], span[-1], agent_id=agent_id)
    return retro_compute(span=span, daily=daily, per_agent=per_agent, slugs=slugs, changes=changes)


def changes_between(first: date, last: date, *, agent_id: int | None = None) -> list[dict]:
    """Policy and instruction changes in the window, to mark on the time axis: when the
    figures move, these are the first suspects."""
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    end = datetime.combine(last + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    window = {"created_at__gte": start, "created_at__lt": end}
    policies = PolicyChange.objects.filter(**window)
    instructions = InstructionVersion.objects.filter(**window)
    if agent_id is not None:
        agent = Agent.objects.filter(pk=agent_id).values("policy_id", "policy__name").first()
        instructions = instructions.filter(agent_id=agent_id)
        if agent and agent["policy_id"]:
            policies = policies.filter(policy_id=agent["policy_id"])
        else:
            policies = policies.filter(policy__name=DEFAULT_POLICY_NAME)
    else:  # the eval set's own policies and agents are its business
        policies, instructions = policies.without_evals(), instructions.without_evals()
    marks = [
        {"at": c.created_at, "kind": "policy", "label": f"policy {c.policy.name} v{c.version}"}
        for c in policies.select_related("policy")[:200]
    ] + [
        {
            "at": v.created_at,
            "kind": "instructions",
            "label": f"{v.agent.slug} instructions v{v.version}",
        }
        for v in instructions.select_related("agent")[:200]
    ]
    return sorted(marks, key=lambda m: m["at"])


# --- operations --------------------------------------------------------------------------
@dataclass
class Ops:
    now: datetime
    live: dict[str, int]  # active status → runs now
    finished_24h: dict[str, int]  # outcome → runs that ended in the last 24 hours
    waiting_for_approval: int
    pending_approvals: int
    oldest_wait: dict[str, Any] | None  # run_id, approval_id, since, seconds
    last_hour: dict[str, Any]  # started, finished, completed, failed, error_rate
    recent_failures: list[dict[str, Any]]
    recent_refusals: list[dict[str, Any]]  # runs.refusals.refusals_recent
    stuck: list[dict[str, Any]]
    stuck_after: int  # seconds


def runs_by_active_status() -> dict[str, int]:
    """Runs in each live state now, zeros included (few rows, by the status index)."""
    live: dict[str, int] = dict.fromkeys(
        sorted(run_status.ACTIVE, key=run_status.STATUSES.index), 0
    )
    for status, n in (
        Run.objects.without_evals()
        .filter(status__in=run_status.ACTIVE)
        .order_by()
        .values_list("status")
        .annotate(n=Count("pk"))
    ):
        live[status] = n
    return live


def stuck_runs(*, now: datetime, stuck_after: int) -> QuerySet[Any]:
    """Working runs with no event for ``stuck_after`` seconds (none at all: since created),
    annotated with ``last``, their last event's time: the dashboard lists them, /metrics
    counts them."""
    cutoff = now - timedelta(seconds=stuck_after)
    return (
        Run.objects.without_evals()
        .filter(status__in=WORKING)
        .annotate(last=Max("events__created_at"))
        .filter(Q(last__lt=cutoff) | Q(last__isnull=True, created_at__lt=cutoff))
    )


def ops_figures(*, now: datetime | None = None, stuck_after: int | None = None) -> Ops:
    now = now or timezone.now()
    stuck_after = stuck_after or settings.HARNESS_STUCK_AFTER_SECONDS
    live = runs_by_active_status()
    runs = Run.objects.without_evals()
    day_ago, hour_ago = now - timedelta(days=1), now - timedelta(hours=1)
    finished = dict.fromkeys(SHOWN_OUTCOMES, 0)
    hour = dict.fromkeys(SHOWN_OUTCOMES, 0)
    rows = (
        runs.filter(finished_at__gte=day_ago, finished_at__lte=now)
        .order_by()
        .values_list("status", "failure_kind")
        .annotate(n=Count("pk"), last_hour=Count("pk", filter=Q(finished_at__gte=hour_ago)))
    )
    for status, kind, n, in_hour in rows:
        shown = run_status.shown_status(status, kind)  # a cancel is counted apart
        finished[shown] = finished.get(shown, 0) + n
        hour[shown] = hour.get(shown, 0) + in_hour
    ended = sum(hour.values())
    let_finish = ended - hour[run_status.SHOWN_CANCELLED]
    pending = ApprovalRequest.objects.without_evals().filter(status=ApprovalRequest.Status.PENDING)
    oldest = pending.order_by("requested_at").values("id", "run_id", "requested_at").first()
    failures = [
        {
            "run_id": r["id"],
            "agent": r["agent__slug"],
            "kind": r["failure_kind"],
            "label": FAILURE_LABELS.get(r["failure_kind"], r["failure_kind"] or "Other"),
            "reason": r["failure_reason"],
            "finished_at": r["finished_at"],
        }
        for r in runs.filter(status=run_status.FAILED, finished_at__isnull=False)
        .order_by("-finished_at")
        .values("id", "agent__slug", "failure_kind", "failure_reason", "finished_at")[
            :RECENT_FAILURES
        ]
    ]
    stuck = [
        {
            "run_id": r["id"],
            "agent": r["agent__slug"],
            "status": r["status"],
            "last_event_at": r["last"] or r["created_at"],
            "seconds": int((now - (r["last"] or r["created_at"])).total_seconds()),
        }
        for r in stuck_runs(now=now, stuck_after=stuck_after)
        .order_by("last", "created_at")
        .values("id", "agent__slug", "status", "last", "created_at")[:50]
    ]
    return Ops(
        now=now,
        live=live,
        finished_24h=finished,
        waiting_for_approval=live.get(run_status.WAITING_FOR_APPROVAL, 0),
        pending_approvals=pending.count(),
        oldest_wait=(
            None
            if oldest is None
            else {
                "approval_id": oldest["id"],
                "run_id": oldest["run_id"],
                "since": oldest["requested_at"],
                "seconds": int((now - oldest["requested_at"]).total_seconds()),
            }
        ),
        last_hour={
            "started": runs.filter(created_at__gte=hour_ago, created_at__lte=now).count(),
            "finished": ended,
            **hour,
            "error_rate": hour[run_status.FAILED] / let_finish if let_finish else None,
        },
        recent_failures=failures,
        recent_refusals=refusals_recent(),
        stuck=stuck,
        stuck_after=stuck_after,
    )


def filter_choices() -> dict[str, Any]:
    """Agents and workspaces for the retrospective's filters."""
    return {
        "agents": list(Agent.objects.without_evals().order_by("slug").values("pk", "slug", "name")),
        "workspaces": list(
            Workspace.objects.without_evals().order_by("slug").values("pk", "slug", "name")
        ),
    }
