"""Prometheus metrics at ``/metrics`` (SPEC O2), read from the database at each scrape.

Workers on any number of machines write runs, model calls and tool calls to the database
and each finished run adds its figures to its day's rollup cell (runs.observability.rollups) in the
transaction that ends it. So the web process that answers a scrape sees every worker's
work, with no per-process state to merge: no global registry, no multiprocess files.

1. Counters are the sum of the rollup cells of all days. A run's figures (model calls,
   tokens, cost, tool calls, permission decisions, approvals, duration) count once, when
   it finishes: they only grow, as Prometheus expects of a counter.
2. Gauges (runs by active status, stuck runs, pending approvals) come from the live rows,
   by index.
3. One scrape reads everything in one read transaction, so a run that finishes meanwhile
   is counted whole or not at all.
4. The total of the cells of past days is cached under a key that changes whenever one of
   those cells does, so a scrape reads today's cells only, whatever the history's length.
"""

from __future__ import annotations

import hmac
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Final, Literal, get_args

from django.conf import settings
from django.core.cache import cache
from django.db import connections, transaction
from django.db.models import Count, Max, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from approvals.models import ApprovalRequest
from harness_console.roles import ADMIN
from policies.core.permissions import Decision
from policies.models import Agent

from ..core.failures import LABELS as FAILURE_KINDS
from ..models import DailyRollup
from .core import rollup
from .dashboards.figures import runs_by_active_status, stuck_runs
from .rollups import day_of, rollups_fold

# Bucket edges in seconds. Rollup histograms keep durations in ms rounded to two
# significant figures, so an observation sits on the side of an edge its rounded value
# puts it (1,004 ms counts as 1 s): bucket counts are exact to that rounding.
MODEL_LATENCY_BUCKETS: Final = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
APPROVAL_LATENCY_BUCKETS: Final = (10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600)
RUN_DURATION_BUCKETS: Final = (1, 5, 10, 30, 60, 300, 900, 3600)
TOKEN_TYPES: Final = ("input", "output", "cache_write", "cache_read")
FINAL_APPROVAL_STATUSES: Final = ("approved", "rejected", "expired", "cancelled", "invalidated")
# Past days change rarely (a rollback, a reconciliation); their cache key changes when they
# do. The timeout only bounds what clock skew between machines could hide (an updated_at
# written by a late clock that does not raise the maximum).
PAST_CACHE_SECONDS: Final = 900
PAST_CACHE_PREFIX: Final = "harness:metrics:past:v1"

Access = Literal["granted", "no_credentials", "bad_token", "forbidden"]


# --- who may read them ----------------------------------------------------------------------
def metrics_access(*, authorization: str, user: Any) -> Access:
    """Whether a scrape may read the metrics.

    A bearer token is judged on its own (a wrong one is refused even with a session): it
    must equal ``METRICS_TOKEN``, and an empty setting matches nothing. Without one, a
    logged-in admin (superuser or the admin role) may read them, as the console's
    operators of last resort; other users may not."""
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        expected = settings.METRICS_TOKEN.encode()
        given = credentials.strip().encode()
        if expected and given and hmac.compare_digest(given, expected):
            return "granted"
        return "bad_token"
    if not user.is_authenticated:
        return "no_credentials"
    if user.is_superuser:
        return "granted"
    if user.groups.filter(name=ADMIN).exists():
        return "granted"
    return "forbidden"


# --- reading ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """Everything one scrape shows, read at one moment."""

    live: dict[str, int]  # active status → runs now
    stuck_runs: int  # working, with no event for HARNESS_STUCK_AFTER_SECONDS
    pending_approvals: int
    oldest_wait_seconds: float  # 0 when nothing waits
    next_expiry_seconds: float | None  # None when no pending request has a deadline
    agents: dict[str, dict[str, Any]]  # agent slug → total of its cells, all days


