"""The prompt preview's chart (SPEC C8): each layer against its own budget, and the units
it dropped or cut marked beside it.

Budgets differ by two orders of magnitude (the instruction files get 24,000 tokens, the
output schema 1,000): on one token axis the small layers were slivers. So each layer's
bar is its share of its *own* budget, drawn over a grey bar that is that budget (100 %),
with the counts written on it; a red mark past the budget's end counts the units left
out or cut, and names them on hover. Plain dicts, validated against plotly's schema by
the tests; static/js/prompt_preview.js draws the figure.
"""

from __future__ import annotations

import html
from typing import Any

from plotly.io.json import to_json_plotly

USED = "#2a5bd7"
CUT = "#f79009"  # the layer is full: a unit was cut to fit
OVER = "#b42318"  # an estimate of the whole above its budget
BUDGET = "#e4e7ec"
MARK = "#b42318"
MARK_AT = 103  # % of the budget: just past a full bar
TICKS = [0, 25, 50, 75, 100]
NAMES_SHOWN = 12  # per layer in a hover; the table beneath lists every unit


def layer_label(layer: dict[str, Any]) -> str:
    return f"{layer['position']}. {layer['name']}"


def share(layer: dict[str, Any]) -> float:
    """Tokens used as a % of the layer's own budget (0 for a layer whose budget is 0)."""
    return round(100 * layer["tokens"] / layer["budget"], 1) if layer["budget"] else 0.0


def used_colour(layer: dict[str, Any]) -> str:
    if layer["budget"] and layer["tokens"] > layer["budget"]:
        return OVER
    return CUT if layer["truncated"] else USED


def used_text(layer: dict[str, Any]) -> str:
    if not layer["budget"]:
        return "budget 0: left out"
    return f"{layer['tokens']:,} / {layer['budget']:,}"


def marked_units(layer: dict[str, Any]) -> tuple[str, list[str]]:
    """What the mark says ("2 dropped, 1 cut") and the units it names, one line each."""
    cut = [k for k in layer["kept"] if k["truncated"]]
    dropped = layer["dropped"]
    counts = [f"{len(dropped)} dropped"] * bool(dropped) + [f"{len(cut)} cut"] * bool(cut)
    lines = [f"dropped {d['source_id']} ({d['tokens']:,} tokens): {d['reason']}" for d in dropped]
    lines += [f"cut {k['source_id']} to {k['tokens']:,} tokens to fit" for k in cut]
    if len(lines) > NAMES_SHOWN:
        lines = [*lines[:NAMES_SHOWN], f"and {len(lines) - NAMES_SHOWN} more (the table lists all)"]
    # plotly reads a few HTML tags in hover text: a file name is shown as written.
    return ", ".join(counts), [html.escape(line, quote=False) for line in lines]


def budget_figure(report: dict[str, Any]) -> dict[str, Any]:
    """The figure as a plain dict: the budgets, the tokens used, and the marks."""
    layers = report["layers"]
    labels = [layer_label(layer) for layer in layers]
    marked = [(layer_label(layer), *marked_units(layer)) for layer in layers]
    marked = [(label, text, lines) for label, text, lines in marked if text]
    budget = {
        "type": "bar",
        "name": "the layer's budget (100 %)",
        "orientation": "h",
        "y": labels,
        "x": [100 if layer["budget"] else 0 for layer in layers],
        "width": 0.8,
        "marker": {"color": BUDGET},
        "hovertext": [f"{layer['name']}: budget {layer['budget']:,} tokens" for layer in layers],
        "hovertemplate": "%{hovertext}<extra></extra>",
    }
    used = {
        "type": "bar",
        "name": "tokens used",
        "orientation": "h",
        "y": labels,
        "x": [share(layer) for layer in layers],
        "width": 0.45,
        "marker": {"color": [used_colour(layer) for layer in layers]},
        "text": [used_text(layer) for layer in layers],
        "textposition": "outside",
        "cliponaxis": False,
        "hovertext": [
            f"{layer['name']}: {layer['tokens']:,} of {layer['budget']:,} tokens "
            f"({share(layer):g} %) · {len(layer['kept'])} kept · "
            f"{len(layer['dropped'])} dropped" + (" · full: a unit was cut" * layer["truncated"])
            for layer in layers
        ],
        "hovertemplate": "%{hovertext}<extra></extra>",
    }
    marks = {
        "type": "scatter",
        "name": "units dropped or cut",
        "mode": "markers+text",
        "y": [label for label, _, _ in marked],
        "x": [MARK_AT] * len(marked),
        "marker": {"symbol": "x-thin-open", "size": 9, "line": {"width": 2}, "color": MARK},
        "text": [text for _, text, _ in marked],
        "textposition": "middle right",
        "textfont": {"color": MARK},
        "cliponaxis": False,
        "hovertext": ["<br>".join(lines) for _, _, lines in marked],
        "hovertemplate": "%{hovertext}<extra></extra>",
    }
    widest = max([share(layer) for layer in layers], default=0)
    estimated = " (counts estimated)" if report["estimated"] else ""
    layout = {
        "template": "none",
        "barmode": "overlay",
        "height": 90 + 30 * len(layers),
        "margin": {"t": 30, "b": 45, "l": 150, "r": 20},
        "font": {"family": "system-ui, sans-serif", "size": 12, "color": "#1d232b"},
        "paper_bgcolor": "#fff",
        "plot_bgcolor": "#fff",
        "hovermode": "closest",
        "showlegend": True,
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
        "xaxis": {
            "title": {"text": f"tokens used, as a share of the layer's own budget{estimated}"},
            "range": [0, max(140, widest + 40)],
            "tickvals": TICKS,
            "ticktext": [f"{tick} %" for tick in TICKS],
            "gridcolor": "#e4e7ec",
            "zeroline": False,
            "fixedrange": True,
        },
        "yaxis": {"autorange": "reversed", "type": "category", "fixedrange": True},
    }
    data = [budget, used, marks] if marked else [budget, used]
    return {"data": data, "layout": layout}


def budget_chart(report: dict[str, Any]) -> str:
    """The figure as JSON for a ``<script type="application/json">``: plotly escapes < >
    and /, this adds & (so no label can end the element or open an entity)."""
    return to_json_plotly(budget_figure(report)).replace("&", "\\u0026")
