"""The evals page in a real browser on a real daphne (SPEC E1, issue point 5): the pass rate
chart is drawn with the local plotly.js, one line per category, a click on a point opens
that suite run's page, and neither page logs a console error. The numbers behind the chart
are tested in test_eval_pages."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from evals.models import EvalResult, EvalSuiteRun
from tests.conftest import EVERYWHERE
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


def test_the_evals_page_draws_the_pass_rates_and_a_point_opens_its_suite(
    live_stack, page, client, personas
):
    now = datetime.now(UTC).replace(microsecond=0)
    older = finished_suite(
        now - timedelta(days=1), "replay", {"simple": (2, 3), "malicious": (1, 1)}
    )
    finished_suite(now, "anthropic", {"simple": (1, 1), "malicious": (0, 1)})
    errors = console_errors(page)
    login(page, live_stack, client, personas.ops)

    page.goto(f"{live_stack.url}/evals/")
    plot = page.locator("#chart-eval-pass-rate .js-plotly-plot")
    expect(plot).to_have_count(1, timeout=20_000)
    expect(plot.locator("svg.main-svg").first).to_be_visible()
    expect(plot.locator(".scatterlayer .trace")).to_have_count(2)  # simple and malicious
    expect(plot.locator(".legendtext")).to_have_text(["simple", "malicious"])

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
