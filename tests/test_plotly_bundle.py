"""The vendored partial plotly.js (issue 19 point 6): the version the plotly package writes
its figures for, named in its README, and in Chromium every chart of the console drawn by
it with every trace type registered. Each chart's own tests check its figures against the
bundle's trace types in-process (tests/plotly_bundle.py ``assert_drawable``)."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.contrib.staticfiles import finders
from playwright.sync_api import Page, expect

from policies.models import LayerConfig
from runs.models import ModelCall
from runs.observability.synthetic import synthetic_runs_generate
from tests.conftest import EVERYWHERE, ROOT
from tests.helpers import console_errors, eval_history, login
from tests.plotly_bundle import (
    BUNDLE,
    UNREGISTERED_JS,
    bundle_traces,
    bundle_version,
)
from tests.stack import off_loop

DRAWN_JS = """() => [...document.querySelectorAll('.js-plotly-plot')]
    .every((div) => div.querySelector('.main-svg') !== null)"""


def test_the_vendored_plotly_is_the_version_the_plotly_package_writes_figures_for():
    import plotly.offline

    assert bundle_version() == plotly.offline.get_plotlyjs_version()
    assert {"bar", "scatter"} <= bundle_traces()


def test_the_vendored_file_is_the_one_its_readme_names():
    readme = (BUNDLE.parent / "README.md").read_text()
    digest = hashlib.sha256(BUNDLE.read_bytes()).hexdigest()
    assert f"sha256 is `{digest}`" in readme
    assert f"plotly.js-basic-dist-min@{bundle_version()}" in readme
    assert (BUNDLE.parent / "plotly.js-LICENSE").read_text().startswith("MIT License")


def test_every_static_file_a_template_names_exists():
    """A renamed bundle (or a typo) would leave a page without its charts, silently."""
    named = {
        path
        for template in (ROOT / "templates").rglob("*.html")
        for path in re.findall(r"{% static '([^']+)' %}", template.read_text())
    }
    assert "vendor/plotly-basic.min.js" in named
    assert [path for path in sorted(named) if not finders.find(path)] == []


@EVERYWHERE
@pytest.mark.browser
def test_every_chart_of_the_console_draws_with_the_vendored_bundle(
    live_stack, page: Page, client, personas, agent, workspace, run
):
    """Each page with charts, in Chromium: every chart drawn, no trace of a type this
    Plotly has not registered (it would skip it without an error), no console error; and
    the bundle registers exactly the traces tests/plotly_bundle.py reads from the file."""
    off_loop(
        synthetic_runs_generate,
        runs=120,
        days=30,
        seed=19,
        requester=personas.operator,
        approvers=[personas.approver],
    )
    off_loop(eval_history, suites=3)
    layers = {"name": "identity", "tokens": 40, "budget": 2000, "truncated": [], "dropped": []}
    ModelCall.objects.create(run=run, turn=1, model="claude-test", context={"layers": [layers]})
    LayerConfig.objects.create(agent=agent, name="business_rules", budget=0)
    errors = console_errors(page)
    login(page, live_stack, client, personas.admin)
    pages = {
        "/dashboards/retro/?days=30": 9,
        "/dashboards/ops/": 1,
        "/evals/": 1,
        f"/runs/{run.pk}/": 1,
        f"/admin/policies/agent/{agent.pk}/preview/?workspace={workspace.pk}": 1,
    }
    for path, at_least in pages.items():
        page.goto(f"{live_stack.url}{path}")
        figures = page.locator('script[type="application/json"][id$="-figure"]')
        expect(figures.nth(at_least - 1)).to_be_attached()  # the retrospective's come after
        assert figures.count() >= at_least, path
        expect(page.locator(".js-plotly-plot")).to_have_count(figures.count())
        # Plotly marks the div at once and may draw it a moment later (its newPlot is a
        # promise; the run page draws again when its panel is swapped in): wait for every
        # chart's SVG, then read them. A chart that never draws fails the wait.
        page.wait_for_function(DRAWN_JS, timeout=20_000)
        charts = page.evaluate(UNREGISTERED_JS)
        assert len(charts) == figures.count(), path
        assert [c for c in charts if not c["drawn"] or c["unregistered"]] == [], path
    registered = page.evaluate("() => Object.keys(Plotly.PlotSchema.get().traces)")
    assert set(registered) == bundle_traces()
    assert errors == []
