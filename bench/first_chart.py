"""Time to the first chart on a cold load of each page with charts, in Chromium: the full
plotly.js against the partial bundle the console vendors (issue 19, point 6).

Usage: ``python bench/first_chart.py [--runs 20000] [--loads 7] [--also PATH ...]``
embedded (SQLite), or with ``DATABASE_URL=postgres://... REDIS_URL=redis://...`` on
PostgreSQL. On throwaway data of its own (bench/_place.py).

A generated history (``synthetic_runs_generate``: ``--runs`` runs over 30 days, 10 agents,
3 workspaces) and 20 finished eval suites; daphne alone serves the pages. Each load is a
fresh browser context (an empty HTTP cache and no compiled code: a cold load) at
1400×900, signed in as an ops user, that opens the page and records, from the start of
the navigation, the first animation frame in which a chart's traces are in the page.
Each bundle is served alike, by daphne from the static files: the vendored partial bundle
as the pages name it, the full plotly.js of the plotly package (what the pages loaded
before) and any ``--also`` build (e.g. a custom bar + scatter one) copied beside the static
files, the page's request for the bundle sent there by the browser's routing. Loads are
interleaved (page by page, bundle by bundle, round by round) so that a busy moment of this
shared machine falls on every variant alike. Printed: the median of ``--loads`` (and the
range), and where the time went, as medians: the HTML received (the server's share), then
parsed, the bundle received, and plotly.js run (its parse and start, the bundle's cost).
Goal (issue 19): the first chart visible within 1 s of a cold load.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _place import prepare

PLACE = prepare("first_chart")
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop, ORM unused

import django

django.setup()

import plotly
from _tools import BenchStack, own_databases
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import connection
from playwright.sync_api import Browser, sync_playwright

from harness_console.management.commands.serve import commands
from harness_console.roles import OPERATOR, OPS, roles_sync
from policies.models import Agent, Workspace
from runs.observability.synthetic import synthetic_runs_generate
from tests.conftest import prices_seed
from tests.helpers import eval_history
from tests.plotly_bundle import BUNDLE, BUNDLE_URL
from tests.stack import CHROMIUM_ARGS, CHROMIUM_EXECUTABLE, wait_until

GOAL_MS = 1000
PASSWORD = "bench-password-0123"  # noqa: S105 - a throwaway user in a throwaway database
FULL = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
PAGES = (
    ("operations", "/dashboards/ops/"),
    ("retrospective", "/dashboards/retro/?days=30"),
    ("evals", "/evals/"),
)
# Before any script of the page: when plotly.js has run (it ends by setting
# window.Plotly), and the first frame in which a chart has drawn traces.
MOMENTS_JS = """(() => {
  let plotly;
  Object.defineProperty(window, "Plotly", {
    configurable: true,
    get: () => plotly,
    set: (value) => { plotly = value; window.__plotlyAt = window.__plotlyAt || performance.now(); },
  });
  const look = () => {
    if (document.querySelector(".js-plotly-plot g.trace")) {
      window.__firstChart = performance.now();
    } else {
      requestAnimationFrame(look);
    }
  };
  requestAnimationFrame(look);
})();"""
MOMENTS = """() => ({
  chart: window.__firstChart,
  html: performance.getEntriesByType("navigation")[0].responseEnd,
  parsed: performance.getEntriesByType("navigation")[0].domInteractive,
  size: performance.getEntriesByType("navigation")[0].decodedBodySize,
  bundle: performance.getEntriesByType("resource").filter((r) => r.name.includes("plotly"))
    .map((r) => r.responseEnd)[0],
  plotly: window.__plotlyAt,
  part: performance.getEntriesByType("resource").filter((r) => r.name.includes("part="))
    .map((r) => r.responseEnd)[0],
})"""


class WebOnly(BenchStack):
    """daphne alone: the bench reads pages and drives no run."""

    def start(self, *, collectstatic: bool = False) -> WebOnly:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._spawn("web", commands(host="127.0.0.1", port=self.port, worker_name="-")["web"])
        wait_until(self._web_ready, timeout=60, what="daphne to answer")
        return self


def history(runs: int) -> None:
    roles_sync()
    prices_seed()
    ops = User.objects.create_user("bench-ops", password=PASSWORD)
    ops.groups.add(Group.objects.get(name=OPS))
    operator = User.objects.create_user("bench-operator")
    operator.groups.add(Group.objects.get(name=OPERATOR))
    root = PLACE.var_dir / "workspace"
    root.mkdir()
    for n in range(10):
        Agent.objects.create(slug=f"agent-{n}", name=f"Agent {n}", identity="Bench agent.")
    for n in range(3):
        Workspace.objects.create(slug=f"space-{n}", name=f"Space {n}", root=str(root))
    synthetic_runs_generate(runs=runs, days=30, seed=19, requester=operator)
    eval_history(suites=20)


def signed_in(browser: Browser, url: str) -> dict:
    """The ops user's session, as a storage state each cold context starts from."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{url}/login/")
    page.fill("#id_username", "bench-ops")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda address: "/login/" not in address)
    state = context.storage_state()
    context.close()
    return state


