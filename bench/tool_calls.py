"""What one tool call costs beside the work it does, measured in one run.

Usage: ``python bench/tool_calls.py [--calls N]``. No database: a temporary workspace with
one tiny file, read with ``readSource`` as the harness reads it, four ways, interleaved
in rounds so that the machine's load falls on all of them alike:

1. in-process: the tool's code called here (``runs.tools.child.handle``, what the tool
   process runs), no process at all: the floor;
2. a bare ``os.fork`` + ``_exit`` + ``waitpid`` from this process (Django set up, as a
   worker is): what any process per call costs at the least;
3. ``run_isolated``: the supervisor forked by the worker's fork server, the tool forked by
   the supervisor, every isolation property kept (SPEC T6);
4. ``run_spawned``: the same call with a fresh interpreter for the supervisor, as before
   the fork server.

Prints the median and p95 per call of each, and the goal of issue 17: the fork server
within 10 ms of the in-process floor. ``measure()`` returns the figures for another bench
(``bench/loop.py``) to print beside its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOAL_MS = 10.0  # issue 17: a readSource call within 10 ms of the in-process floor
TINY = "# Tiny\n\nA tiny page about the loop.\n"


def _context() -> dict[str, Any]:
    from policies.core.default_policy import DEFAULT_POLICY
    from runs.tools.child_context import policy_to_context

    return {
        "policy": policy_to_context(DEFAULT_POLICY),
        "tool": {"name": "readSource", "level": "L1", "side_effect": "none"},
        "grants": [],
        "decided": {},
    }


def _ways(root: Path, drafts: Path) -> dict[str, Callable[[], Any]]:
    from runs.tools import child
    from runs.tools.isolation import run_isolated, run_spawned

    call = {
        "impl": "readSource",
        "root": str(root),
        "drafts": str(drafts),
        "args": {"path": "docs/tiny.md"},
        "context": _context(),
    }

    def in_process() -> Any:
        return child.handle(dict(call))

    def bare_fork() -> Any:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        return os.waitpid(pid, 0)

    def checked(run: Callable[..., dict[str, Any]]) -> Callable[[], Any]:
        def one() -> Any:
            reply = run(**call, timeout=30.0)
            if not reply.get("ok") or reply.get("content") != TINY:
                raise RuntimeError(f"The bench's readSource failed: {reply}")
            return reply

        return one

    return {
        "in-process (the floor)": in_process,
        "bare fork + exit + wait": bare_fork,
        "fork server (run_isolated)": checked(run_isolated),
        "fresh interpreter (run_spawned)": checked(run_spawned),
    }


def measure(calls: int = 200, rounds: int = 5) -> dict[str, list[float]]:
    """Per-call times (ms) of each way, ``calls`` in all per way (a tenth of them for the
    fresh interpreter, which takes that much longer), interleaved over ``rounds``."""
    import warnings

    warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
    place = Path(tempfile.mkdtemp(prefix="harness-bench-tool-calls-"))
    root, drafts = place / "workspace", place / "drafts"
    (root / "docs").mkdir(parents=True)
    drafts.mkdir()
    (root / "docs" / "tiny.md").write_text(TINY)
    ways = _ways(root, drafts)
    for run in ways.values():  # warm: the fork server starts, the files are cached
        run()
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, run in ways.items():
            share = max(1, calls // rounds // (10 if "fresh" in name else 1))
            for _ in range(share):
                started = time.perf_counter()
                run()
                times[name].append((time.perf_counter() - started) * 1000)
    return times


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else values[0]


def report(times: dict[str, list[float]]) -> None:
    floor = statistics.median(times["in-process (the floor)"])
    print("readSource of a tiny file, per call (ms)")
    print(f"{'':<34}{'median':>9}{'p95':>9}{'calls':>7}{'- floor':>10}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<34}{median:>9.2f}{p95(values):>9.2f}{len(values):>7}{median - floor:>10.2f}")
    server = statistics.median(times["fork server (run_isolated)"])
    fresh = statistics.median(times["fresh interpreter (run_spawned)"])
    over = server - floor
    verdict = "met" if over <= GOAL_MS else f"not met (by {over - GOAL_MS:.2f} ms)"
    print(f"fresh interpreter / fork server: {fresh / server:.1f}x")
    print(f"goal: fork server - in-process <= {GOAL_MS:g} ms: {verdict} ({over:.2f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per way (default 200)")
    options = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _place import prepare

    prepare("tool-calls")
    import django

    django.setup()  # this process is as large as a worker: what a bare fork copies
    report(measure(options.calls))


if __name__ == "__main__":
    main()