@contextmanager
def read_snapshot(using: str = "default") -> Iterator[None]:
    """One read transaction that sees one state of the database, and may not write.

    PostgreSQL's default (READ COMMITTED) gives each statement its own snapshot, so the
    transaction asks for REPEATABLE READ first. SQLite in WAL mode keeps one snapshot per
    read transaction already, but this project begins transactions IMMEDIATE (taking the
    write lock, for its writers); a scrape begins a DEFERRED one, so it never holds up a
    worker. Inside a caller's transaction there is nothing to choose: its snapshot holds.

    A write inside such a snapshot fails whenever another connection committed since it
    began (SQLite: "database is locked" at once, no busy wait; PostgreSQL: a serialization
    failure): a scrape that folded the rollups in it answered 500 while runs were ending.
    So the snapshot is read-only at the database (PostgreSQL's READ ONLY, SQLite's
    ``query_only``): a write in it fails every time, not only in a race. (Inside a caller's
    transaction the caller decides, and may write.)"""
    # Any: transaction_mode is the SQLite backend's own attribute, unknown to the stubs.
    connection: Any = connections[using]
    if connection.in_atomic_block:
        with transaction.atomic(using=using):
            yield
        return
    mode = getattr(connection, "transaction_mode", None)
    if connection.vendor == "sqlite":
        connection.transaction_mode = "DEFERRED"
    try:
        with transaction.atomic(using=using):
            if connection.vendor == "sqlite":
                connection.transaction_mode = mode
                with connection.cursor() as cursor:
                    cursor.execute("PRAGMA query_only = ON")
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
    finally:
        if connection.vendor == "sqlite":
            connection.transaction_mode = mode
            _writable_again(connection)


def _writable_again(connection: Any) -> None:
    """``query_only`` is the connection's flag, not the transaction's: turned off, or, if
    the connection cannot take it (broken under the failed body), closed, so that no
    read-only connection is used again and the body's own error is the one raised."""
    if connection.connection is None:
        return
    try:
        connection.connection.execute("PRAGMA query_only = OFF")
    except sqlite3.Error:
        connection.close()


def metrics_snapshot(*, now: datetime | None = None) -> Snapshot:
    """Read one scrape's figures. Every agent gets its series, at zero before its first
    run, so rate() has a starting point; labels are agent slugs, never ids. The eval set's
    traffic is left out: its cases fail runs on purpose, and no alert should fire for it."""
    now = now or timezone.now()
    rollups_fold()  # the runs that ended since the last fold, in their cells: a write, so first
    with read_snapshot():
        live = runs_by_active_status()
        stuck = stuck_runs_count(now=now)
        pending = ApprovalRequest.objects.without_evals().filter(
            status=ApprovalRequest.Status.PENDING
        )
        waiting = pending.order_by().aggregate(
            n=Count("pk"), oldest=Min("requested_at"), soonest=Min("expires_at")
        )
        slugs = dict(Agent.objects.without_evals().values_list("pk", "slug"))
        by_id = cells_total(today=day_of(now))
    agents: dict[str, dict[str, Any]] = {slug: {} for slug in slugs.values()}
    for agent_id, data in by_id.items():
        slug = slugs.get(agent_id, str(agent_id))
        rollup.accumulate(agents.setdefault(slug, {}), data)
    return Snapshot(
        live=live,
        stuck_runs=stuck,
        pending_approvals=waiting["n"],
        oldest_wait_seconds=(
            max(0.0, (now - waiting["oldest"]).total_seconds()) if waiting["oldest"] else 0.0
        ),
        next_expiry_seconds=(
            max(0.0, (waiting["soonest"] - now).total_seconds()) if waiting["soonest"] else None
        ),
        agents=agents,
    )


def stuck_runs_count(*, now: datetime) -> int:
    """The operations dashboard's stuck runs, counted (few rows: the working statuses)."""
    return stuck_runs(now=now, stuck_after=settings.HARNESS_STUCK_AFTER_SECONDS).count()


def cells_total(*, today: date) -> dict[Any, dict[str, Any]]:
    """The total of every rollup cell, per agent id: past days from the cache, today fresh.

    The key of the past days' total names how many cells they have and their latest
    ``updated_at``: a reconciliation or a rollback that changes a past cell bumps the
    latter (``auto_now``), one that deletes a cell lowers the former. The caller folds the
    pending deltas first (:func:`metrics_snapshot`): this reads in its snapshot."""
    past = DailyRollup.objects.without_evals().filter(day__lt=today).order_by()
    stamp = past.aggregate(n=Count("pk"), last=Max("updated_at"))
    last = stamp["last"].isoformat() if stamp["last"] else "-"
    key = f"{PAST_CACHE_PREFIX}:{today.isoformat()}:{stamp['n']}:{last}"
    totals: dict[Any, dict[str, Any]] | None = cache.get(key)
    if totals is None:
        totals = _per_agent(past.values_list("agent_id", "data").iterator(2000))
        cache.set(key, totals, PAST_CACHE_SECONDS)
    fresh = DailyRollup.objects.without_evals().filter(day__gte=today).order_by()
    for agent_id, data in fresh.values_list("agent_id", "data"):
        rollup.accumulate(totals.setdefault(agent_id, {}), data)
    return totals


