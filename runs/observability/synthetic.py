"""A realistic synthetic history of finished runs, for tests and benchmarks (SPEC O6).

``synthetic_runs_generate`` writes runs with their model calls, tool calls and approvals, spread
over the last D days, with the outcomes, failure reasons, tools, token use and approval
waits a console sees in practice, and adds them to the daily rollups (with the same
``contribution`` function a finishing run uses). The same seed gives the same history,
with new ids, so a second history adds to the first.

A million runs is about seven million rows, so rows are plain dicts written with one
``executemany`` per table (``COPY`` on PostgreSQL) rather than model instances through
``bulk_create``, whose per-object cost would take half an hour.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.utils import timezone

from approvals.models import ApprovalRequest
from policies.models import Agent, Workspace

from ..core.failures import failure_kind
from ..models import ModelCall, RollupDelta, Run, ToolCall
from .core import cost as core_cost
from .core import rollup
from .pricing import prices
from .rollups import day_of, rollups_fold

# (failure reason as the flow writes it, weight): the kinds of runs.core.failures.
FAILURES: tuple[tuple[str, int], ...] = (
    ("model call failed: 529 overloaded after 3 attempts", 14),
    ("max_turns (20) reached", 12),
    ("verification failed: docs/guide.md: line 12: broken link", 18),
    ("rejected by approver: the change is out of scope", 10),
    ("approval expired: nobody decided within 1440 minutes", 6),
    ("cancelled by operator", 8),
    ("tool call toolu_01 failed for good", 7),
    ("committing docs/guide.md failed: the file changed since it was read", 4),
    ("committing docs/index.md is refused by policy: publishing needs a human", 3),
    ("the model's answer was cut at max_tokens", 5),
    ("intake refused the request: it names no file", 6),
    ("internal error in the harness: OperationalError: database is locked", 2),
    ("halted by the secret-scan hook: a key in the draft", 2),
    ("abandoned after 5 claims: its workers keep stopping", 1),
)
TOOLS: tuple[tuple[str, int, float], ...] = (
    # tool, weight, error rate
    ("searchDocs", 30, 0.01),
    ("readSource", 25, 0.03),
    ("createDraft", 12, 0.02),
    ("patchDraft", 12, 0.08),
    ("runValidation", 10, 0.05),
    ("commitDraft", 6, 0.04),
    ("grep", 5, 0.15),
)
OUTCOMES = (("completed", 72), ("failed", 23), ("rolled_back", 5))
BATCH = 5000
ADAPTED = frozenset({"UUIDField", "DateTimeField", "DecimalField", "JSONField"})


@dataclass(frozen=True)
class SyntheticRuns:
    runs: int
    model_calls: int
    tool_calls: int
    approvals: int
    first_day: Any
    last_day: Any


class _Table:
    """Rows of one model as dicts of attribute names, completed with the fields' defaults
    and written the way each database takes many rows fastest."""

    def __init__(self, model: type[models.Model]) -> None:
        self.fields: list[Any] = [
            f
            for f in model._meta.concrete_fields
            if not (f.primary_key and isinstance(f, models.AutoField | models.BigAutoField))
        ]
        self.defaults = {f.attname: f.get_default() for f in self.fields}
        self.table = model._meta.db_table
        self.columns = [f.column for f in self.fields]
        db = connections[DEFAULT_DB_ALIAS]
        # Only these types differ between Python and the database; the rest pass as they are.
        self.preps = [
            partial(f.get_db_prep_save, connection=db)
            if (f.target_field if f.is_relation else f).get_internal_type() in ADAPTED
            else None
            for f in self.fields
        ]

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        plan = list(zip((f.attname for f in self.fields), self.preps, strict=True))
        defaults = self.defaults
        prepared = [
            tuple(
                value if prep is None else prep(value)
                for name, prep in plan
                for value in (row.get(name, defaults[name]),)
            )
            for row in rows
        ]
        quote = connection.ops.quote_name
        names = ", ".join(quote(c) for c in self.columns)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                raw = cursor.cursor  # psycopg's own cursor, for COPY
                with raw.copy(f"COPY {quote(self.table)} ({names}) FROM STDIN") as copy:
                    for row in prepared:
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(self.columns))
                cursor.executemany(
                    f"INSERT INTO {quote(self.table)} ({names}) VALUES ({marks})",  # noqa: S608
                    prepared,
                )


def _pick(rng: random.Random, weighted: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    return rng.choices(weighted, weights=[w[1] for w in weighted])[0]


def _lognormal_ms(rng: random.Random, median_ms: float, sigma: float) -> int:
    return max(1, int(rng.lognormvariate(0, sigma) * median_ms))


def synthetic_runs_generate(
    *,
    runs: int,
    days: int,
    seed: int = 1,
    requester: Any,
    approvers: Sequence[Any] = (),
    progress: Callable[[int], None] | None = None,
) -> SyntheticRuns:
    """Write ``runs`` finished runs over the last ``days`` days and count them in the
    rollups of their days."""
    agents = [dict(row) for row in Agent.objects.order_by("pk").values("pk", "model")]
    workspaces = list(Workspace.objects.order_by("pk").values_list("pk", flat=True))
    if not agents or not workspaces:
        raise ValueError("A history needs at least one agent and one workspace.")
    rng = random.Random(seed)  # noqa: S311 - synthetic data, reproducible by seed
    place = _Place(
        now=timezone.now(),
        horizon=timedelta(days=days),
        agents=agents,
        workspaces=workspaces,
        prices=prices(),
        requester_id=requester.pk,
        approver_ids=[a.pk for a in approvers],
    )
    tables = [_Table(m) for m in (Run, ModelCall, ToolCall, ApprovalRequest)]
    counts = [0, 0, 0, 0]
    days_seen: set[Any] = set()
    done = 0
    while done < runs:
        size = min(BATCH, runs - done)
        batch: list[list[dict[str, Any]]] = [[], [], [], []]
        cells: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
        for _ in range(size):
            rows = _one_run(rng, place)
            for n, part in enumerate(rows):
                batch[n].extend(part)
            run = rows[0][0]
            key = (day_of(run["finished_at"]), run["agent_id"], run["workspace_id"])
            rollup.accumulate(cells.setdefault(key, {}), _contribution(*rows))
        # The batch's runs and what they add to their days, in one transaction, as runs
        # that end add it: a reconciliation meanwhile counts each of them once.
        with transaction.atomic():
            for n, table in enumerate(tables):
                table.write(batch[n])
                counts[n] += len(batch[n])
            RollupDelta.objects.bulk_create(
                RollupDelta(day=day, agent_id=agent_id, workspace_id=workspace_id, data=data)
                for (day, agent_id, workspace_id), data in cells.items()
            )
        days_seen.update(key[0] for key in cells)
        done += size
        if progress:
            progress(done)
    rollups_fold()
    days_written = sorted(days_seen)
    return SyntheticRuns(
        runs,
        counts[1],
        counts[2],
        counts[3],
        days_written[0] if days_written else None,
        days_written[-1] if days_written else None,
    )


def _contribution(
    runs: list[dict], calls: list[dict], tools: list[dict], asked: list[dict]
) -> dict[str, Any]:
    run = runs[0]
    return rollup.contribution(
        rollup.RunFacts(
            run["status"],
            run["failure_kind"],
            run["created_at"],
            run["finished_at"],
            (run.get("verification") or {}).get("result", ""),
        ),
        [
            rollup.CallFacts(
                c["model"],
                c["input_tokens"],
                c["output_tokens"],
                c["cache_creation_input_tokens"],
                c["cache_read_input_tokens"],
                c["cost_usd"],
                c["cost_basis"],
                c["latency_ms"],
            )
            for c in calls
        ],
        [rollup.ToolFacts(t["tool"], t["decision"], t["status"]) for t in tools],
        [rollup.ApprovalFacts(a["status"], a["requested_at"], a["decided_at"]) for a in asked],
    )


@dataclass(frozen=True)
class _Place:
    now: datetime
    horizon: timedelta
    agents: list[dict[str, Any]]
    workspaces: list[Any]
    prices: list[core_cost.Price]
    requester_id: Any
    approver_ids: list[Any]


def _one_run(rng: random.Random, place: _Place) -> list[list[dict[str, Any]]]:
    agent, workspace_id = rng.choice(place.agents), rng.choice(place.workspaces)
    outcome = _pick(rng, OUTCOMES)[0]
    reason = _pick(rng, FAILURES)[0] if outcome == "failed" else ""
    kind = failure_kind(reason) if reason else ""
    wants_approval = kind in ("rejected", "approval_expired") or (
        outcome != "failed" and rng.random() < 0.3
    )
    wait = timedelta(milliseconds=_lognormal_ms(rng, 240_000, 1.1) if wants_approval else 0)
    duration = timedelta(milliseconds=_lognormal_ms(rng, 45_000, 0.9)) + wait
    room = max(place.horizon - duration - timedelta(minutes=1), timedelta(0))
    created = place.now - place.horizon + rng.random() * room
    run_id = uuid.uuid4()
    run: dict[str, Any] = {
        "id": run_id,
        "agent_id": agent["pk"],
        "workspace_id": workspace_id,
        "requester_id": place.requester_id,
        "request": "Fix the broken links in the guide.",
        "status": outcome,
        "failure_reason": reason,
        "failure_kind": kind,
        "stage": "done",
        "model_label": "anthropic",
        "model_name": agent["model"],
        "risk": rng.choice(("low", "low", "medium", "high")),
        "created_at": created,
        "started_at": created + timedelta(milliseconds=rng.randint(20, 400)),
        "verification": {},
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cost_usd": core_cost.QUANTUM * 0,
    }
    if outcome == "rolled_back" or (outcome == "completed" and rng.random() < 0.8):
        run["verification"] = {"result": "pass", "round": 1, "checked": ["docs/guide.md"]}
    elif kind == "verification":
        run["verification"] = {"result": "fail", "round": 2}
    calls, tools, clock, basis = _turns(rng, place, run, agent, workspace_id)
    run["cost_basis"] = basis
    asked = [_approval_row(rng, place, run, kind, clock, wait)] if wants_approval else []
    run["finished_at"] = max(created + duration, clock + wait + timedelta(milliseconds=10))
    run["updated_at"] = run["finished_at"]
    return [[run], calls, tools, asked]


def _turns(
    rng: random.Random, place: _Place, run: dict[str, Any], agent: dict[str, Any], workspace_id: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], datetime, str]:
    """The run's model calls and tool calls, turn by turn, its usage and cost summed on
    ``run``; returns them with the clock after the last turn and the run's cost basis."""
    run_id = run["id"]
    clock = run["started_at"]
    calls: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    turns = rng.randint(1, 4)
    basis = core_cost.REPORTED
    for turn in range(1, turns + 1):
        model = agent["model"] if rng.random() < 0.9 else "claude-haiku-4-5"
        tokens = core_cost.Tokens(
            input=rng.randint(200, 4000),
            output=rng.randint(50, 1500),
            cache_write=rng.randint(1000, 6000) if turn == 1 else 0,
            cache_read=rng.randint(1000, 6000) if turn > 1 else 0,
        )
        latency = _lognormal_ms(rng, 1800, 0.5)
        clock += timedelta(milliseconds=latency)
        price = core_cost.price_in_force(place.prices, model, clock)
        call_cost = None if price is None else core_cost.cost_of(tokens, price)
        if price is None:
            basis = core_cost.ESTIMATED
        calls.append(
            {
                "run_id": run_id,
                "turn": turn,
                "label": "anthropic",
                "model": model,
                "stop_reason": "tool_use" if turn < turns else "end_turn",
                "input_tokens": tokens.input,
                "output_tokens": tokens.output,
                "cache_creation_input_tokens": tokens.cache_write,
                "cache_read_input_tokens": tokens.cache_read,
                "latency_ms": latency,
                "cost_usd": call_cost,
                "cost_basis": core_cost.UNPRICED if price is None else core_cost.REPORTED,
                "price_id": None if price is None else price.id,
                "created_at": clock,
            }
        )
        run["input_tokens"] += tokens.input
        run["output_tokens"] += tokens.output
        run["cache_creation_input_tokens"] += tokens.cache_write
        run["cache_read_input_tokens"] += tokens.cache_read
        run["cost_usd"] += call_cost or 0
        for _ in range(rng.randint(0, 2) if turn < turns else 0):
            tools.append(_tool_row(rng, place, run_id, workspace_id, turn, len(tools), clock))
    return calls, tools, clock, basis


