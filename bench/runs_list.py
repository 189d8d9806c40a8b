"""The runs list at scale (issue 19): server time of its pages over a large generated
history — the first page, the next, one deep in the middle, the last, filtered, searched.

Usage: ``python bench/runs_list.py [--runs 100000,1000000] [--samples 20]`` embedded
(SQLite), or with ``DATABASE_URL=postgres://... REDIS_URL=redis://...`` on PostgreSQL, on
throwaway data of its own (bench/_place.py). The synthetic runs all ask the same thing
("Fix the broken links in the guide."); one in a thousand is given another request, so a
search matches every run ("broken") or a few ("glossary"). Each page is requested through
Django's test client in this process: 3 warm-ups, then ``--samples`` timed requests. A
pager's links carry their page's number; a hand-made cursor (none) is numbered by a count.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _place import prepare

PLACE = prepare("runs_list")

import django

django.setup()

from _tools import own_databases, pct, time_page
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from harness_console.roles import OPERATOR, OPS, roles_sync
from policies.models import Agent, Workspace
from runs.models import Run, ToolCall
from runs.observability.synthetic import synthetic_runs_generate
from runs.run_pages import NEWEST, cursor_of
from tests.conftest import prices_seed


def fixtures() -> dict:
    roles_sync()
    prices_seed()
    root = PLACE.var_dir / "workspace"
    root.mkdir()
    for n in range(5):
        Agent.objects.create(slug=f"agent-{n}", name=f"Agent {n}", identity="Bench agent.")
    Workspace.objects.create(slug="space", name="Space", root=str(root))
    ops = User.objects.create_user("bench-ops")
    ops.groups.add(Group.objects.get(name=OPS))
    operator = User.objects.create_user("bench-operator")
    operator.groups.add(Group.objects.get(name=OPERATOR))
    return {"ops": ops, "operator": operator}


def vary_requests(size: int) -> None:
    """One run in a thousand asks something else (through the ORM: the index follows)."""
    some = list(Run.objects.order_by("id").values_list("id", flat=True)[: max(1, size // 1000)])
    Run.objects.filter(id__in=some).update(request="Translate the glossary into French.")


def analyze() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for model in (Run, ToolCall):
                cursor.execute(f"ANALYZE {model._meta.db_table}")


def pages(size: int) -> list[tuple[str, str]]:
    runs = Run.objects.without_evals().order_by(*NEWEST)
    second = cursor_of(runs[49], 2)
    at = size // 2 // 50 * 50 - 1  # the last run of a page, as the pager's links name it
    middle, bare = cursor_of(runs[at], at // 50 + 2), cursor_of(runs[at])
    return [
        ("first page", "/runs/"),
        ("second page", f"/runs/?after={second}"),
        ("a page in the middle", f"/runs/?after={middle}"),
        ("newer from the middle", f"/runs/?before={middle}"),
        ("middle, a hand-made cursor", f"/runs/?after={bare}"),
        ("last page", "/runs/?last=1"),
        ("status=failed", "/runs/?status=failed"),
        ("refused=1", "/runs/?refused=1"),
        ("q=broken (every run)", "/runs/?q=broken"),
        ("q=glossary (0.1 %)", "/runs/?q=glossary"),
        ("q=glossary&status=completed", "/runs/?q=glossary&status=completed"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="100000,1000000", help="Sizes, comma-separated.")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--queries", action="store_true", help="Print each query's time.")
    args = parser.parse_args()
    sizes = sorted(int(s.replace("_", "")) for s in args.runs.split(","))
    database = "PostgreSQL" if connection.vendor == "postgresql" else "SQLite (embedded)"
    print(f"# bench/runs_list.py — {database}, Python {platform.python_version()}")
    with own_databases(PLACE, logs="its files are"):
        settings.ALLOWED_HOSTS.append("testserver")
        fx = fixtures()
        client = Client()
        client.force_login(fx["ops"])
        written = 0
        for size in sizes:
            started = time.perf_counter()
            synthetic_runs_generate(
                runs=size - written, days=30, seed=size, requester=fx["operator"]
            )
            vary_requests(size)
            print(f"## {size:,} runs (generated in {time.perf_counter() - started:.0f} s)")
            written = size
            analyze()
            for name, url in pages(size):
                times, queries = time_page(client, url, args.samples, warmups=3, show=args.queries)
                p50, p95 = pct(times, 50) * 1000, pct(times, 95) * 1000
                print(f"  {name:30s} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   {queries} queries")
            print()


if __name__ == "__main__":
    main()
