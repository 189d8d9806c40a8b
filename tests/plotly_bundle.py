"""The vendored plotly.js (static/vendor/plotly-basic.min.js, a partial bundle): its
version and the trace types it registers, read from the file itself, and the check every
chart test makes of its figures: valid for plotly's schema, and drawable by this bundle.

The trace types are read from the minified source (each trace module declares
``moduleType:"trace",name:"bar"``); tests/test_plotly_bundle.py checks in Chromium that
``Plotly.PlotSchema`` registers exactly these, so a change of that spelling fails there."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "static" / "vendor" / "plotly-basic.min.js"
BUNDLE_URL = "/static/vendor/plotly-basic.min.js"

# In the page: for each drawn chart, the trace types of its figure that this Plotly has
# not registered (it would skip them, drawing an empty or partial chart with no error).
UNREGISTERED_JS = """() => {
  const known = new Set(Object.keys(Plotly.PlotSchema.get().traces));
  return Array.from(document.querySelectorAll(".js-plotly-plot")).map((div) => ({
    id: div.id || div.dataset.figure || "",
    drawn: div.querySelector(".main-svg") !== null,
    unregistered: (div.data || []).map((t) => t.type || "scatter").filter((t) => !known.has(t)),
  }));
}"""


@functools.cache
def bundle_text() -> str:
    return BUNDLE.read_text(encoding="utf-8")


def bundle_version() -> str:
    found = re.search(r"plotly\.js \([^)]*\) v(\d+\.\d+\.\d+)", bundle_text()[:500])
    assert found, f"{BUNDLE} does not say its plotly.js version in its header"
    return found.group(1)


@functools.cache
def bundle_traces() -> frozenset[str]:
    return frozenset(re.findall(r'moduleType:"trace",name:"(\w+)"', bundle_text()))


def trace_types(figure: dict[str, Any]) -> set[str]:
    return {trace.get("type", "scatter") for trace in figure["data"]}


def assert_drawable(figure: dict[str, Any]) -> None:
    """Valid for plotly's schema (a typo in a property raises), and every trace of a type
    the vendored bundle draws."""
    import plotly.graph_objects as go

    go.Figure(figure)
    missing = trace_types(figure) - bundle_traces()
    assert not missing, (
        f"A chart uses trace types {sorted(missing)} that {BUNDLE.name} lacks (it has "
        f"{sorted(bundle_traces())}): vendor a bundle with them (static/vendor/README.md)."
    )
