"""The retrospective dashboard's figures (SPEC O6) from rollup cells, pure: the database
reads the cells, this adds them up, so the same cells always give the same figures and the
property tests can hold them against aggregates of the raw rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from ...core import status as run_status
from ...core.failures import LABELS as FAILURE_LABELS
from . import rollup

OUTCOMES = (run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK)
# As the dashboards show them: a cancelled run (stored failed, kind cancelled) apart from
# the failures, so the success rate and the failure Pareto count only runs that were let
# finish.
SHOWN_OUTCOMES = (
    run_status.COMPLETED,
    run_status.FAILED,
    run_status.SHOWN_CANCELLED,
    run_status.ROLLED_BACK,
)


@dataclass
class Retro:
    days: list[date]
    runs: dict[str, list[int]]  # shown outcome (failed: not cancelled) → per day
    success_rate: list[float | None]  # completed / finished and not cancelled, per day
    failures: list[tuple[str, str, int]]  # (kind, label, count), most first (Pareto)
    cost: dict[tuple[str, str], list[Decimal]]  # (agent slug, model) → dollars per day
    tokens: dict[tuple[str, str], list[int]]  # (agent slug, model) → tokens per day
    tools: list[dict[str, Any]]  # tool, calls, errors, refused, error_rate; worst first
    approval_p50: list[int | None]  # ms per day
    approval_p95: list[int | None]
    duration_p50: list[int | None]
    duration_p95: list[int | None]
    verified: list[int]
    escaped: list[int]
    totals: dict[str, Any] = field(default_factory=dict)
    changes: list[dict[str, Any]] = field(default_factory=list)
    agents: dict[int, str] = field(default_factory=dict)

    @property
    def escape_rate(self) -> list[float | None]:
        return [e / v if v else None for v, e in zip(self.verified, self.escaped, strict=True)]


TOKEN_KINDS = ("input", "output", "cache_write", "cache_read")
APPROVAL_LATENCY = ("approvals", "latency")
DURATION = ("duration",)


def retro_compute(
    *,
    span: Sequence[date],
    daily: Sequence[Mapping[str, Any]],
    per_agent: Iterable[tuple[date, int, Mapping[str, Any] | None]],
    slugs: Mapping[int, str],
    changes: Iterable[dict[str, Any]] = (),
) -> Retro:
    """The retrospective over ``span``: ``daily`` holds each day's summed cells, ``per_agent``
    the ``models`` part of each (day, agent) cell, for cost and tokens by agent and model."""
    whole = rollup.total(daily)
    cost, tokens = _by_agent_and_model(span, per_agent, slugs)
    runs = _shown_outcomes(daily)
    finished = [sum(runs[o][i] for o in SHOWN_OUTCOMES) for i in range(len(span))]
    let_finish = [n - runs[run_status.SHOWN_CANCELLED][i] for i, n in enumerate(finished)]
    return Retro(
        days=list(span),
        runs=runs,
        success_rate=[runs["completed"][i] / n if n else None for i, n in enumerate(let_finish)],
        failures=_failures(whole),
        cost=dict(sorted(cost.items())),
        tokens=dict(sorted(tokens.items())),
        tools=_tools(whole),
        approval_p50=[_percentile(d, APPROVAL_LATENCY, 50) for d in daily],
        approval_p95=[_percentile(d, APPROVAL_LATENCY, 95) for d in daily],
        duration_p50=[_percentile(d, DURATION, 50) for d in daily],
        duration_p95=[_percentile(d, DURATION, 95) for d in daily],
        verified=[d.get("verified", 0) for d in daily],
        escaped=[d.get("escaped", 0) for d in daily],
        totals=_totals(whole, runs, finished),
        changes=list(changes),
        agents=dict(slugs),
    )


def _shown_outcomes(daily: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Runs per day by shown outcome: the cells count a cancelled run among the failed,
    and among the failures by kind as ``cancelled``; here it is taken out of the one and
    counted on its own."""
    runs = {o: [d.get("runs", {}).get(o, 0) for d in daily] for o in OUTCOMES}
    cancelled = [d.get("failures", {}).get(run_status.CANCELLED_KIND, 0) for d in daily]
    runs[run_status.FAILED] = [n - c for n, c in zip(runs["failed"], cancelled, strict=True)]
    runs[run_status.SHOWN_CANCELLED] = cancelled
    return {o: runs[o] for o in SHOWN_OUTCOMES}


