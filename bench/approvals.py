"""Approvals: from an approve click to the run's next event, and the queue page under load.

Usage: ``python bench/approvals.py`` (embedded: SQLite, filesystem broker), or
``DATABASE_URL=postgres://... REDIS_URL=redis://... python bench/approvals.py`` (PostgreSQL,
Redis). Either way on throwaway data of its own: a temporary HARNESS_VAR_DIR (database,
broker folder, workspace, replay scripts), on PostgreSQL a database named ``bench_approvals``
(whatever DATABASE_URL names; created, then dropped), Redis keys and a Celery queue named
``bench-approvals`` (daphne and the worker send their tasks there too).

1. Approve click -> the run's next event: runs patch a draft in a real Celery worker and wait
   for the commit approval; each is approved in turn by an HTTP POST to
   /api/approvals/<id>/decide/ on a real daphne (token auth), timed until the first event the
   worker writes (the decision's own transaction writes approval.decided and the status
   change; the event after those). One warm-up run first, not counted.
2. Pages with 10,000 pending requests (and 2,000 decided, for the history) over 200 runs:
   server time in this process through Django's test client (middleware, queries, template;
   no network), 50 requests after 5 warm-ups each, the queries of one request, and the
   full (generation 2) garbage collections that fell inside the 50. On PostgreSQL the
   tables are analyzed after the bulk insert, as autovacuum would soon do.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import json
import platform
import pstats
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _place import prepare

PLACE = prepare("approvals")
VAR_DIR = PLACE.var_dir

import django

django.setup()

from _tools import (
    BROKEN,
    BenchStack,
    fix_script,
    own_databases,
    pct,
    wait_status,
)
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token

from approvals.models import ApprovalDecision, ApprovalRequest
from harness_console.roles import APPROVER, OPERATOR, roles_sync
from policies.models import Agent, Workspace
from runs.core import status as run_status
from runs.models import Run, RunEvent
from runs.services import run_create

GOAL_CLICK_P95 = 0.500
GOAL_QUEUE = 0.100


def ms(values: list[float]) -> str:
    return (
        f"p50 {pct(values, 50) * 1000:7.1f} ms   p95 {pct(values, 95) * 1000:7.1f} ms   "
        f"max {max(values) * 1000:7.1f} ms"
    )


def user(name: str, role: str) -> User:
    person = User.objects.create_user(name)
    person.groups.add(Group.objects.get(name=role))
    return person


def fixtures(count: int) -> dict[str, Any]:
    roles_sync()
    root = VAR_DIR / "workspace"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "getting-started.md").write_text("# Getting started\n")  # the link target
    for i in range(count):
        (root / "docs" / f"page-{i:02d}.md").write_text(BROKEN.format(i=i))
    approver = user("bench-approver", APPROVER)
    return {
        "requester": user("bench-operator", OPERATOR),
        "approver": approver,
        "token": Token.objects.create(user=approver).key,
        "workspace": Workspace.objects.create(
            slug="bench", name="Bench", root=str(root), drafts_root=str(VAR_DIR / "drafts")
        ),
        "agent": Agent.objects.create(slug="bench", name="Bench", identity="Bench agent."),
    }


# --- 1. approve click -> the run's next event -------------------------------------------------
class WebStack(BenchStack):
    web = True  # the click is an HTTP request to daphne


def approve(stack: BenchStack, fx: dict[str, Any], run: Run) -> dict[str, Any]:
    approval = ApprovalRequest.objects.get(
        run=run, kind=ApprovalRequest.Kind.COMMIT, status=ApprovalRequest.Status.PENDING
    )
    request = urllib.request.Request(  # noqa: S310 - our own daphne, on http
        f"{stack.url}/api/approvals/{approval.pk}/decide/",
        data=json.dumps({"decision": "approve"}).encode(),
        headers={"Authorization": f"Token {fx['token']}", "Content-Type": "application/json"},
        method="POST",
    )
    called, started = time.time(), time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our daphne
        response.read()
    answered = time.perf_counter() - started
    decided = RunEvent.objects.get(run=run, type="approval.decided")
    resumed = RunEvent.objects.get(run=run, seq=decided.seq + 1)  # in the same transaction
    if resumed.type != "status.changed" or resumed.payload.get("approval") != "approved":
        raise RuntimeError(f"Unexpected event after the decision: {resumed.type}")
    while True:
        event = RunEvent.objects.filter(run=run, seq__gt=resumed.seq).order_by("seq").first()
        if event is not None:
            seen = time.perf_counter() - started
            break
        if time.perf_counter() - started > 30:
            stack._check_alive()  # a dead worker says why (the log's tail)
            raise TimeoutError(f"Run {run.pk} did not resume.")
        time.sleep(0.002)
    wait_status(run.pk, {run_status.COMPLETED}, timeout=60)
    return {
        "stored": event.created_at.timestamp() - called,
        "seen": seen,
        "http": answered,
        "pickup": (event.created_at - decided.created_at).total_seconds(),
        "type": event.type,
    }


def bench_click(stack: BenchStack, fx: dict[str, Any], count: int) -> float:
    runs = [
        run_create(
            agent=fx["agent"],
            workspace=fx["workspace"],
            requester=fx["requester"],
            request=fix_script(PLACE, i),
        )
        for i in range(count + 1)
    ]
    for run in runs:
        wait_status(run.pk, {run_status.WAITING_FOR_APPROVAL}, timeout=120)
    approve(stack, fx, runs[0])  # warm-up: daphne's and the worker's first decision
    samples = [approve(stack, fx, run) for run in runs[1:]]
    types = sorted({s["type"] for s in samples})
    print(
        f"1. approve click -> the run's next event ({count} runs waiting for a commit, HTTP "
        f"POST to daphne; next event: {', '.join(types)})"
    )
    for name, key in (
        ("click -> next event stored", "stored"),
        ("click -> next event read (2 ms poll)", "seen"),
        ("  of which the decide API's response", "http"),
        ("  approval.decided -> next event", "pickup"),
    ):
        print(f"{name:<38}{ms([s[key] for s in samples])}")
    return pct([s["stored"] for s in samples], 95)


# --- 2. the pages with 10,000 pending requests ----------------------------------------------
DIFF = "".join(
    f"--- a/docs/section-{{n}}.md\n+++ b/docs/section-{{n}}.md\n@@ -{k},3 +{k},3 @@\n"
    f" Context line {k} of the page.\n-See [the guide](getting-startd.md) for setup.\n"
    f"+See [the guide](getting-started.md) for setup.\n"
    for k in range(1, 60, 6)
)


def queue_fixtures(fx: dict[str, Any], pending: int, decided: int, runs: int) -> None:
    agents = [fx["agent"]] + [
        Agent.objects.create(slug=f"agent-{a}", name=f"Agent {a.upper()}", identity="Bench.")
        for a in "abc"
    ]
    requesters = [fx["requester"], user("bench-operator-2", OPERATOR)]
    rows = Run.objects.bulk_create(
        Run(
            agent=agents[i % len(agents)],
            workspace=fx["workspace"],
            requester=requesters[i % len(requesters)],
            request=f"Fix the broken links of section {i} of the documentation",
            status=run_status.WAITING_FOR_APPROVAL,
            stage="loop",
        )
        for i in range(runs)
    )
    now = timezone.now()
    kinds = [
        (ApprovalRequest.Kind.TOOL_CALL, "patchDraft"),
        (ApprovalRequest.Kind.TOOL_CALL, "runShell"),
        (ApprovalRequest.Kind.COMMIT, ""),
        (ApprovalRequest.Kind.PLAN, ""),
    ]
    requests = []
    for i in range(pending + decided):
        kind, tool = kinds[i % len(kinds)]
        path = f"docs/section-{i}.md"
        done = i >= pending
        requests.append(
            ApprovalRequest(
                run=rows[i % runs],
                kind=kind,
                status=("approved" if i % 3 else "rejected") if done else "pending",
                tool_use_id=f"toolu_{i:06d}",
                tool=tool,
                arguments={"path": path, "search": "(getting-startd.md)"} if tool else {},
                paths=[path],
                diff=DIFF.format(n=i) if kind != ApprovalRequest.Kind.PLAN else "",
                summary=f"{tool or kind} {path}: fix the broken links of section {i}",
                rule="ask-writes",
                reason="Writes to the docs need a person.",
                risk=("low", "medium", "high", "")[(i // 5) % 4],
                strong_confirmation=i % 15 == 0,
                digest=f"{i:064x}",
                file_hashes={path: f"{i:064x}"},
                required_approvals=2 if i % 20 == 0 else 1,
                expires_at=now + datetime.timedelta(hours=1 + i % 48) if i % 2 else None,
                decided_at=now if done else None,
                decided_by=fx["approver"] if done else None,
                comment="Looks right." if done else "",
            )
        )
    ApprovalRequest.objects.bulk_create(requests, batch_size=1000)
    ApprovalDecision.objects.bulk_create(
        (
            ApprovalDecision(
                approval=a,
                user=fx["approver"],
                decision="approve" if a.status == "approved" else "reject",
                comment=a.comment,
                shown_digest=a.digest,
            )
            for a in requests[pending:]
        ),
        batch_size=1000,
    )


def timed(client: Client, url: str, headers: dict[str, str], samples: int) -> dict[str, Any]:
    for _ in range(5):
        response = client.get(url, headers=headers)
        if response.status_code != 200:
            return {"status": response.status_code}
    times, pauses, began = [], [], [0.0]

    def full_collection(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                began[0] = time.perf_counter()
            else:
                pauses.append(time.perf_counter() - began[0])

    gc.callbacks.append(full_collection)
    for _ in range(samples):
        started = time.perf_counter()
        client.get(url, headers=headers)
        times.append(time.perf_counter() - started)
    gc.callbacks.remove(full_collection)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, headers=headers)
    sql = sorted(queries.captured_queries, key=lambda q: -float(q["time"]))
    return {
        "times": times,
        "gc": pauses,
        "queries": len(sql),
        "sql": sum(float(q["time"]) for q in sql),
        "slowest": sql[0] if sql else None,
        "bytes": len(response.content),
    }


def over_daphne(stack: BenchStack, cookie: str, url: str, samples: int) -> list[float]:
    request = urllib.request.Request(stack.url + url, headers={"Cookie": cookie})  # noqa: S310
    times = []
    for i in range(samples + 5):
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our daphne
            response.read()
        if i >= 5:
            times.append(time.perf_counter() - started)
    return times


def bench_pages(stack: BenchStack, fx: dict[str, Any], args: argparse.Namespace) -> float:
    started = time.perf_counter()
    queue_fixtures(fx, args.pending, args.decided, args.runs)
    built = time.perf_counter() - started
    if connection.vendor == "postgresql":  # the planner's statistics, as autovacuum would
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(fx["approver"])
    one = (  # a commit request from the middle of the queue
        ApprovalRequest.objects.filter(status="pending", kind="commit")
        .order_by("requested_at")
        .values_list("pk", flat=True)[args.pending // 8]
    )
    pages = [
        ("queue page /approvals/", "/approvals/", {}),
        ("queue fragment (HX-Request)", "/approvals/", {"HX-Request": "true"}),
        ("queue, sort=risk", "/approvals/?sort=risk", {}),
        ("queue, risk=high&agent=agent-a", "/approvals/?risk=high&agent=agent-a", {}),
        ("API ?status=pending (50)", "/api/approvals/?status=pending", {}),
        ("review page of one request", f"/approvals/{one}/", {}),
        ("history /approvals/history/", "/approvals/history/", {}),
    ]
    print(
        f"\n2. pages with {args.pending:,} pending requests ({args.decided:,} decided) over "
        f"{args.runs} runs (built in {built:.1f} s); server time in this process, "
        f"{args.samples} requests after 5 warm-ups"
    )
    print(
        f"{'page':<34}{'p50':>9}{'p95':>9}{'max':>9}{'queries':>9}{'SQL':>9}{'bytes':>9}"
        "   full GCs (max)"
    )
    queue_p95 = 0.0
    for name, url, headers in pages:
        result = timed(client, url, headers, args.samples)
        if "times" not in result:
            print(f"{name:<34}HTTP {result['status']}: not measured")
            continue
        t = result["times"]
        print(
            f"{name:<34}{pct(t, 50) * 1000:6.1f} ms{pct(t, 95) * 1000:6.1f} ms"
            f"{max(t) * 1000:6.1f} ms{result['queries']:9d}{result['sql'] * 1000:6.1f} ms"
            f"{result['bytes']:9,}   {len(result['gc'])}"
            + (f" ({max(result['gc']) * 1000:.0f} ms)" if result["gc"] else "")
        )
        if url == "/approvals/" and not headers:
            queue_p95 = pct(t, 95)
            slow = result["slowest"]
            print(f"  slowest query {float(slow['time']) * 1000:.1f} ms: {slow['sql'][:150]}")
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    through = over_daphne(stack, cookie, "/approvals/", args.samples)
    print(f"{'queue page through daphne (HTTP)':<34}{ms(through)}")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(client.get, "/approvals/")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
    return queue_p95


def goal(name: str, figure: float, target: float) -> None:
    met = "met" if figure <= target else "NOT met"
    print(
        f"{name:<38}{figure * 1000:7.1f} ms vs goal {target * 1000:.0f} ms "
        f"({figure / target:.2f} of it): {met}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approvals", type=int, default=30, help="runs approved and timed")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--decided", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=200, help="runs the requests belong to")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--profile", action="store_true", help="cProfile one queue page")
    args = parser.parse_args()
    with own_databases(PLACE, logs="daphne's and the worker's logs are"):
        stack = WebStack(log_dir=VAR_DIR / "logs")
        try:
            fx = fixtures(args.approvals + 1)
            stack.start()
            config = (
                "embedded (SQLite, filesystem broker)"
                if settings.EMBEDDED
                else "production (PostgreSQL, Redis broker)"
            )
            print(
                f"configuration: {config}; Python {platform.python_version()}, "
                f"Django {django.get_version()}, DEBUG {settings.DEBUG}\n"
            )
            click_p95 = bench_click(stack, fx, args.approvals)
            queue_p95 = bench_pages(stack, fx, args)
            print()
            goal("approve click -> next event, p95", click_p95, GOAL_CLICK_P95)
            goal("queue page server time, p95", queue_p95, GOAL_QUEUE)
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
