"""The evals page's chart: pass rate per category over time, one line per category, built
on the server with the dashboards' building blocks (runs.observability.dashboards.plot) and drawn by
static/js/dashboards.js; a click on a point opens that suite run's page."""

from __future__ import annotations

from django.urls import reverse

from runs.observability.dashboards.plot import (
    Cell,
    Chart,
    figure_json,
    layout_base,
    make_trace,
    utc_naive,
)

from .selectors import PassRates

MODEL_SYMBOLS = {"replay": "circle", "anthropic": "diamond"}


def pass_rate_chart(data: PassRates) -> Chart:
    """x: each finished suite run's start (UTC), y: % of a category's judged cases that
    passed; a suite that did not run a category has no point on its line. Replay and
    Anthropic suites share the lines, told apart by the marker."""
    urls = {s.pk: reverse("evals:suite", kwargs={"suite_id": s.pk}) for s in data.suites}
    traces = []
    for category, rates in data.rates.items():
        suites = [s for s in data.suites if s.pk in rates]
        traces.append(
            make_trace(
                "scatter",
                x=[utc_naive(s.started_at) for s in suites],
                y=[rates[s.pk].percent for s in suites],
                name=category,
                mode="lines+markers",
                marker={"symbol": [MODEL_SYMBOLS.get(s.model, "square") for s in suites]},
                customdata=[urls[s.pk] for s in suites],
                hovertext=[
                    f"{category}: {rates[s.pk].passed}/{rates[s.pk].total} passed "
                    f"({rates[s.pk].percent:g} %) · {s.model} · {utc_naive(s.started_at)} UTC"
                    for s in suites
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    categories = list(data.rates)
    rows = [
        [Cell(f"{utc_naive(s.started_at)} UTC · {s.model}")]
        + [
            Cell(f"{r.passed}/{r.total} ({r.percent:g} %)", urls[s.pk])
            if (r := data.rates[c].get(s.pk))
            else Cell("—")
            for c in categories
        ]
        for s in reversed(data.suites)
    ]
    layout = layout_base(
        xaxis={"type": "date", "title": {"text": "suite start (UTC)"}},
        yaxis={"range": [0, 105], "ticksuffix": " %", "title": {"text": "passed"}},
    )
    return Chart(
        key="eval-pass-rate",
        title="Pass rate per category",
        note=f"The last {len(data.suites)} finished suite runs; circles are offline replay, "
        "diamonds the Anthropic API. Click a point to open its suite run.",
        figure=figure_json(traces, layout) if traces else "",
        empty="No finished suite run has results yet: run manage.py run_evals.",
        columns=["Suite run", *categories],
        rows=rows if traces else [],
    )
