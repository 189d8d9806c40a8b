"""The dashboards' charts, built on the server from the plain figures of ``figures.py``.

Each chart goes to the page as JSON (drawn by static/js/dashboards.js with the local
plotly.js) together with a table of the same numbers. Every bar and point carries, in
``customdata``, the address of the runs list narrowed to exactly the runs behind it
(runs.run_filters), and the table links the same lists: clicking a chart and reading its
table lead to the same runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ...core import status as run_status
from ...templatetags.money import usd
from ..core.retro import SHOWN_OUTCOMES, Retro
from .figures import Ops
from .plot import (
    COLORWAY,
    OUTCOME_LABELS,
    STATE_COLORS,
    Cell,
    Chart,
    Links,
    count_cell,
    figure_json,
    human_ms,
    in_seconds,
    layout_base,
    make_trace,
    per_day,
    percent,
    time_layout,
)


@dataclass
class RetroPage:
    headline: list[dict[str, str]]
    charts: list[Chart]
    changes: list[dict[str, Any]]
    finished: int


# --- the retrospective ----------------------------------------------------------------------
def _runs_per_day(r: Retro, links: Links) -> Chart:
    traces = [
        make_trace(
            "bar",
            **per_day(r.days),
            y=r.runs[o],
            name=OUTCOME_LABELS[o],
            marker_color=STATE_COLORS[o],
            customdata=[links.day(d, status=o) for d in r.days],
            hovertext=[
                f"{d:%b %d}: {n} {OUTCOME_LABELS[o].lower()}"
                for d, n in zip(r.days, r.runs[o], strict=True)
            ],
            hovertemplate="%{hovertext}<extra></extra>",
        )
        for o in SHOWN_OUTCOMES
    ]
    rows = [
        [Cell(d.isoformat())]
        + [count_cell(r.runs[o][i], links.day(d, status=o)) for o in SHOWN_OUTCOMES]
        + [count_cell(sum(r.runs[o][i] for o in SHOWN_OUTCOMES), links.day(d))]
        for i, d in enumerate(r.days)
    ]
    return Chart(
        key="runs-per-day",
        title="Runs per day by outcome",
        note="Runs that finished each UTC day.",
        figure=figure_json(traces, time_layout(r.days, barmode="stack"), r.changes),
        columns=["Day", *OUTCOME_LABELS.values(), "Finished"],
        rows=rows,
    )


def _success_rate(r: Retro, links: Links) -> Chart:
    finished = [sum(r.runs[o][i] for o in SHOWN_OUTCOMES) for i in range(len(r.days))]
    counted = [n - r.runs["cancelled"][i] for i, n in enumerate(finished)]
    trace = make_trace(
        "scatter",
        **per_day(r.days),
        y=[None if s is None else s * 100 for s in r.success_rate],
        mode="lines+markers",
        name="Success rate",
        line_color=STATE_COLORS["completed"],
        customdata=[links.day(d) for d in r.days],
        hovertext=[
            f"{d:%b %d}: {percent(s)} of {n}"
            for d, s, n in zip(r.days, r.success_rate, counted, strict=True)
        ],
        hovertemplate="%{hovertext}<extra></extra>",
    )
    layout = time_layout(r.days, yaxis={"range": [0, 105], "ticksuffix": " %"})
    rows = [
        [
            Cell(d.isoformat()),
            count_cell(r.runs["completed"][i], links.day(d, status="completed")),
            count_cell(finished[i], links.day(d)),
            count_cell(r.runs["cancelled"][i], links.day(d, status="cancelled")),
            Cell(percent(r.success_rate[i])),
        ]
        for i, d in enumerate(r.days)
    ]
    return Chart(
        key="success-rate",
        title="Success rate",
        note="Completed runs out of the runs that finished that day, cancelled ones left out.",
        figure=figure_json([trace], layout, r.changes),
        columns=["Day", "Completed", "Finished", "Cancelled", "Success rate"],
        rows=rows,
    )


def _failures(r: Retro, links: Links) -> Chart:
    chart = Chart(
        key="failure-reasons",
        title="Failure reasons (Pareto)",
        note="Failed runs by reason over the window, most frequent first.",
        columns=["Reason", "Failed runs", "Cumulative"],
    )
    if not r.failures:
        chart.empty = "No run failed in this window."
        return chart
    total = sum(n for _kind, _label, n in r.failures)
    urls = [links.whole(status="failed", failure_kind=kind) for kind, _label, _n in r.failures]
    labels = [label for _kind, label, _n in r.failures]
    counts = [n for _kind, _label, n in r.failures]
    cumulative, seen = [], 0
    for n in counts:
        seen += n
        cumulative.append(seen / total * 100)
    traces = [
        make_trace(
            "bar",
            x=labels,
            y=counts,
            name="Failed runs",
            marker_color=STATE_COLORS["failed"],
            customdata=urls,
            hovertemplate="%{x}: %{y} runs<extra></extra>",
        ),
        make_trace(
            "scatter",
            x=labels,
            y=cumulative,
            yaxis="y2",
            mode="lines+markers",
            name="Cumulative share",
            line_color="#475467",
            customdata=urls,
            hovertemplate="%{x}: %{y:.0f} % cumulative<extra></extra>",
        ),
    ]
    layout = layout_base(
        yaxis2={
            "overlaying": "y",
            "side": "right",
            "range": [0, 105],
            "tickvals": [0, 25, 50, 75, 100],
            "ticksuffix": " %",
            "showgrid": False,
        },
        margin={"b": 90, "r": 60},  # room for the right axis's "100 %"
        xaxis={"tickangle": -30},
    )
    chart.figure = figure_json(traces, layout)
    chart.rows = [
        [Cell(label), count_cell(n, url), Cell(f"{c:.0f} %")]
        for label, n, url, c in zip(labels, counts, urls, cumulative, strict=True)
    ]
    return chart


def _by_model(r: Retro, links: Links, *, cost: bool) -> Chart:
    series: dict[tuple[str, str], list[Any]] = dict(r.cost) if cost else dict(r.tokens)
    chart = Chart(
        key="cost-per-day" if cost else "tokens-per-day",
        title="Cost per day by agent · model" if cost else "Tokens per day by agent · model",
        note=(
            "Dollars at the price in force for each call; unpriced calls count as $0."
            if cost
            else "Input, output and cache tokens of every model call."
        ),
        columns=["Agent · model", "Cost" if cost else "Tokens", "Runs"],
    )
    if not series:
        chart.empty = "No model call in this window."
        return chart
    traces = []
    for (agent, model), values in series.items():
        ys = [float(v) for v in values]
        traces.append(
            make_trace(
                "bar",
                **per_day(r.days),
                y=ys,
                name=f"{agent} · {model}",
                customdata=[links.day(d, agent=agent, model=model) for d in r.days],
                hovertext=[
                    f"{d:%b %d} · {agent} · {model}: "
                    + (usd(Decimal(v)) if cost else f"{int(v):,} tokens")
                    for d, v in zip(r.days, values, strict=True)
                ],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
        whole = sum(values, Decimal(0)) if cost else sum(values)
        chart.rows.append(
            [
                Cell(f"{agent} · {model}"),
                Cell(usd(whole) if cost else f"{whole:,}"),
                Cell("runs", links.whole(agent=agent, model=model)),
            ]
        )
    yaxis = {"tickprefix": "$"} if cost else {"title": {"text": "tokens"}}
    chart.figure = figure_json(traces, time_layout(r.days, barmode="stack", yaxis=yaxis), r.changes)
    return chart


def _tools(r: Retro, links: Links) -> Chart:
    chart = Chart(
        key="tool-errors",
        title="Tool error rate by tool",
        note="Errors and timeouts out of the calls that ran (refused calls never ran).",
        columns=["Tool", "Calls", "Errors", "Refused", "Error rate", "Runs behind them"],
    )
    if not r.tools:
        chart.empty = "No tool call in this window."
        return chart
    names = [t["tool"] for t in r.tools]
    urls = [links.whole(tool=t["tool"], tool_status="error") for t in r.tools]
    trace = make_trace(
        "bar",
        x=names,
        y=[(t["error_rate"] or 0) * 100 for t in r.tools],
        name="Error rate",
        marker_color=STATE_COLORS["failed"],
        customdata=urls,
        hovertext=[
            f"{t['tool']}: {percent(t['error_rate'])} "
            f"({t['errors']} of {t['calls'] - t['refused']} calls that ran)"
            for t in r.tools
        ],
        hovertemplate="%{hovertext}<extra></extra>",
    )
    chart.figure = figure_json([trace], layout_base(yaxis={"ticksuffix": " %"}, showlegend=False))
    # The counts are calls (a run may make several); the links list the runs behind them.
    chart.rows = [
        [
            Cell(t["tool"]),
            Cell(f"{t['calls']:,}"),
            Cell(f"{t['errors']:,}"),
            Cell(f"{t['refused']:,}"),
            Cell(percent(t["error_rate"])),
            Cell("with errors", url)
            if t["errors"]
            else Cell("with calls", links.whole(tool=t["tool"])),
        ]
        for t, url in zip(r.tools, urls, strict=True)
    ]
    return chart


def _percentiles(
    r: Retro, links: Links, *, key: str, title: str, note: str, p50: list, p95: list, **only: str
) -> Chart:
    chart = Chart(key=key, title=title, note=note, columns=["Day", "p50", "p95", "Runs"])
    if all(v is None for v in p50):
        chart.empty = (
            "No approval was decided by a person in this window."
            if only
            else "No run finished in this window."
        )
        return chart
    urls = [links.day(d, **only) for d in r.days]
    traces = [
        make_trace(
            "scatter",
            **per_day(r.days),
            y=in_seconds(values),
            mode="lines+markers",
            name=name,
            customdata=urls,
            hovertext=[
                f"{d:%b %d} {name}: {human_ms(v)}" for d, v in zip(r.days, values, strict=True)
            ],
            hovertemplate="%{hovertext}<extra></extra>",
            connectgaps=False,
        )
        for name, values in (("p50", p50), ("p95", p95))
    ]
    layout = time_layout(r.days, yaxis={"title": {"text": "seconds"}})
    chart.figure = figure_json(traces, layout, r.changes)
    chart.rows = [
        [Cell(d.isoformat()), Cell(human_ms(a)), Cell(human_ms(b)), Cell("runs", url)]
        for d, a, b, url in zip(r.days, p50, p95, urls, strict=True)
        if a is not None
    ]
    return chart


def _escapes(r: Retro, links: Links) -> Chart:
    chart = Chart(
        key="escape-rate",
        title="Verification escape rate",
        note="Runs that passed verification and were rolled back later, out of those that passed.",
        columns=["Day", "Passed verification", "Rolled back later", "Escape rate"],
    )
    if not any(r.verified):
        chart.empty = "No run passed verification in this window."
        return chart
    escaped = {"verification": "pass", "status": run_status.ROLLED_BACK}
    rates = r.escape_rate
    trace = make_trace(
        "scatter",
        **per_day(r.days),
        y=[None if e is None else e * 100 for e in rates],
        mode="lines+markers",
        name="Escape rate",
        line_color=STATE_COLORS["rolled_back"],
        customdata=[links.day(d, **escaped) for d in r.days],
        hovertext=[
            f"{d:%b %d}: {percent(e)} ({x} of {v})"
            for d, e, x, v in zip(r.days, rates, r.escaped, r.verified, strict=True)
        ],
        hovertemplate="%{hovertext}<extra></extra>",
    )
    layout = time_layout(r.days, yaxis={"ticksuffix": " %"}, showlegend=False)
    chart.figure = figure_json([trace], layout, r.changes)
    chart.rows = [
        [
            Cell(d.isoformat()),
            count_cell(r.verified[i], links.day(d, verification="pass")),
            count_cell(r.escaped[i], links.day(d, **escaped)),
            Cell(percent(rates[i])),
        ]
        for i, d in enumerate(r.days)
        if r.verified[i]
    ]
    return chart


def _headline(r: Retro, links: Links) -> list[dict[str, str]]:
    t = r.totals
    priced = [
        f"{n:,} call{'s' if n != 1 else ''} {what}"
        for n, what in ((t["estimated_calls"], "estimated"), (t["unpriced_calls"], "unpriced"))
        if n
    ]
    escape = t["escaped"] / t["verified"] if t["verified"] else None
    return [
        {
            "key": "runs",
            "label": "Runs finished",
            "value": f"{t['finished']:,}",
            "detail": f"{t['completed']:,} completed · {t['failed']:,} failed · "
            f"{t['cancelled']:,} cancelled · {t['rolled_back']:,} rolled back",
            "url": links.whole(),
        },
        {
            "key": "success",
            "label": "Success rate",
            "value": percent(t["success_rate"]),
            "detail": "completed out of finished, cancelled left out",
            "url": links.whole(status="completed"),
        },
        {
            "key": "cost",
            "label": "Cost",
            "value": usd(t["cost"]),
            "detail": ", ".join(priced),
            "url": "",
        },
        {
            "key": "tokens",
            "label": "Tokens",
            "value": f"{t['tokens']:,}",
            "detail": f"{t['model_calls']:,} model calls",
            "url": "",
        },
        {
            "key": "approval",
            "label": "Approval wait p50 / p95",
            "value": f"{human_ms(t['approval_p50'])} / {human_ms(t['approval_p95'])}",
            "detail": f"{t['approvals']:,} requests; runs with a decision →",
            "url": links.whole(approval="decided"),
        },
        {
            "key": "duration",
            "label": "Run duration p50 / p95",
            "value": f"{human_ms(t['duration_p50'])} / {human_ms(t['duration_p95'])}",
            "detail": "created to finished",
            "url": "",
        },
        {
            "key": "escape",
            "label": "Verification escapes",
            "value": percent(escape),
            "detail": f"{t['escaped']:,} of {t['verified']:,} verified runs rolled back",
            "url": links.whole(verification="pass", status=run_status.ROLLED_BACK),
        },
    ]


def retro_page(retro: Retro, *, agent: str = "", workspace: str = "") -> RetroPage:
    """Headline totals and every chart of the retrospective, linked to their runs."""
    links = Links(agent=agent, workspace=workspace, days=retro.days)
    charts: list[Chart] = []
    if retro.totals["finished"]:
        charts = [
            _runs_per_day(retro, links),
            _success_rate(retro, links),
            _failures(retro, links),
            _by_model(retro, links, cost=True),
            _by_model(retro, links, cost=False),
            _tools(retro, links),
            _percentiles(
                retro,
                links,
                key="approval-latency",
                title="Approval wait p50 / p95",
                note="From the request to a person's decision, per day the run finished.",
                p50=retro.approval_p50,
                p95=retro.approval_p95,
                approval="decided",
            ),
            _percentiles(
                retro,
                links,
                key="run-duration",
                title="Run duration p50 / p95",
                note="From creation to the end, per day the run finished.",
                p50=retro.duration_p50,
                p95=retro.duration_p95,
            ),
            _escapes(retro, links),
        ]
    return RetroPage(
        headline=_headline(retro, links),
        charts=charts,
        changes=retro.changes,
        finished=retro.totals["finished"],
    )


# --- operations ----------------------------------------------------------------------------
def ops_chart(ops: Ops) -> Chart:
    """Live runs per state now, each bar linked to the runs in that state."""
    links = Links()
    states = list(ops.live)
    trace = make_trace(
        "bar",
        x=[s.replace("_", " ") for s in states],
        y=[ops.live[s] for s in states],
        marker_color=[STATE_COLORS.get(s, COLORWAY[0]) for s in states],
        customdata=[links.now(status=s) for s in states],
        hovertemplate="%{x}: %{y} runs<extra></extra>",
        name="Runs now",
    )
    few = max(ops.live.values(), default=0) < 6
    layout = layout_base(height=240, showlegend=False, yaxis={"dtick": 1} if few else {})
    if not any(ops.live.values()):
        layout["annotations"] = [
            {
                "text": "No run is live right now.",
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.6,
                "showarrow": False,
                "font": {"color": "#5d6875", "size": 14},
            }
        ]
    return Chart(key="ops-states", title="Runs per state now", figure=figure_json([trace], layout))