def _tool_row(
    rng: random.Random,
    place: _Place,
    run_id: Any,
    workspace_id: int,
    turn: int,
    index: int,
    clock: datetime,
) -> dict[str, Any]:
    """One tool call of a turn: mostly allowed and ok, some refused, errors at the tool's
    own rate."""
    tool, _weight, error_rate = _pick(rng, TOOLS)
    roll = rng.random()
    decision, status = "allow", "ok"
    if roll < 0.03:
        decision, status = "deny", "refused"
    elif roll < 0.03 + error_rate:
        status = "error" if rng.random() < 0.85 else "timeout"
    elif tool == "commitDraft" and rng.random() < 0.5:
        decision = "ask"
    return {
        "id": uuid.uuid4(),
        "run_id": run_id,
        "workspace_id": workspace_id,
        "requested_by_id": place.requester_id,
        "tool_use_id": f"toolu_{turn}_{index}",
        "tool": tool,
        "arguments": {"path": "docs/guide.md"},
        "path": "docs/guide.md",
        "decision": decision,
        "status": status,
        "error": "exit status 1" if status == "error" else "",
        "started_at": clock,
        "finished_at": clock + timedelta(milliseconds=rng.randint(5, 900)),
    }


def _approval_row(
    rng: random.Random,
    place: _Place,
    run: dict[str, Any],
    kind: str,
    clock: datetime,
    wait: timedelta,
) -> dict[str, Any]:
    """The run's commit request, decided after ``wait`` (or expired, or rejected)."""
    status = {"rejected": "rejected", "approval_expired": "expired"}.get(kind, "approved")
    return {
        "id": uuid.uuid4(),
        "run_id": run["id"],
        "kind": "commit",
        "status": status,
        "tool_use_id": "commit",
        "paths": ["docs/guide.md"],
        "summary": "Commit docs/guide.md",
        "risk": run["risk"],
        "requested_at": clock,
        "decided_at": clock + wait,
        "decided_by_id": (
            rng.choice(place.approver_ids) if place.approver_ids and status != "expired" else None
        ),
        "expires_at": clock + timedelta(days=1),
    }
