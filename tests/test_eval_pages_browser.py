"""The evals page in a real browser on a real daphne (SPEC E1, issue 19 point 4): the pass
rate chart is drawn with the local plotly.js, one line per category, each suite a slot
labelled with its start and no point hiding another, a click on a point opens that suite
run's page; ops start a suite from the page and watch it progress live to its report; and
no page logs a console error. The numbers behind the chart, and every refusal of the start
form, are tested in test_eval_pages and test_eval_start."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from evals.models import EvalResult, EvalSuiteRun
from tests.conftest import EVERYWHERE, ROOT
from tests.helpers import console_errors, login

pytestmark = [EVERYWHERE, pytest.mark.browser]


def finished_suite(started: datetime, model: str, passed: dict[str, tuple[int, int]]):
    suite = EvalSuiteRun.objects.create(model=model, status="finished")
    EvalSuiteRun.objects.filter(pk=suite.pk).update(started_at=started)
    for category, (ok, total) in passed.items():
        for i in range(total):
            EvalResult.objects.create(
                suite=suite,
                case=f"{category}-{i}",
                category=category,
                passed=i < ok,
                failures=[] if i < ok else ["ended failed; expected completed"],
            )
    return suite


def overlapping(boxes: list[dict]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, a in enumerate(boxes)
        for j, b in enumerate(boxes[i + 1 :], i + 1)
        if a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    ]


def test_the_evals_page_draws_the_pass_rates_and_a_point_opens_its_suite(
    live_stack, page, client, personas
):
    """Three suites, two of them 30 s apart with both categories at 100 %: each suite is
    a slot labelled with its start, and no point hides another."""
    from evals.charts import suite_labels

    now = datetime.now(UTC).replace(microsecond=0)
    older = finished_suite(
        now - timedelta(days=1), "replay", {"simple": (2, 3), "malicious": (1, 1)}
    )
    everything = {"simple": (1, 1), "malicious": (1, 1)}
    close = finished_suite(now - timedelta(seconds=30), "replay", everything)
    newest = finished_suite(now, "anthropic", {"simple": (1, 1), "malicious": (0, 1)})
    labels = suite_labels(list(EvalSuiteRun.objects.order_by("started_at")))
    assert len(labels) == 3 and close.pk != newest.pk
    errors = console_errors(page)
    login(page, live_stack, client, personas.ops)

    page.goto(f"{live_stack.url}/evals/")
    plot = page.locator("#chart-eval-pass-rate .js-plotly-plot")
    expect(plot).to_have_count(1, timeout=20_000)
    expect(plot.locator("svg.main-svg").first).to_be_visible()
    expect(plot.locator(".scatterlayer .trace")).to_have_count(2)  # simple and malicious
    expect(plot.locator(".legendtext")).to_have_text(["simple", "malicious"])
    expect(plot.locator(".xtick text")).to_have_text(labels)  # dates and times, readable
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?", label) for label in labels)
    points = plot.locator(".scatterlayer .trace .points path")
    expect(points).to_have_count(6)
    boxes = [points.nth(i).bounding_box() for i in range(6)]
    assert all(boxes) and overlapping(boxes) == [], boxes

    point = plot.locator(".scatterlayer .trace").first.locator(".points path").first
    box = point.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.wait_for_timeout(100)
    page.mouse.click(x, y)
    expect(page).to_have_url(re.compile(rf"/evals/{older.pk}/$"), timeout=10_000)
    expect(page.locator("#eval-category-simple tr.eval-failed")).to_have_count(1)
    assert errors == []


@pytest.mark.usefixtures("seeded")
def test_ops_start_a_suite_from_the_page_and_watch_it_reach_its_report(
    live_stack, page, client, personas
):
    """The suite runs in the stack's workers (the simple category: the shipped files); the
    page follows it over its WebSocket, without a reload, to the link to its report."""
    cases = len(list((ROOT / "evals" / "cases" / "simple").glob("*.json")))
    errors = console_errors(page)
    login(page, live_stack, client, personas.ops)
    page.goto(f"{live_stack.url}/evals/")
    expect(page.locator("#eval-live-status")).to_have_text("live", timeout=10_000)
    expect(page.locator("#eval-progress-none")).to_be_visible()
    page.select_option("#id_category", "simple")
    page.locator("#eval-start-form button[type=submit]").click()

    expect(page).to_have_url(re.compile(r"/evals/#eval-run$"))
    page.evaluate("window.sameDocument = true")  # gone if anything reloads the page
    progress = page.locator("#eval-progress")
    expect(page.locator("#eval-start-action button")).to_be_disabled()
    expect(progress).to_have_attribute("data-status", "finished", timeout=180_000)
    done = page.locator("#eval-progress-done")
    expect(done).to_have_text(f"{cases} of {cases}")
    expect(page.locator("#eval-progress-passed")).to_have_text(f"{cases} passed")
    expect(page.locator("#eval-progress-failed")).to_have_text("0 failed")
    expect(page.locator("#eval-start-action button")).to_be_enabled()
    assert page.evaluate("window.sameDocument") is True
    suite = EvalSuiteRun.objects.get()
    assert (suite.started_by, suite.category, suite.total) == ("olga-ops", "simple", cases)
    assert suite.worker.startswith(f"test-{live_stack.port}-housekeeping")

    page.locator("#eval-progress-report").click()
    expect(page).to_have_url(re.compile(rf"/evals/{suite.pk}/$"))
    expect(page.locator("#eval-category-simple tr.eval-passed")).to_have_count(cases)
    assert errors == []
