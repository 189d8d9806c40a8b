"""The evals page's chart: pass rate per category, one point per finished suite run and
category, built on the server with the dashboards' building blocks
(runs.observability.dashboards.plot) and drawn by static/js/dashboards.js; a click on a
point opens that suite run's page.

The x axis is the suite runs themselves, labelled with their start (UTC), not a time
axis: with one suite a date axis zooms to a sub-millisecond range, and with a few suites
started minutes apart their points sit on top of each other. Each suite run is a slot,
and the categories' points sit side by side inside it (``scattermode: group``), so two
categories at the same rate never hide each other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC

from django.urls import reverse

from runs.observability.dashboards.plot import (
    Cell,
    Chart,
    figure_json,
    layout_base,
    make_trace,
    utc_naive,
)

from .models import EvalSuiteRun
from .selectors import PassRates

MODEL_SYMBOLS = {"replay": "circle", "anthropic": "diamond"}


def suite_labels(suites: Sequence[EvalSuiteRun]) -> list[str]:
    """Each suite run's slot on the axis: its start to the minute ("2026-03-02 12:00"), to the
    second where two share a minute, and numbered where two share a second (a category
    axis merges equal labels)."""
    moments = [s.started_at.astimezone(UTC) for s in suites]
    labels = [f"{m:%Y-%m-%d %H:%M}" for m in moments]
    clash = Counter(labels)
    labels = [
        f"{m:%Y-%m-%d %H:%M:%S}" if clash[label] > 1 else label
        for m, label in zip(moments, labels, strict=True)
    ]
    seen: Counter[str] = Counter()
    unique = []
    for label in labels:
        seen[label] += 1
        unique.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return unique


def pass_rate_chart(data: PassRates) -> Chart:
    """x: each finished suite run (oldest first), y: % of a category's judged cases that
    passed; a suite that did not run a category has no point for it. Replay and Anthropic
    suites share the lines, told apart by the marker."""
    urls = {s.pk: reverse("evals:suite", kwargs={"suite_id": s.pk}) for s in data.suites}
    labels = suite_labels(data.suites)
    slot = {s.pk: label for s, label in zip(data.suites, labels, strict=True)}
    traces = []
    for category, rates in data.rates.items():
        suites = [s for s in data.suites if s.pk in rates]
        traces.append(
            make_trace(
                "scatter",
                x=[slot[s.pk] for s in suites],
                y=[rates[s.pk].percent for s in suites],
                name=category,
                mode="lines+markers",
                marker={
                    "symbol": [MODEL_SYMBOLS.get(s.model, "square") for s in suites],
                    "size": 9,
                },
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
        xaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": labels,
            "title": {"text": "suite run (start, UTC)"},
            "automargin": True,
        },
        yaxis={"range": [-5, 105], "ticksuffix": " %", "title": {"text": "passed"}},
        scattermode="group",
        scattergap=0.3,
    )
    return Chart(
        key="eval-pass-rate",
        title="Pass rate per category",
        note=(
            f"The last {len(data.suites)} finished suite runs, oldest first"
            if len(data.suites) != 1
            else "The one finished suite run"
        )
        + "; circles are offline replay, diamonds the Anthropic API. Click a point to open "
        "its suite run.",
        figure=figure_json(traces, layout) if traces else "",
        empty="No finished suite run has results yet: start one above, or run manage.py run_evals.",
        columns=["Suite run", *categories],
        rows=rows if traces else [],
    )