def _by_agent_and_model(
    span: Sequence[date],
    per_agent: Iterable[tuple[date, int, Mapping[str, Any] | None]],
    slugs: Mapping[int, str],
) -> tuple[dict[tuple[str, str], list[Decimal]], dict[tuple[str, str], list[int]]]:
    """Dollars and tokens per day for each (agent slug, model)."""
    index = {day: n for n, day in enumerate(span)}
    cost: dict[tuple[str, str], list[Decimal]] = {}
    tokens: dict[tuple[str, str], list[int]] = {}
    for day, agent, models in per_agent:
        n = index[day]
        for model, figures in (models or {}).items():
            key = (slugs.get(agent, str(agent)), model)
            cost.setdefault(key, [Decimal(0)] * len(span))[n] += Decimal(figures.get("cost", "0"))
            tokens.setdefault(key, [0] * len(span))[n] += sum(
                figures.get(k, 0) for k in TOKEN_KINDS
            )
    return cost, tokens


def _failures(whole: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """Failure kinds, most first (a Pareto chart); a cancel is nobody's failure."""
    return sorted(
        (
            (kind, FAILURE_LABELS.get(kind, kind), n)
            for kind, n in whole.get("failures", {}).items()
            if kind != run_status.CANCELLED_KIND
        ),
        key=lambda f: (-f[2], f[0]),
    )


def _tools(whole: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each tool's calls, errors and refusals; the error rate counts calls that ran, worst
    first."""
    tools = []
    for name, figures in whole.get("tools", {}).items():
        ran = figures.get("calls", 0) - figures.get("refused", 0)
        errors = figures.get("errors", 0)
        tools.append(
            {
                "tool": name,
                "calls": figures.get("calls", 0),
                "errors": errors,
                "refused": figures.get("refused", 0),
                "error_rate": errors / ran if ran else None,
            }
        )
    tools.sort(key=lambda t: (-(t["error_rate"] or 0), t["tool"]))
    return tools


def _percentile(data: Mapping[str, Any], path: tuple[str, ...], p: float) -> int | None:
    for key in path:
        data = data.get(key, {})
    return rollup.percentile(data, p)


def _totals(
    whole: Mapping[str, Any], runs: dict[str, list[int]], finished: list[int]
) -> dict[str, Any]:
    """The window's headline figures."""
    models_total = whole.get("models", {})
    cancelled = sum(runs["cancelled"])
    return {
        "finished": sum(finished),
        "completed": sum(runs["completed"]),
        "failed": sum(runs["failed"]),
        "cancelled": sum(runs["cancelled"]),
        "rolled_back": sum(runs["rolled_back"]),
        "success_rate": (
            sum(runs["completed"]) / let_finish
            if (let_finish := sum(finished) - cancelled)
            else None
        ),
        "cost": Decimal(whole.get("cost", "0")),
        "tokens": sum(m.get(k, 0) for m in models_total.values() for k in TOKEN_KINDS),
        "model_calls": sum(m.get("calls", 0) for m in models_total.values()),
        "estimated_calls": sum(m.get("estimated", 0) for m in models_total.values()),
        "unpriced_calls": sum(m.get("unpriced", 0) for m in models_total.values()),
        "approvals": whole.get("approvals", {}).get("requested", 0),
        "approval_p50": _percentile(whole, APPROVAL_LATENCY, 50),
        "approval_p95": _percentile(whole, APPROVAL_LATENCY, 95),
        "duration_p50": _percentile(whole, DURATION, 50),
        "duration_p95": _percentile(whole, DURATION, 95),
        "verified": whole.get("verified", 0),
        "escaped": whole.get("escaped", 0),
    }
