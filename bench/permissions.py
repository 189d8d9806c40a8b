"""Permission decisions and path resolution, in microseconds per call.

Usage: ``python bench/permissions.py``. Pure: no database. Figures:
- a decision against a policy of 1,000 rules (the matching rule last, so every rule is
  considered, as the engine always does to report them), against the default policy, and
  a baseline of 1,000 bare ``str ==`` comparisons measured in the same process;
- resolving a path inside a workspace (lexical checks, then links), against ``os.path.realpath``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from policies.core.default_policy import DEFAULT_POLICY
from policies.core.permissions import Call, Policy, Rule, decide
from policies.paths import resolve_in_workspace


def per_call_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    rules = [
        Rule(f"r{i}", f"tool{i % 50}", "allow" if i % 3 else "ask", f"area{i}/**")
        for i in range(999)
    ]
    rules.append(Rule("last", "createDraft", "allow", "docs/**"))
    big = Policy("big", "L3", tuple(rules))
    call = Call("createDraft", "L2", "filesystem_write", "docs/guide/page.md")
    assert decide(big, call).rule == "last"
    names = [f"tool{i % 50}" for i in range(1000)]

    print(f"decision, 1,000 rules          {per_call_us(lambda: decide(big, call), 200):9.1f} µs")
    print(
        f"decision, default policy       "
        f"{per_call_us(lambda: decide(DEFAULT_POLICY, call), 5000):9.1f} µs"
    )
    baseline = per_call_us(lambda: [n == "createDraft" for n in names], 2000)
    print(f"baseline: 1,000 str == in a loop {baseline:7.1f} µs")

    root = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    (root / "docs" / "guide").mkdir(parents=True)
    (root / "docs" / "guide" / "page.md").write_text("x")
    os.symlink(root / "docs" / "guide" / "page.md", root / "alias.md")
    print(
        f"resolve a path                 "
        f"{per_call_us(lambda: resolve_in_workspace(root, 'docs/guide/page.md'), 20000):9.1f} µs"
    )
    print(
        f"resolve a link                 "
        f"{per_call_us(lambda: resolve_in_workspace(root, 'alias.md'), 20000):9.1f} µs"
    )
    target = str(root / "docs" / "guide" / "page.md")
    print(
        f"baseline: os.path.realpath     "
        f"{per_call_us(lambda: os.path.realpath(target), 20000):9.1f} µs"
    )


if __name__ == "__main__":
    main()
