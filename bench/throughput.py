"""Runs in flight at once: N runs submitted together through the REST API, against the floor.

Usage: ``python bench/throughput.py`` (embedded: SQLite, filesystem broker), or
``DATABASE_URL=postgres://... REDIS_URL=redis://... python bench/throughput.py``
(PostgreSQL, Redis). Throwaway data of its own (bench/_place.py): a temporary
HARNESS_VAR_DIR, on PostgreSQL a database named ``bench_throughput``, Redis keys and Celery
queues prefixed ``bench-throughput``. ``--latency`` is the fake model's answer time (2 s),
``--sizes`` the values of N (10,40,200), ``--repeats`` the rounds per N (3): the round whose
ratio to its floor is the median is the one reported, every round's ratio beside it, with
every round's errors and the worst round's memory per run (one round can differ from the
next by a quarter on a 2-core machine whose database shares its cores).

Every process ``serve`` starts (daphne, the run worker, the housekeeping worker, beat), with
the real Anthropic SDK pointed at a local fake Messages API that answers every call after
the fixed latency: turn 1 asks for readSource, turn 2 for searchDocs, turn 3 answers. For
each N and round, in this order and in this one process:

- floor: N threads, each making the same 3 sequential calls to the same fake API through
  one SDK client, no harness: the time until all are done is what full concurrency costs;
- harness: N runs POSTed to /api/runs/ by 16 clients at once; the time from the first POST
  until the last run's ``finished_at``, and while they run (polled every 0.1 s): runs in
  flight (claimed, not ended), the run worker's RSS, and on PostgreSQL the connections per
  process (pg_stat_activity, each process naming itself through PGAPPNAME).

Errors: runs not completed, and lines with "too many clients", a pool timeout or a traceback
in the logs. Where the time goes: the mean model call as the harness saw it (ModelCall
latency) and the mean tool call (ToolCall started → finished).
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import statistics
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _place import ROOT, prepare

PLACE = prepare("throughput")
VAR_DIR = PLACE.var_dir
FAKE_KEY = "sk-ant-bench-fake-key"
os.environ.setdefault("ANTHROPIC_API_KEY", FAKE_KEY)

import django

django.setup()
logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per model call otherwise

import anthropic
from _tools import BenchStack, own_databases
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from rest_framework.authtoken.models import Token

from harness_console.roles import OPERATOR, roles_sync
from policies.models import Agent, Workspace
from runs.core import status as run_status
from runs.models import ModelCall, Run, ToolCall
from tests.fake_anthropic import Answer, FakeAnthropic, message

REQUEST = "Summarize docs/notes.md"
NOTES = "# Notes\n\nThe loop waits for the model most of its life.\n"
USAGE = {"input_tokens": 300, "output_tokens": 20}
IN_FLIGHT = {run_status.PLANNING, run_status.RUNNING, run_status.VERIFYING}
ENDED = {run_status.COMPLETED, run_status.FAILED, run_status.ROLLED_BACK}
GOALS = {40: 1.5, 200: 2.0}  # x the floor
GOAL_MIB_PER_RUN = 2.0
# Clients POSTing at once: daphne (Twisted) listens with a backlog of 50 and resets what
# overflows it, so 200 simultaneous connections measure the backlog, not the console.
SUBMITTERS = 16
ERRORS = re.compile(r"too many clients|PoolTimeout|couldn't get a connection|Traceback")


# --- the fake model: the same three turns for every caller ---------------------------------
def responder(latency: float):
    def answer(body: dict[str, Any]) -> Answer:
        turn = 1 + sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")
        if turn == 1:
            use = {"type": "tool_use", "id": "toolu_read", "name": "readSource"}
            reply = message(
                [{**use, "input": {"path": "docs/notes.md"}}], stop_reason="tool_use", usage=USAGE
            )
        elif turn == 2:
            use = {"type": "tool_use", "id": "toolu_search", "name": "searchDocs"}
            reply = message(
                [{**use, "input": {"query": "loop model"}}], stop_reason="tool_use", usage=USAGE
            )
        else:
            reply = message([{"type": "text", "text": "It says the loop waits."}], usage=USAGE)
        reply.delay = latency
        return reply

    return answer


def floor(fake: FakeAnthropic, n: int) -> float:
    """N callers, each making the 3 calls one after the other, all at once."""
    client = anthropic.Anthropic(api_key=FAKE_KEY, base_url=fake.url, max_retries=0, timeout=120)
    start = threading.Barrier(n + 1)

    def caller() -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": REQUEST}]
        start.wait()
        for _ in range(3):
            reply = client.messages.create(model="claude-bench", max_tokens=256, messages=messages)
            messages.append({"role": "assistant", "content": reply.model_dump()["content"]})
            messages.append({"role": "user", "content": "go on"})

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(caller) for _ in range(n)]
        start.wait()
        began = time.perf_counter()
        for future in futures:
            future.result()
        elapsed = time.perf_counter() - began
    client.close()
    return elapsed


# --- the stack -------------------------------------------------------------------------------
class NamedStack(BenchStack):
    """Every process of ``serve``, each naming itself to PostgreSQL (PGAPPNAME), so the
    connections can be counted per process."""

    whole = True
    _naming = ""

    def env(self) -> dict[str, str]:
        env = super().env()
        if self._naming:
            env["PGAPPNAME"] = f"bench-{self._naming}"
        return env

    def _spawn(self, name: str, argv: list[str]) -> None:
        self._naming = name
        try:
            super()._spawn(name, argv)
        finally:
            self._naming = ""


def rss_mib(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(found.group(1)) / 1024 if found else 0.0


def cpu_seconds(pid: int) -> float:
    """CPU time of a process, its threads, the children it reaped and those still alive
    (the run worker's fork server and tool supervisors)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        total += cpu_seconds(int(child))
    return total


def stack_cpu(stack: BenchStack) -> dict[str, float]:
    return {name: cpu_seconds(proc.pid) for name, proc in stack.processes.items()}


def pg_connections() -> dict[str, int]:
    if settings.EMBEDDED:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1"
        )
        return {name or "?": count for name, count in cursor.fetchall()}