def _per_agent(cells: Iterable[tuple[Any, dict[str, Any]]]) -> dict[Any, dict[str, Any]]:
    totals: dict[Any, dict[str, Any]] = {}
    for agent_id, data in cells:
        rollup.accumulate(totals.setdefault(agent_id, {}), data)
    return totals


# --- exposition ------------------------------------------------------------------------------
def histogram_buckets(
    histogram: Mapping[str, int], edges: Iterable[float]
) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets (seconds) and the sum, from a rollup histogram (ms
    rounded to two significant figures); the sum is exact to the same rounding."""
    counts = sorted((int(ms), n) for ms, n in histogram.items())
    buckets = [
        (floatToGoString(edge), float(sum(n for ms, n in counts if ms <= edge * 1000)))
        for edge in edges
    ]
    buckets.append(("+Inf", float(sum(n for _, n in counts))))
    return buckets, sum(ms * n for ms, n in counts) / 1000


def _observe(
    family: HistogramMetricFamily,
    labels: list[str],
    histogram: Mapping[str, int],
    edges: Iterable[float],
) -> None:
    buckets, total = histogram_buckets(histogram, edges)
    family.add_metric(labels, buckets, total)


def _with_known(found: Iterable[str], known: Iterable[str]) -> list[str]:
    """Label values seen, plus the known ones at zero, so a series exists before its first
    increment (rate() needs two samples)."""
    return sorted(set(found) | set(known))


class HarnessCollector(Collector):
    """Turns one :class:`Snapshot` into metric families; registered on a fresh registry for
    each scrape, so nothing outlives the request."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.whole = rollup.total(snapshot.agents.values())

    def collect(self) -> Iterator[Metric]:
        yield from self._live()
        yield from self._runs()
        yield from self._failures()
        yield from self._models()
        yield from self._tools()
        yield from self._approvals()

    def _live(self) -> Iterator[Metric]:
        runs = GaugeMetricFamily(
            "harness_runs", "Runs in each active status now.", labels=["status"]
        )
        for status, n in self.snapshot.live.items():
            runs.add_metric([status], n)
        yield runs
        yield GaugeMetricFamily(
            "harness_runs_stuck",
            "Working runs with no event for HARNESS_STUCK_AFTER_SECONDS.",
            value=self.snapshot.stuck_runs,
        )
        yield GaugeMetricFamily(
            "harness_approvals_pending",
            "Approval requests waiting for a decision now.",
            value=self.snapshot.pending_approvals,
        )
        yield GaugeMetricFamily(
            "harness_approval_oldest_wait_seconds",
            "How long the oldest pending approval request has waited (0: none waits).",
            value=self.snapshot.oldest_wait_seconds,
        )
        expiry = GaugeMetricFamily(
            "harness_approval_next_expiry_seconds",
            "Seconds until the soonest deadline of a pending approval request (0 once "
            "passed, until the sweep expires it; no sample when none has a deadline).",
        )
        if self.snapshot.next_expiry_seconds is not None:
            expiry.add_metric([], self.snapshot.next_expiry_seconds)
        yield expiry

    def _runs(self) -> Iterator[Metric]:
        families = {
            "completed": CounterMetricFamily(
                "harness_runs_completed_total",
                "Runs that completed, including those rolled back later.",
                labels=["agent"],
            ),
            "failed": CounterMetricFamily(
                "harness_runs_failed_total", "Runs that failed.", labels=["agent"]
            ),
            "rolled_back": CounterMetricFamily(
                "harness_runs_rolled_back_total",
                "Completed runs rolled back later (still counted in completed).",
                labels=["agent"],
            ),
            "verified": CounterMetricFamily(
                "harness_runs_verified_total",
                "Finished runs whose verification passed.",
                labels=["agent"],
            ),
        }
        duration = HistogramMetricFamily(
            "harness_run_duration_seconds",
            "Duration of finished runs, from submission to the end (ms rounded to 2 "
            "significant figures: buckets and sum exact to that rounding).",
            labels=["agent"],
        )
        for agent, data in sorted(self.snapshot.agents.items()):
            runs = data.get("runs", {})
            families["completed"].add_metric(
                [agent], runs.get("completed", 0) + runs.get("rolled_back", 0)
            )
            families["failed"].add_metric([agent], runs.get("failed", 0))
            families["rolled_back"].add_metric([agent], runs.get("rolled_back", 0))
            families["verified"].add_metric([agent], data.get("verified", 0))
            _observe(duration, [agent], data.get("duration", {}), RUN_DURATION_BUCKETS)
        yield from families.values()
        yield duration

    def _failures(self) -> Iterator[Metric]:
        failures = self.whole.get("failures", {})
        kinds = CounterMetricFamily(
            "harness_run_failures_total", "Failed runs by failure kind.", labels=["kind"]
        )
        for kind in _with_known(failures, FAILURE_KINDS):
            kinds.add_metric([kind], failures.get(kind, 0))
        yield kinds
        yield CounterMetricFamily(
            "harness_verification_escapes_total",
            "Runs that passed verification and were rolled back later.",
            value=self.whole.get("escaped", 0),
        )

    def _models(self) -> Iterator[Metric]:
        calls = CounterMetricFamily(
            "harness_model_calls_total", "Model calls of finished runs.", labels=["model"]
        )
        latency = HistogramMetricFamily(
            "harness_model_call_duration_seconds",
            "Latency of model calls of finished runs (ms rounded to 2 significant figures: "
            "buckets and sum exact to that rounding).",
            labels=["model"],
        )
        tokens = CounterMetricFamily(
            "harness_model_tokens_total",
            "Tokens of model calls of finished runs. input excludes cache_write and "
            "cache_read (Anthropic's convention), so the sum over types counts each once.",
            labels=["model", "type"],
        )
        cost = CounterMetricFamily(
            "harness_model_cost_usd_total",
            "Cost in US dollars of priced model calls of finished runs.",
            labels=["model"],
            unit="usd",
        )
        unpriced = CounterMetricFamily(
            "harness_model_calls_unpriced_total",
            "Model calls of finished runs with no price for their model (no cost counted).",
            labels=["model"],
        )
        estimated = CounterMetricFamily(
            "harness_model_calls_estimated_total",
            "Model calls of finished runs priced from tokens counted here, not reported.",
            labels=["model"],
        )
        for model, figures in sorted(self.whole.get("models", {}).items()):
            calls.add_metric([model], figures.get("calls", 0))
            _observe(latency, [model], figures.get("latency", {}), MODEL_LATENCY_BUCKETS)
            for kind in TOKEN_TYPES:
                tokens.add_metric([model, kind], figures.get(kind, 0))
            cost.add_metric([model], float(Decimal(figures.get("cost", "0"))))
            unpriced.add_metric([model], figures.get("unpriced", 0))
            estimated.add_metric([model], figures.get("estimated", 0))
        yield from (calls, latency, tokens, cost, unpriced, estimated)

    def _tools(self) -> Iterator[Metric]:
        calls = CounterMetricFamily(
            "harness_tool_calls_total",
            "Tool calls of finished runs by outcome: refused (by the policy, a person or "
            "bad input), error (errors and timeouts), ok (the rest).",
            labels=["tool", "status"],
        )
        errors = CounterMetricFamily(
            "harness_tool_call_errors_total",
            "Tool calls of finished runs that failed or timed out.",
            labels=["tool"],
        )
        for tool, figures in sorted(self.whole.get("tools", {}).items()):
            failed, refused = figures.get("errors", 0), figures.get("refused", 0)
            calls.add_metric([tool, "ok"], figures.get("calls", 0) - failed - refused)
            calls.add_metric([tool, "error"], failed)
            calls.add_metric([tool, "refused"], refused)
            errors.add_metric([tool], failed)
        yield calls
        yield errors
        decided = self.whole.get("decisions", {})
        decisions = CounterMetricFamily(
            "harness_permission_decisions_total",
            "Permission decisions on tool calls of finished runs.",
            labels=["decision"],
        )
        for decision in _with_known(decided, get_args(Decision)):
            decisions.add_metric([decision], decided.get(decision, 0))
        yield decisions

    def _approvals(self) -> Iterator[Metric]:
        asked = self.whole.get("approvals", {})
        requests = CounterMetricFamily(
            "harness_approval_requests_total",
            "Approval requests of finished runs by their final status.",
            labels=["status"],
        )
        found = [key for key, value in asked.items() if isinstance(value, int)]
        for status in _with_known(set(found) - {"requested"}, FINAL_APPROVAL_STATUSES):
            requests.add_metric([status], asked.get(status, 0))
        yield requests
        latency = HistogramMetricFamily(
            "harness_approval_latency_seconds",
            "Time from request to a person's decision (approved or rejected), for finished "
            "runs (ms rounded to 2 significant figures: buckets and sum exact to that "
            "rounding).",
            labels=[],
        )
        _observe(latency, [], asked.get("latency", {}), APPROVAL_LATENCY_BUCKETS)
        yield latency


def metrics_render(*, now: datetime | None = None) -> bytes:
    """The Prometheus text of one scrape."""
    registry = CollectorRegistry()
    registry.register(HarnessCollector(metrics_snapshot(now=now)))
    return generate_latest(registry)
