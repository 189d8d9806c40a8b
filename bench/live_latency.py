"""Latency from a Celery worker's run event to the browser showing it, on this configuration.

Usage: ``python bench/live_latency.py [--samples N]`` (the embedded default), or with
``DATABASE_URL`` / ``REDIS_URL`` (and ``SECRET_KEY``, ``ALLOWED_HOSTS``) set for production.

For each sample: a run page is open in Chromium and live; the run is dispatched; the real
worker claims it and appends a ``status.changed`` event. Printed per sample set:
- dispatch → event: ``.delay()`` until the worker stored the event (broker pickup and claim);
- event → browser: the event's ``created_at`` until the page inserted it (commit, channel
  layer, WebSocket, htmx swap). Both clocks are this machine's.
"""

from __future__ import annotations

import argparse
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
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

import django

django.setup()

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.test.utils import setup_databases, teardown_databases
from playwright.sync_api import sync_playwright

from harness_console.roles import OPERATOR, roles_sync
from policies.models import Agent, Workspace
from runs.lifecycle import run_dispatch
from runs.models import RunEvent
from runs.services import run_create
from tests.stack import (
    CHROMIUM_ARGS,
    CHROMIUM_EXECUTABLE,
    LiveStack,
    clear_broker_folder,
    off_loop,
)

PASSWORD = "bench-password-0123"  # noqa: S105 - a throwaway user in a throwaway database
WATCH = """() => { window.__seen = {}; new MutationObserver((records) => {
  for (const r of records) for (const n of r.addedNodes)
    if (n.dataset && n.dataset.seq) window.__seen[n.dataset.seq] = Date.now(); })
  .observe(document.getElementById('run-timeline'), {childList: true}); }"""


def fixtures() -> tuple[User, Agent, Workspace]:
    roles_sync()
    user = User.objects.create_user("bench-operator", password=PASSWORD)
    user.groups.add(Group.objects.get(name=OPERATOR))
    root = Path(tempfile.mkdtemp(prefix="bench-workspace-"))
    workspace = Workspace.objects.create(slug="bench", name="Bench", root=str(root))
    agent = Agent.objects.create(slug="bench", name="Bench", identity="Bench agent.")
    return user, agent, workspace


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def measure(stack: LiveStack, samples: int) -> tuple[list[float], list[float]]:
    user, agent, workspace = fixtures()
    to_event, to_browser = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM_EXECUTABLE, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(f"{stack.url}/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        for _ in range(samples):
            run = off_loop(
                run_create,
                agent=agent,
                workspace=workspace,
                requester=user,
                request="Benchmark run",
                dispatch=False,
            )
            page.goto(f"{stack.url}/runs/{run.pk}/")
            page.wait_for_selector("#run-live-status.ok")
            page.evaluate(WATCH)
            dispatched = time.time() * 1000
            off_loop(run_dispatch, run_id=run.pk)
            page.wait_for_function("() => window.__seen['2']", timeout=15_000)
            shown = page.evaluate("() => window.__seen['2']")
            stored = off_loop(RunEvent.objects.get, run_id=run.pk, seq=2)
            stored_ms = stored.created_at.timestamp() * 1000
            to_event.append(stored_ms - dispatched)
            to_browser.append(shown - stored_ms)
        browser.close()
    return to_event, to_browser


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args()
    os.environ["HARNESS_USE_TEST_DATABASES"] = "false"
    old = setup_databases(verbosity=0, interactive=False, aliases=set(settings.DATABASES))
    if settings.EMBEDDED:
        clear_broker_folder(Path(settings.VAR_DIR))
    stack = LiveStack(log_dir=Path(settings.VAR_DIR) / "bench-logs")
    try:
        stack.start(collectstatic=not settings.WHITENOISE_USE_FINDERS)
        to_event, to_browser = measure(stack, args.samples)
    finally:
        stack.stop()
        teardown_databases(old, verbosity=0)
    config = (
        "embedded (SQLite, filesystem broker, channels-lite)"
        if settings.EMBEDDED
        else ("production (PostgreSQL, Redis broker, channels-redis)")
    )
    print(f"configuration: {config}; samples: {len(to_browser)}")
    total = [a + b for a, b in zip(to_event, to_browser, strict=True)]
    for name, values in (
        ("dispatch -> event stored", to_event),
        ("event stored -> browser", to_browser),
        ("dispatch -> browser", total),
    ):
        print(
            f"{name:<26} median {statistics.median(values):7.1f} ms   "
            f"p95 {pct(values, 95):7.1f} ms   min {min(values):6.1f} ms"
        )


if __name__ == "__main__":
    main()
