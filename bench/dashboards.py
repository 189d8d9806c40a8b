"""Dashboards at scale: server time of the operations and retrospective pages over a large
generated history, against computing the same figures from the raw rows.

Usage: ``python bench/dashboards.py [--runs 100000,1000000] [--samples 30]`` embedded
(SQLite), or with ``DATABASE_URL=postgres://... REDIS_URL=redis://...`` on PostgreSQL. On
throwaway data of its own (bench/_place.py): a temporary HARNESS_VAR_DIR and, on PostgreSQL,
a database named ``bench_dashboards``, created and dropped.

For each size (cumulative: the history grows to the next size), ``generate_history``'s
function writes the runs (10 agents, 3 workspaces, 30 days: 900 rollup cells), plus live
work (runs planning, running, waiting for approval, some stuck); on PostgreSQL the tables
are analyzed, as autovacuum would soon do. Then each page is requested through Django's
test client in this process (middleware, queries, template, Plotly figures; no network;
the retrospective with ``inline=1``, its page and the charts its browser fetches, in one):
5 warm-ups, then ``--samples`` timed requests, with the queries of one request. The
baseline is what the 30-day figures cost without rollups: rebuilding the window's cells
from the raw rows (``runs.observability.rollups.cells_from_raw``, the reconciliation's
reader), once.
Goal (issue 7): the 30-day retrospective at 1,000,000 runs on PostgreSQL within 300 ms.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _place import prepare

PLACE = prepare("dashboards")

import django

django.setup()

from _tools import own_databases, pct, time_page
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalRequest
from harness_console.roles import APPROVER, OPERATOR, OPS, roles_sync
from policies.models import Agent, Workspace
from runs.models import ModelCall, Run, RunEvent, ToolCall
from runs.observability.dashboards.figures import window
from runs.observability.rollups import cells_from_raw
from runs.observability.synthetic import synthetic_runs_generate
from tests.conftest import prices_seed

GOAL_RETRO_30 = 0.300
PAGES = (
    ("ops", "/dashboards/ops/"),
    ("retro 7 days", "/dashboards/retro/?days=7&inline=1"),
    ("retro 30 days", "/dashboards/retro/?days=30&inline=1"),
    ("retro 30 days, one agent", "/dashboards/retro/?days=30&agent=agent-3&inline=1"),
)


def user(name: str, role: str) -> User:
    person = User.objects.create_user(name)
    person.groups.add(Group.objects.get(name=role))
    return person


def fixtures() -> dict:
    roles_sync()
    prices_seed()
    root = PLACE.var_dir / "workspace"
    root.mkdir()
    models = ("claude-sonnet-4-6", "claude-opus-4-6", "claude-haiku-4-5")
    agents = [
        Agent.objects.create(
            slug=f"agent-{n}", name=f"Agent {n}", identity="Bench agent.", model=models[n % 3]
        )
        for n in range(10)
    ]
    spaces = [
        Workspace.objects.create(slug=f"space-{n}", name=f"Space {n}", root=str(root))
        for n in range(3)
    ]
    return {
        "ops": user("bench-ops", OPS),
        "operator": user("bench-operator", OPERATOR),
        "approvers": [user(f"bench-approver-{n}", APPROVER) for n in range(3)],
        "agents": agents,
        "spaces": spaces,
    }


def live_work(fx: dict) -> None:
    """What an operations dashboard watches: runs in every working state, pending
    approvals, and a few runs stuck with old events."""
    now = timezone.now()
    for n, status in enumerate(["planning"] * 10 + ["running"] * 25 + ["verifying"] * 5):
        run = Run.objects.create(
            agent=fx["agents"][n % 10],
            workspace=fx["spaces"][n % 3],
            requester=fx["operator"],
            request="Fix the broken links in the guide.",
            status=status,
        )
        age = timedelta(hours=2) if n % 8 == 0 else timedelta(seconds=20)
        event = RunEvent.objects.create(run=run, seq=1, type="status.changed", payload={})
        with connection.cursor() as cursor:  # events are append-only; age this one by hand
            cursor.execute(
                f"UPDATE {RunEvent._meta.db_table} SET created_at = %s WHERE id = %s",  # noqa: S608
                [connection.ops.adapt_datetimefield_value(now - age), event.pk],
            )
    for n in range(20):
        run = Run.objects.create(
            agent=fx["agents"][n % 10],
            workspace=fx["spaces"][n % 3],
            requester=fx["operator"],
            request="Fix the broken links in the guide.",
            status="waiting_for_approval",
        )
        ApprovalRequest.objects.create(
            run=run, kind="commit", tool_use_id="commit", summary="Commit docs/guide.md"
        )


def analyze() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for model in (Run, ModelCall, ToolCall, ApprovalRequest, RunEvent):
                cursor.execute(f"ANALYZE {model._meta.db_table}")


def ms(values: list[float]) -> str:
    return (
        f"p50 {pct(values, 50) * 1000:7.1f} ms   p95 {pct(values, 95) * 1000:7.1f} ms   "
        f"max {max(values) * 1000:7.1f} ms"
    )


def baseline_30_days() -> float:
    """The 30-day figures without rollups: every cell of the window from the raw rows."""
    from approvals.models import ApprovalRequest as Approval

    started = time.perf_counter()
    for day in window(30):
        cells_from_raw(
            day,
            run_model=Run,
            call_model=ModelCall,
            tool_model=ToolCall,
            approval_model=Approval,
        )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="100000,1000000", help="Sizes, comma-separated.")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--no-baseline", action="store_true", help="Skip the raw baseline.")
    args = parser.parse_args()
    sizes = sorted(int(s.replace("_", "")) for s in args.runs.split(","))
    database = "PostgreSQL" if connection.vendor == "postgresql" else "SQLite (embedded)"
    print(f"# bench/dashboards.py — {database}, Python {platform.python_version()}")
    print(f"# {args.days} days of history, {args.samples} samples per page\n")
    with own_databases(PLACE, logs="its files are"):
        settings.ALLOWED_HOSTS.append("testserver")
        fx = fixtures()
        live_work(fx)
        client = Client()
        client.force_login(fx["ops"])
        written = 0
        retro_30 = {}
        for size in sizes:
            started = time.perf_counter()
            synthetic_runs_generate(
                runs=size - written,
                days=args.days,
                seed=size,
                requester=fx["operator"],
                approvers=fx["approvers"],
            )
            took = time.perf_counter() - started
            print(
                f"## {size:,} runs (generated {size - written:,} in {took:.0f} s, "
                f"{(size - written) / took:,.0f} runs/s)"
            )
            written = size
            analyze()
            for name, url in PAGES:
                times, queries = time_page(client, url, args.samples)
                print(f"  {name:26s} {ms(times)}   {queries} queries")
                if name == "retro 30 days":
                    retro_30[size] = pct(times, 95)
            if not args.no_baseline:
                raw = baseline_30_days()
                ratio = raw / retro_30[size]
                print(
                    f"  {'baseline: 30 days from raw':26s} {raw * 1000:9.0f} ms once  "
                    f"({ratio:,.0f}x the rollup page's p95)"
                )
            print()
        if connection.vendor == "postgresql" and 1_000_000 in retro_30:
            met = "met" if retro_30[1_000_000] <= GOAL_RETRO_30 else "NOT met"
            print(
                f"Goal: 30-day retrospective p95 at 1,000,000 runs on PostgreSQL "
                f"{retro_30[1_000_000] * 1000:.1f} ms <= 300 ms: {met}."
            )


if __name__ == "__main__":
    main()
