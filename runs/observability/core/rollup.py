"""Daily rollups as plain values (SPEC O6): what one finished run adds to its day's cell.

A cell is one (day, agent, workspace); its figures are a JSON tree of counts, dollar
amounts (decimal strings, so nothing is lost to floats) and latency histograms. A run
counts on the day it finished, with everything it did: its model calls, tool calls and
approvals. The same two functions build a cell incrementally as runs finish and rebuild it
from the raw rows during reconciliation, so both always agree.

Histograms keep durations in milliseconds rounded to two significant figures (1234 ms →
1200 ms): a percentile read from the merged histograms of thirty days equals the same
percentile of the raw durations rounded the same way, since rounding keeps order. That is
exact to 5 %, and the rows stay bounded (about 90 keys per decade) whatever the volume.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

MONEY_KEYS: Final = frozenset({"cost"})
ERROR_STATUSES: Final = frozenset({"error", "timeout"})
HUMAN_DECIDED: Final = frozenset({"approved", "rejected"})


def sig2(value: float) -> int:
    """``value`` (non-negative) rounded to two significant figures, as an integer."""
    whole = max(0, round(value))
    if whole < 100:
        return whole
    scale = 10 ** (len(str(whole)) - 2)
    return int((Decimal(whole) / scale).quantize(Decimal(1), "ROUND_HALF_UP")) * scale


def millis(start: datetime, end: datetime) -> int:
    return max(0, round((end - start).total_seconds() * 1000))


def percentile(histogram: Mapping[str, int], p: float) -> int | None:
    """Nearest-rank percentile: the smallest value with at least ``p`` % of the counts at
    or below it; None for an empty histogram."""
    total = sum(histogram.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for key in sorted(histogram, key=int):
        seen += histogram[key]
        if seen >= rank:
            return int(key)
    return int(max(histogram, key=int))


def nearest_rank(values: Iterable[int], p: float) -> int | None:
    """The same percentile over raw values (for checks and for small sets)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


@dataclass(frozen=True)
class RunFacts:
    status: str  # completed | failed | rolled_back
    failure_kind: str
    created_at: datetime
    finished_at: datetime
    verification: str  # "pass", "fail", "skipped" or ""


@dataclass(frozen=True)
class CallFacts:
    model: str
    input: int
    output: int
    cache_write: int
    cache_read: int
    cost: Decimal | None  # None: no price for the model
    basis: str
    latency_ms: int


@dataclass(frozen=True)
class ToolFacts:
    tool: str
    decision: str
    status: str


@dataclass(frozen=True)
class ApprovalFacts:
    status: str
    created_at: datetime
    decided_at: datetime | None


def contribution(
    run: RunFacts,
    calls: Iterable[CallFacts] = (),
    tools: Iterable[ToolFacts] = (),
    approvals: Iterable[ApprovalFacts] = (),
) -> dict[str, Any]:
    """What one finished run adds to its day's cell."""
    out: dict[str, Any] = {
        "runs": {run.status: 1},
        "duration": {str(sig2(millis(run.created_at, run.finished_at))): 1},
    }
    if run.status == "failed":
        out["failures"] = {run.failure_kind or "other": 1}
    if run.verification == "pass":
        out["verified"] = 1
        if run.status == "rolled_back":
            out["escaped"] = 1
    total, models = Decimal(0), dict[str, dict[str, Any]]()
    for call in calls:
        entry = models.setdefault(call.model, {"latency": {}})
        for key in ("input", "output", "cache_write", "cache_read"):
            entry[key] = entry.get(key, 0) + getattr(call, key)
        entry["calls"] = entry.get("calls", 0) + 1
        bucket = str(sig2(call.latency_ms))
        entry["latency"][bucket] = entry["latency"].get(bucket, 0) + 1
        if call.cost is None:
            entry["unpriced"] = entry.get("unpriced", 0) + 1
        else:
            entry["cost"] = str(Decimal(entry.get("cost", "0")) + call.cost)
            total += call.cost
        if call.basis == "estimated":
            entry["estimated"] = entry.get("estimated", 0) + 1
    if models:
        out["models"] = models
        out["cost"] = str(total)
    tool_counts: dict[str, dict[str, int]] = {}
    decisions: dict[str, int] = {}
    for tool in tools:
        entry = tool_counts.setdefault(tool.tool, {})
        entry["calls"] = entry.get("calls", 0) + 1
        if tool.status in ERROR_STATUSES:
            entry["errors"] = entry.get("errors", 0) + 1
        elif tool.status == "refused":
            entry["refused"] = entry.get("refused", 0) + 1
        if tool.decision:
            decisions[tool.decision] = decisions.get(tool.decision, 0) + 1
    if tool_counts:
        out["tools"] = tool_counts
    if decisions:
        out["decisions"] = decisions
    asked: dict[str, Any] = {}
    for approval in approvals:
        asked["requested"] = asked.get("requested", 0) + 1
        asked[approval.status] = asked.get(approval.status, 0) + 1
        if approval.status in HUMAN_DECIDED and approval.decided_at is not None:
            bucket = str(sig2(millis(approval.created_at, approval.decided_at)))
            latency = asked.setdefault("latency", {})
            latency[bucket] = latency.get(bucket, 0) + 1
    if asked:
        out["approvals"] = asked
    return out


def accumulate(target: dict[str, Any], other: Mapping[str, Any], sign: int = 1) -> dict[str, Any]:
    """Add ``other`` (times ``sign``) into ``target`` in place; entries that reach zero go.
    ``target`` never shares a nested dict with ``other``. The dashboards add up hundreds of
    cells per page, so this walks plain dicts without copying them."""
    for key, value in other.items():
        kind = type(value)
        if kind is int:  # most entries: counts and histogram buckets
            count = target.get(key, 0) + sign * value
            if count:
                target[key] = count
            else:
                target.pop(key, None)
        elif kind is dict:
            mine = target.get(key)
            if mine is None:
                mine = target[key] = {}
            accumulate(mine, value, sign)
            if not mine:
                del target[key]
        elif key in MONEY_KEYS:
            amount = Decimal(target.get(key, "0")) + sign * Decimal(value)
            if amount:
                target[key] = str(amount)
            else:
                target.pop(key, None)
        else:
            raise TypeError(f"A rollup holds counts, amounts and trees; {key!r} is {kind}.")
    return target


def merge(cell: Mapping[str, Any], other: Mapping[str, Any], sign: int = 1) -> dict[str, Any]:
    """``cell`` plus (or, with ``sign=-1``, minus) ``other``, as a new tree."""
    return accumulate(accumulate({}, cell), other, sign)


def total(cells: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cell in cells:
        accumulate(out, cell)
    return out


def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal figures (money compared as amounts: "1.50" equals "1.5")."""
    return not merge(a, b, -1)
