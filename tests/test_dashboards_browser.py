"""The dashboards in a real browser on a real daphne, runs in a real Celery worker (issue 7
points 5 and 6, SPEC O5, O6, L2): the retrospective draws every chart with the local
plotly.js and its links open the runs behind them; the operations dashboard follows a run
live, without a reload; neither page logs a console error."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from approvals.models import ApprovalRequest
from runs.approval_outcomes import approval_decide
from runs.observability.synthetic import synthetic_runs_generate
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.helpers import FIX, console_errors, login
from tests.stack import off_loop

pytestmark = [EVERYWHERE, pytest.mark.browser]

CHARTS = 9  # one per figure of the retrospective


def click_plot_point(page: Page, chart: str) -> None:
    """A person's click on a chart's first bar: plotly finds the point under the pointer
    (its drag layer lies on top of the bars), then fires plotly_click."""
    bar = page.locator(f"#chart-{chart} .bars .point path").first
    bar.scroll_into_view_if_needed()
    box = bar.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.wait_for_timeout(100)
    page.mouse.click(x, y)


def test_the_retrospective_draws_every_chart_and_its_links_open_their_runs(
    live_stack, page, client, personas, agent, workspace
):
    off_loop(
        synthetic_runs_generate,
        runs=300,
        days=30,
        seed=11,
        requester=personas.operator,
        approvers=[personas.approver],
    )
    errors = console_errors(page)
    login(page, live_stack, client, personas.ops)
    page.goto(f"{live_stack.url}/dashboards/retro/?days=30")
    plots = page.locator(".js-plotly-plot")
    expect(plots).to_have_count(CHARTS, timeout=20_000)
    for i in range(CHARTS):
        expect(plots.nth(i).locator("svg.main-svg").first).to_be_visible()
    expect(page.locator("#chart-runs-per-day .bars .point path").first).to_be_visible()

    # The table under a chart: the same runs, without the chart.
    chart = page.locator("#chart-runs-per-day")
    chart.locator("summary").click()
    link = chart.locator("table.chart-data a").first
    count = link.inner_text().replace(",", "")
    link.click()
    expect(page).to_have_url(re.compile(r"/runs/\?.*finished=\d{4}-\d\d-\d\d"))
    expect(page.locator("#run-count")).to_have_attribute("data-total", count)
    expect(page.locator("#run-filters-said")).to_contain_text("finished on")

    # A click on a bar opens the runs behind it.
    page.go_back()
    expect(plots).to_have_count(CHARTS, timeout=20_000)
    top = page.locator("#chart-failure-reasons table.chart-data a").first.text_content()
    click_plot_point(page, "failure-reasons")
    expect(page).to_have_url(re.compile(r"/runs/\?.*status=failed.*failure_kind=\w+"))
    expect(page.locator("#run-count")).to_have_attribute("data-total", top)
    assert errors == []


def test_the_retrospective_says_when_its_figures_cannot_be_read(live_stack, page, client, personas):
    """The charts come in a request of their own: when it fails, the page says so in
    place of the charts, instead of waiting for ever."""
    login(page, live_stack, client, personas.ops)
    page.route("**/dashboards/retro/?*part=charts*", lambda route: route.fulfill(status=500))
    page.goto(f"{live_stack.url}/dashboards/retro/?days=7")
    said = page.locator("#retro-loading")
    expect(said).to_have_text("The figures could not be read; reload the page to try again.")
    expect(said).to_have_attribute("role", "alert")
    expect(page.locator("#retro-charts")).not_to_have_attribute("aria-busy", "true")
    expect(page.locator(".js-plotly-plot")).to_have_count(0)


@pytest.mark.usefixtures("seeded")
def test_the_ops_dashboard_follows_a_run_live_without_a_reload(
    live_stack, page, client, personas, agent, workspace, docs
):
    errors = console_errors(page)
    login(page, live_stack, client, personas.ops)
    page.goto(f"{live_stack.url}/dashboards/ops/")
    expect(page.locator("#ops-live-status")).to_have_text("live", timeout=10_000)
    expect(page.locator(".js-plotly-plot svg.main-svg").first).to_be_visible()
    page.evaluate("window.notReloaded = true")
    waiting = page.locator('td[data-status="waiting_for_approval"]')
    finished = page.locator("#ops-finished-total")
    expect(waiting).to_have_text("0")
    expect(finished).to_have_text("0")
    updated = page.locator("#ops-updated").get_attribute("datetime")

    run = off_loop(
        run_create, agent=agent, workspace=workspace, requester=personas.operator, request=FIX
    )
    # Sooner than the page's 30 s poll: the socket's notice brought it.
    expect(waiting).to_have_text("1", timeout=20_000)  # the worker took it; it asks to commit
    expect(page.locator("#ops-waiting-runs")).to_have_text("1")
    expect(page.locator(f'#ops-oldest-wait a[href="/runs/{run.pk}/"]')).to_be_visible()
    assert page.locator("#ops-updated").get_attribute("datetime") != updated

    approval = off_loop(lambda: ApprovalRequest.objects.get(run=run))
    off_loop(
        approval_decide,
        approval=approval,
        user=personas.approver,
        decision="approve",
        digest=approval.digest,
    )
    expect(finished).to_have_text("1", timeout=20_000)
    expect(page.locator('td[data-status="completed"]')).to_have_text("1")
    expect(waiting).to_have_text("0")
    expect(page.locator("#ops-oldest-wait")).to_have_text("Nothing is waiting for a decision.")
    expect(page.locator(".js-plotly-plot svg.main-svg").first).to_be_visible()  # redrawn
    assert page.evaluate("window.notReloaded") is True
    assert errors == []