def fixtures() -> str:
    roles_sync()
    user = User.objects.create_user("bench-operator")
    user.groups.add(Group.objects.get(name=OPERATOR))
    root = VAR_DIR / "workspace"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "notes.md").write_text(NOTES)
    Workspace.objects.create(
        slug="bench", name="Bench", root=str(root), drafts_root=str(VAR_DIR / "drafts")
    )
    Agent.objects.create(slug="bench", name="Bench", identity="Bench agent.")
    return Token.objects.create(user=user).key


def submit(stack: BenchStack, token: str) -> str:
    body = json.dumps({"agent": "bench", "workspace": "bench", "request": REQUEST}).encode()
    request = urllib.request.Request(  # noqa: S310 - our daphne
        f"{stack.url}/api/runs/",
        data=body,
        method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - our daphne
        return json.loads(response.read())["id"]


def harness(stack: NamedStack, token: str, n: int, timeout: float) -> dict[str, Any]:
    workers = [p.pid for name, p in stack.processes.items() if name.startswith("worker")]
    idle = sum(rss_mib(pid) for pid in workers)
    cpu_before, bench_before = stack_cpu(stack), time.process_time()
    began_wall = time.time()
    with ThreadPoolExecutor(min(n, SUBMITTERS)) as pool:
        ids = list(pool.map(lambda _: submit(stack, token), range(n)))
    submitted = time.time() - began_wall
    peak_flight, peak_rss, peak_pg, peak_per = 0, idle, 0, {}
    deadline = time.monotonic() + timeout
    statuses: list[str] = []
    while time.monotonic() < deadline:
        statuses = list(Run.objects.filter(pk__in=ids).values_list("status", flat=True))
        peak_flight = max(peak_flight, sum(1 for s in statuses if s in IN_FLIGHT))
        peak_rss = max(peak_rss, sum(rss_mib(pid) for pid in workers))
        per = pg_connections()
        if sum(per.values()) > peak_pg:
            peak_pg, peak_per = sum(per.values()), per
        if len(statuses) == n and all(s in ENDED for s in statuses):
            break
        time.sleep(0.1)
    cpu = {k: v - cpu_before.get(k, 0.0) for k, v in stack_cpu(stack).items()}
    cpu["bench (fake model, API clients)"] = time.process_time() - bench_before
    runs = list(Run.objects.filter(pk__in=ids).values_list("status", "finished_at"))
    if os.environ.get("BENCH_TIMELINE"):  # where one run's time went, to stderr
        last = Run.objects.filter(pk__in=ids).order_by("-finished_at").first()
        if last is not None:
            events = list(last.events.order_by("seq").values_list("type", "created_at"))
            for kind, at in events:
                print(f"  {at.timestamp() - began_wall:7.2f} {kind}", file=sys.stderr)
    finished = [at.timestamp() for s, at in runs if s in ENDED and at is not None]
    latencies = list(ModelCall.objects.filter(run__in=ids).values_list("latency_ms", flat=True))
    tools = [
        (end - begin).total_seconds()
        for begin, end in ToolCall.objects.filter(
            run__in=ids, finished_at__isnull=False
        ).values_list("started_at", "finished_at")
    ]
    connection.close()
    return {
        "model_s": statistics.fmean(latencies) / 1000 if latencies else float("nan"),
        "tool_s": statistics.fmean(tools) if tools else float("nan"),
        "elapsed": (max(finished) - began_wall) if len(finished) == n else float("nan"),
        "submitted": submitted,
        "not_completed": sum(1 for s, _ in runs if s != run_status.COMPLETED),
        "in_flight": peak_flight,
        "idle_rss": idle,
        "peak_rss": peak_rss,
        "pg": peak_pg,
        "pg_per": peak_per,
        "cpu": cpu,
    }


def log_errors(stack: BenchStack, since: dict[str, int]) -> dict[str, int]:
    """Lines with an error each process logged since the offsets in ``since`` (updated);
    a JSON line carries its traceback, a text one has a line per frame."""
    found = {}
    for name in stack.processes:
        text = stack.log(name)
        new = text[since.get(name, 0) :]
        found[name] = sum(1 for line in new.splitlines() if ERRORS.search(line))
        since[name] = len(text)
        first = ERRORS.search(new)
        if first:  # the first one, to say what went wrong
            print(f"{name}: {new[first.start() : first.start() + 2500]}", file=sys.stderr)
    return {name: count for name, count in found.items() if count}


def ratio_of(row: dict[str, Any]) -> float:
    return row["elapsed"] / row["floor"]


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose ratio to its floor is the median, with every round's ratio beside
    it: on a 2-core machine shared with the database one round can differ from the next
    by a quarter. Errors are every round's, and memory per run the worst round's."""
    ranked = sorted(rounds, key=lambda row: (math.isnan(ratio_of(row)), ratio_of(row)))
    row = dict(ranked[(len(ranked) - 1) // 2])
    row["ratios"] = [ratio_of(r) for r in rounds]
    row["not_completed"] = sum(r["not_completed"] for r in rounds)
    row["log_errors"] = {
        name: sum(r["log_errors"].get(name, 0) for r in rounds)
        for name in {name for r in rounds for name in r["log_errors"]}
    }
    row["per_run"] = max(per_run_mib(r) for r in rounds)
    return row


def per_run_mib(row: dict[str, Any]) -> float:
    return (row["peak_rss"] - row["idle_rss"]) / max(1, row["in_flight"])


# --- report ------------------------------------------------------------------------------------
def verdict(ok: bool, how: str) -> str:
    return "met" if ok else f"NOT met ({how})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=float, default=2.0, help="the fake model's seconds")
    parser.add_argument("--sizes", default="10,40,200", help="the values of N")
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds per N; the median round is reported"
    )
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    config = "embedded (SQLite, filesystem broker)" if settings.EMBEDDED else "PostgreSQL + Redis"
    fake = FakeAnthropic(responder(args.latency), keep_alive=True)
    stack = NamedStack(
        log_dir=VAR_DIR / "logs",
        extra_env={"ANTHROPIC_API_KEY": FAKE_KEY, "ANTHROPIC_BASE_URL": fake.url},
    )
    rows = []
    with own_databases(PLACE, "the stack's"):
        token = fixtures()
        connection.close()
        stack.start()
        try:
            floor(fake, 2)  # warm: the SDK's imports and the server's first threads
            harness(stack, token, 2, timeout=120)  # and the worker's first-run imports
            since: dict[str, int] = {}
            for n in sizes:
                rounds = []
                for _ in range(args.repeats):
                    low = floor(fake, n)
                    found = harness(stack, token, n, timeout=max(120.0, 3 * args.latency * n))
                    found["log_errors"] = log_errors(stack, since)
                    found.update(n=n, floor=low)
                    rounds.append(found)
                    print(
                        f"N={n}: {found['elapsed']:.1f} s, floor {low:.1f} s, "
                        f"{found['in_flight']} in flight",
                        file=sys.stderr,
                        flush=True,
                    )
                rows.append(median_round(rounds))
        finally:
            stack.stop()
            fake.close()
            kept = ROOT / "var" / "bench" / f"throughput-{'sqlite' if settings.EMBEDDED else 'pg'}"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(VAR_DIR / "logs", kept)
            print(f"Logs of the stack: {kept}", file=sys.stderr)
    report(rows, config, args.latency)


def report(rows: list[dict[str, Any]], config: str, latency: float) -> None:
    threads, processes = settings.HARNESS_RUN_THREADS, settings.HARNESS_RUN_PROCESSES
    pool = settings.HARNESS_DB_POOL_SIZE
    print(f"\n## bench/throughput.py: {config}")
    print(
        f"Run workers: {processes} process(es) (HARNESS_RUN_PROCESSES) x {threads} threads"
        f" (HARNESS_RUN_THREADS); DB pool {pool} per process;"
        f" fake model latency {latency:g} s; 3 turns per run (readSource, searchDocs, answer).\n"
    )
    print(
        "| N | all done | floor | x floor (each round) | submitted in | peak in flight "
        "| run workers' RSS idle → peak | MiB per run in flight | PG connections at peak | errors "
        "| model call, tool call (means) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    goals = []
    for row in rows:
        ratio, per_run = ratio_of(row), row["per_run"]
        spread = ", ".join(f"{r:.2f}" for r in row["ratios"])
        errors = row["not_completed"] + sum(row["log_errors"].values())
        pg = (
            f"{row['pg']} ({', '.join(f'{k}: {v}' for k, v in sorted(row['pg_per'].items()))})"
            if row["pg_per"]
            else "n/a"
        )
        detail = f"{row['not_completed']} not completed"
        if row["log_errors"]:
            detail += ", log: " + ", ".join(f"{k} {v}" for k, v in row["log_errors"].items())
        print(
            f"| {row['n']} | {row['elapsed']:.1f} s | {row['floor']:.1f} s "
            f"| {ratio:.2f}× ({spread}) | {row['submitted']:.1f} s | {row['in_flight']} "
            f"| {row['idle_rss']:.0f} → {row['peak_rss']:.0f} MiB | {per_run:.2f} "
            f"| {pg} | {errors} ({detail}) | {row['model_s']:.2f} s, {row['tool_s']:.2f} s |"
        )
        if row["n"] in GOALS:
            goal = GOALS[row["n"]]
            goals.append(
                f"N={row['n']}: ≤ {goal}× the floor: "
                + verdict(ratio <= goal, f"{ratio:.2f}×, {ratio / goal:.2f} of the goal")
            )
        goals.append(
            f"N={row['n']}: ≤ {GOAL_MIB_PER_RUN:g} MiB per run in flight: "
            + verdict(per_run <= GOAL_MIB_PER_RUN, f"{per_run:.2f} MiB")
        )
        goals.append(f"N={row['n']}: 0 errors: " + verdict(errors == 0, f"{errors}: {detail}"))
    print("\nCPU seconds per run, by process (all processes share this machine's cores):")
    for row in rows:
        parts = ", ".join(f"{k} {v * 1000 / row['n']:.0f} ms" for k, v in row["cpu"].items())
        print(f"- N={row['n']}: {parts}")
    print("\nGoals:")
    for line in goals:
        print(f"- {line}")


if __name__ == "__main__":
    main()
