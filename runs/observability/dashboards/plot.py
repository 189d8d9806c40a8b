"""Building blocks of the dashboards' Plotly charts: units, links to the runs list, and
figures as JSON for static/js/dashboards.js.

Traces are plain dicts that ``plotly.graph_objects.Figure`` validates once; the page gets
the figure as JSON beside an empty div (no inline script, no CDN), and every point's
``customdata`` holds the address of the runs behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from plotly.io.json import to_json_plotly

OUTCOME_LABELS = {
    "completed": "Completed",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "rolled_back": "Rolled back",
}
STATE_COLORS = {
    "created": "#98a2b3",
    "planning": "#53b1fd",
    "waiting_for_answer": "#fdb022",
    "running": "#2a5bd7",
    "waiting_for_approval": "#f79009",
    "verifying": "#7a5af8",
    "completed": "#12b76a",
    "failed": "#f04438",
    "cancelled": "#98a2b3",
    "rolled_back": "#fdb022",
}
COLORWAY = ["#2a5bd7", "#12b76a", "#f79009", "#7a5af8", "#f04438", "#0ba5ec", "#ee46bc"]
CHANGE_COLORS = {"policy": "#b42318", "instructions": "#6941c6"}
DAY_MS = 86_400_000
GRID = "#e4e7ec"


@dataclass(frozen=True)
class Cell:
    """One cell of a chart's table: a number linked to the runs behind it, or plain text."""

    text: str
    url: str = ""


@dataclass
class Chart:
    key: str
    title: str
    note: str = ""
    figure: str = ""  # {"data": [...], "layout": {...}} as JSON; empty: nothing to draw
    empty: str = ""  # what the page says instead of an empty chart
    columns: list[str] = field(default_factory=list)
    rows: list[list[Cell]] = field(default_factory=list)


# --- units ---------------------------------------------------------------------------------
def human_ms(ms: float | None) -> str:
    """850 ms, 4.2 s, 45 s, 4.1 min, 2.5 h: the unit a person reads a wait in."""
    if ms is None:
        return "—"
    seconds = ms / 1000
    if seconds < 1:
        return f"{round(ms)} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def percent(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f} %"


def in_seconds(values: Sequence[int | None]) -> list[float | None]:
    return [None if v is None else v / 1000 for v in values]


def utc_naive(moment: datetime) -> str:
    """plotly.js reads no zone offsets: every moment on the axis is naive UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


# --- links ---------------------------------------------------------------------------------
class Links:
    """Addresses of the runs list: the page's own filters plus the figure's."""

    def __init__(self, *, agent: str = "", workspace: str = "", days: Sequence[date] = ()):
        self.base = {k: v for k, v in (("agent", agent), ("workspace", workspace)) if v}
        self.window = (
            {"finished_from": days[0].isoformat(), "finished_to": days[-1].isoformat()}
            if days
            else {}
        )
        self.root = reverse("runs:list")
        self._made: dict[tuple[tuple[str, str], ...], str] = {}  # a chart and its table agree

    def _url(self, params: dict[str, str]) -> str:
        key = tuple(params.items())
        url = self._made.get(key)
        if url is None:
            url = self._made[key] = f"{self.root}?{urlencode(params)}"
        return url

    def day(self, day: date, **extra: str) -> str:
        return self._url({**self.base, **extra, "finished": day.isoformat()})

    def whole(self, **extra: str) -> str:
        return self._url({**self.base, **extra, **self.window})

    def now(self, **extra: str) -> str:
        return self._url({**self.base, **extra})


def count_cell(n: int, url: str) -> Cell:
    return Cell(f"{n:,}", url if n else "")


# --- figures -------------------------------------------------------------------------------
def layout_base(**more: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "template": "none",  # the default theme costs ~8 ms per figure to copy
        "height": 300,
        "margin": {"l": 60, "r": 20, "t": 30, "b": 40},
        "font": {"family": "system-ui, sans-serif", "size": 12, "color": "#1d232b"},
        "paper_bgcolor": "#fff",
        "plot_bgcolor": "#fff",
        "colorway": COLORWAY,
        "hovermode": "closest",
        "showlegend": True,
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "yaxis": {"gridcolor": GRID, "rangemode": "tozero", "zeroline": False},
        "xaxis": {"gridcolor": GRID},
    }
    for key, value in more.items():
        layout[key] = {**layout[key], **value} if isinstance(layout.get(key), dict) else value
    return layout


def time_layout(days: Sequence[date], **more: Any) -> dict[str, Any]:
    start = datetime.combine(days[0], datetime.min.time())
    end = datetime.combine(days[-1] + timedelta(days=1), datetime.min.time())
    xaxis = {"type": "date", "range": [str(start), str(end)], "tickformat": "%b %d"}
    return layout_base(xaxis={**xaxis, "title": {"text": "UTC day"}}, **more)


def per_day(days: Sequence[date]) -> dict[str, Any]:
    """A value per UTC day, drawn at the day's middle: a policy change at 15:00 falls
    inside its day's bar, not between two bars."""
    return {
        "x": [d.isoformat() for d in days],
        "xperiod": DAY_MS,
        "xperiodalignment": "middle",
    }


def make_trace(kind: str, **props: Any) -> dict[str, Any]:
    """A trace as a plain dict (``marker_color`` and ``line_color`` as plotly spells them
    in its graph objects)."""
    for short, parent in (("marker_color", "marker"), ("line_color", "line")):
        if short in props:
            props[parent] = {**props.get(parent, {}), "color": props.pop(short)}
    return {"type": kind, **props}


def change_marks(changes: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], list[dict]]:
    """Policy and instruction changes as dotted vertical lines, with a hoverable marker at
    the top of each (on a hidden 0–1 axis, whatever the chart's own scale): a trace and
    the layout's shapes."""
    xs = [utc_naive(c["at"]) for c in changes]
    colors = [CHANGE_COLORS.get(c["kind"], "#475467") for c in changes]
    shapes = [
        {
            "type": "line",
            "x0": x,
            "x1": x,
            "xref": "x",
            "yref": "paper",
            "y0": 0,
            "y1": 1,
            "line": {"color": color, "width": 1, "dash": "dot"},
            "layer": "below",
        }
        for x, color in zip(xs, colors, strict=True)
    ]
    trace = {
        "type": "scatter",
        "x": xs,
        "y": [0.96] * len(xs),
        "yaxis": "y3",
        "mode": "markers",
        "name": "Policy / instruction changes",
        "marker": {"symbol": "triangle-down", "size": 10, "color": colors},
        "hovertext": [f"{c['label']} · {utc_naive(c['at'])} UTC" for c in changes],
        "hovertemplate": "%{hovertext}<extra></extra>",
        "cliponaxis": False,
    }
    return trace, shapes


def figure_json(
    traces: list[dict[str, Any]], layout: dict[str, Any], changes: Sequence[dict] = ()
) -> str:
    """The figure as JSON fit for a ``<script type="application/json">``: plotly escapes
    < > and /, this adds & (so no text in a label can end the element or open an entity).

    Traces are plain dicts serialised by plotly's own encoder without building a graph
    object: validating every figure cost more than computing the page's figures (the
    tests validate each chart against plotly's schema instead)."""
    if changes:
        trace, shapes = change_marks(changes)
        traces = [*traces, trace]
        layout = {
            **layout,
            "shapes": shapes,
            "yaxis3": {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
        }
    return to_json_plotly({"data": traces, "layout": layout}).replace("&", "\\u0026")
