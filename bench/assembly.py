"""Prompt assembly and instruction loading, against floors measured in the same process.

Usage: ``python bench/assembly.py`` (embedded default; set DATABASE_URL/REDIS_URL and the
production variables to measure with PostgreSQL and the Redis cache).

1. Assembly of one ``drop_whole_units`` layer of 1k, 10k and 100k units (about 100 bytes
   each, budget half the total, so half are dropped), plus a ``truncate_tail`` blob of the
   same bytes; floor: ``''.join`` over the same strings.
2. Instruction loading for a tree of 1,000 folders, each with an AGENTS.md: cold (cache
   invalidated: walk, read, decode, query the database, store), against a floor of walking
   and reading the same files; and warm (served from the cache).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if not os.environ.get("DATABASE_URL"):
    os.environ.setdefault("HARNESS_VAR_DIR", tempfile.mkdtemp(prefix="harness-bench-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_console.settings")

import django

django.setup()

from django.conf import settings
from django.test.utils import setup_databases, teardown_databases

from policies import instruction_cache
from policies.core.assembler import Layer, Unit, assemble
from policies.core.tokenizer import ByteEstimate
from policies.instruction_cache import instructions_invalidate, instructions_load
from policies.models import Agent


def best(fn, repeat: int) -> float:
    """Best of ``repeat`` runs, in seconds: the least disturbed by the rest of the machine."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_assembly() -> None:
    tokenizer = ByteEstimate()
    print("assembly (best of 5)                 time      floor   ratio")
    for n in (1_000, 10_000, 100_000):
        texts = [f"Rule {i:07d}: " + "keep every page short and link it. " * 2 for i in range(n)]
        units = tuple(Unit(f"rule:{i}", text) for i, text in enumerate(texts))
        total = sum(len(t) for t in texts)
        layer = Layer("business_rules", "drop_whole_units", total // 8, units)
        blob = Layer("project_context", "truncate_tail", total // 8, units)
        floor = best(lambda texts=texts: "".join(texts), 5)
        for label, layers in (
            (f"{n:>7,} units, drop_whole_units", [layer]),
            (f"{n:>7,} units, truncate_tail", [blob]),
        ):
            took = best(lambda layers=layers: assemble(layers, tokenizer), 5)
            print(f"{label:<34} {took * 1000:8.2f} ms {floor * 1000:7.2f} ms {took / floor:6.2f}×")


def make_tree(root: Path, folders: int) -> None:
    for i in range(folders):
        folder = root / f"area{i % 10}" / f"part{i // 10 % 10}" / f"leaf{i}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "AGENTS.md").write_text(f"# leaf {i}\n\nWrite clearly about part {i}.\n")
    (root / "AGENTS.md").write_text("# root\n")


def walk_and_read(root: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if "AGENTS.md" in filenames:
            with open(os.path.join(dirpath, "AGENTS.md"), "rb") as handle:
                total += len(handle.read())
    return total


def bench_loading() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-tree-"))
    make_tree(root, 1_000)
    agent = Agent.objects.create(slug="bench", name="Bench", identity="Bench agent.")

    def cold() -> None:
        instructions_invalidate(root=root)
        instruction_cache._memo.clear()
        instructions_load(agent=agent, root=root)

    def warm_shared() -> None:  # another process's first look: the shared cache, no memo
        instruction_cache._memo.clear()
        instructions_load(agent=agent, root=root)

    cold()
    floor = best(lambda: walk_and_read(root), 7)
    took = best(cold, 7)
    warm_runs = []
    for _ in range(2_000):
        start = time.perf_counter()
        instructions_load(agent=agent, root=root)
        warm_runs.append(time.perf_counter() - start)
    shared = best(warm_shared, 20)
    backend = settings.CACHES["default"]["BACKEND"].rsplit(".", 1)[-1]
    print(f"\ninstruction loading, 1,000 folders ({backend})")
    print(
        f"cold (walk, read, decode, db, store)  {took * 1000:8.2f} ms   floor (walk + read) "
        f"{floor * 1000:.2f} ms   {took / floor:.2f}×"
    )
    print(
        f"warm, median of 2,000 loads           {statistics.median(warm_runs) * 1000:8.4f} ms"
        f"   (p99 {sorted(warm_runs)[int(len(warm_runs) * 0.99)] * 1000:.4f} ms)"
    )
    print(
        f"warm from the shared cache only       {shared * 1000:8.4f} ms"
        "   (a process's first load after another process stored it)"
    )


def main() -> None:
    bench_assembly()
    old = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    try:
        bench_loading()
    finally:
        teardown_databases(old, verbosity=0)


if __name__ == "__main__":
    main()