def static_beside(bundles: dict[str, Path]) -> dict[str, str]:
    """Each bundle but the vendored one copied where daphne serves static files (the
    bench's own STATIC_ROOT): {label: its address}."""
    if not settings.WHITENOISE_USE_FINDERS:
        call_command("collectstatic", interactive=False, verbosity=0)
    folder = Path(settings.STATIC_ROOT) / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    served = {}
    for label, path in bundles.items():
        if path == BUNDLE:
            served[label] = BUNDLE_URL
        else:
            shutil.copyfile(path, folder / path.name)
            served[label] = f"/{settings.STATIC_URL.strip('/')}/bench/{path.name}"
    return served


def cold_load(browser: Browser, state: dict, url: str, bundle: str) -> dict[str, float]:
    """One cold load: when the first chart was drawn, and the moments before it (MOMENTS),
    in ms from the navigation's start."""
    context = browser.new_context(storage_state=state, viewport={"width": 1400, "height": 900})
    try:
        if bundle != BUNDLE_URL:
            context.route(
                f"**{BUNDLE_URL}",
                lambda route: route.continue_(url=route.request.url.replace(BUNDLE_URL, bundle)),
            )
        context.add_init_script(MOMENTS_JS)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("response", lambda r: r.status < 400 or errors.append(f"{r.status} {r.url}"))
        parts: list[str] = []  # the requests for a part of the page (once each, preloaded)
        page.on("request", lambda r: "part=" in r.url and parts.append(r.url))
        page.goto(url, wait_until="commit")
        try:
            page.wait_for_function("() => window.__firstChart !== undefined", timeout=60_000)
        except Exception as problem:
            raise RuntimeError(f"No chart on {url} with {bundle}: {errors}") from problem
        return {**page.evaluate(MOMENTS), "parts": len(parts)}
    finally:
        context.close()


def measure(url: str, bundles: dict[str, str], loads: int) -> dict:
    """{(page, bundle): [moments of each load, ...]}"""
    found: dict = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM_EXECUTABLE, args=CHROMIUM_ARGS)
        state = signed_in(browser, url)
        for _name, path in PAGES:  # a first load of each, untimed: the server warms up
            cold_load(browser, state, url + path, BUNDLE_URL)
        for round_ in range(loads):
            for name, path in PAGES:
                order = list(bundles.items())
                shift = round_ % len(order)
                for label, bundle in order[shift:] + order[:shift]:
                    found.setdefault((name, label), []).append(
                        cold_load(browser, state, url + path, bundle)
                    )
        browser.close()
    return found


def report(found: dict, bundles: dict[str, Path]) -> None:
    for name, _path in PAGES:
        print(f"## {name}")
        medians = {}
        for label in bundles:
            loads = found[(name, label)]
            charts = [load["chart"] for load in loads]
            medians[label] = statistics.median(charts)
            html = statistics.median(load["html"] for load in loads)
            ready = statistics.median(load["plotly"] for load in loads)
            parsed = statistics.median(load["parsed"] for load in loads)
            bundle = statistics.median(load["bundle"] for load in loads)
            print(
                f"  {label:30s} first chart: median {medians[label]:5.0f} ms "
                f"(min {min(charts):5.0f}, max {max(charts):5.0f});   medians: HTML in at "
                f"{html:4.0f} ms, parsed {parsed:4.0f}, bundle in {bundle:4.0f}, "
                f"plotly.js run at {ready:5.0f} ms"
            )
        print(f"  (the page: {loads[0]['size'] / 1000:.0f} kB of HTML)")
        if loads[0].get("part") is not None:  # its charts came in a request of their own
            part = statistics.median(load["part"] for load in loads)
            asked = max(load["parts"] for load in loads)
            print(f"  (its charts: in at {part:4.0f} ms, median; asked {asked} time(s) a load)")
        ratio = medians["full plotly.js"] / medians["partial (vendored)"]
        verdict = "met" if medians["partial (vendored)"] <= GOAL_MS else "NOT met"
        print(f"  full / partial: {ratio:.2f}x; goal: first chart <= {GOAL_MS} ms: {verdict}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--loads", type=int, default=7, help="Cold loads per page and bundle.")
    parser.add_argument("--also", type=Path, action="append", default=[], help="Another build.")
    args = parser.parse_args()
    bundles = {
        "full plotly.js": FULL,
        "partial (vendored)": BUNDLE,
        **{f"also {path.name}": path.resolve() for path in args.also},
    }
    database = "PostgreSQL" if connection.vendor == "postgresql" else "SQLite (embedded)"
    print(f"# bench/first_chart.py — {database}, Python {platform.python_version()}")
    print(f"# {args.runs:,} runs over 30 days; {args.loads} cold loads per page and bundle")
    for label, path in bundles.items():
        print(f"#   {label:28s} {path.stat().st_size / 1e6:5.2f} MB  {path.name}")
    print(f"# load average before: {' '.join(f'{n:.1f}' for n in os.getloadavg())}\n")
    with own_databases(PLACE, logs="daphne's log is"):
        history(args.runs)
        connection.close()
        stack = WebOnly(log_dir=PLACE.var_dir / "logs")
        try:
            served = static_beside(bundles)
            stack.start()
            found = measure(stack.url, served, args.loads)
        finally:
            stack.stop()
    report(found, bundles)
    print(f"# load average after: {' '.join(f'{n:.1f}' for n in os.getloadavg())}")


if __name__ == "__main__":
    main()
