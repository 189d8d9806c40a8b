"""The run page's "Context per turn" card (B12): each model turn's layers against their
budgets, the tool definitions, the conversation as compaction left it, and the cache
reads and writes, as a table and as a stacked Plotly chart over the turns (its JSON,
which static/js/run_turns.js draws: the page allows no inline script)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import plotly.graph_objects as go

from ..models import ModelCall

CONVERSATION = "conversation"
TOOLS = "tool definitions"
# One colour per layer, so a layer keeps its colour from turn to turn and run to run.
_COLOURS = (
    "#2a5bd7",
    "#7a4fd0",
    "#1f9e89",
    "#d2691e",
    "#b8860b",
    "#c2185b",
    "#5d8aa8",
    "#6b8e23",
    "#8b5a2b",
    "#708090",
)


@dataclass(frozen=True)
class Cell:
    tokens: int
    budget: int | None = None  # None: no budget of its own (tools)

    @property
    def over(self) -> bool:
        return self.budget is not None and self.tokens > self.budget


@dataclass(frozen=True)
class TurnRow:
    turn: int
    input_tokens: int
    output_tokens: int
    cache_write: int
    cache_read: int
    cells: dict[str, Cell]
    tier: int | None
    notes: list[str] = field(default_factory=list)
    aligned: list[Cell | None] = field(default_factory=list)  # cells in the table's columns


@dataclass(frozen=True)
class TurnTable:
    columns: list[str]  # the layers any turn sent something of, then tools, conversation
    rows: list[TurnRow]
    unrecorded: int  # turns recorded before the console kept their context


def turn_table(calls: Iterable[ModelCall]) -> TurnTable:
    rows, unrecorded, seen = [], 0, dict[str, None]()
    for call in calls:
        context = call.context or {}
        if not context:
            unrecorded += 1
        cells: dict[str, Cell] = {}
        for layer in context.get("layers", ()):
            cells[layer["name"]] = Cell(layer["tokens"], layer["budget"])
            if layer["tokens"]:
                seen.setdefault(layer["name"])
        tools = context.get("tools") or {}
        conversation = context.get("conversation") or {}
        if tools:
            cells[TOOLS] = Cell(tools.get("tokens", 0))
        if conversation:
            cells[CONVERSATION] = Cell(
                conversation.get("tokens", 0), conversation.get("whole_tokens")
            )
        rows.append(
            TurnRow(
                turn=call.turn,
                input_tokens=call.input_tokens,
                output_tokens=call.output_tokens,
                cache_write=call.cache_creation_input_tokens,
                cache_read=call.cache_read_input_tokens,
                cells=cells,
                tier=conversation.get("tier"),
                notes=_notes(context),
            )
        )
    extra = [TOOLS, CONVERSATION] if any(TOOLS in r.cells for r in rows) else []
    columns = [*seen, *extra]
    aligned = [replace(row, aligned=[row.cells.get(c) for c in columns]) for row in rows]
    return TurnTable(columns, aligned, unrecorded)


def _notes(context: dict[str, Any]) -> list[str]:
    """What was dropped or cut this turn and why, grouped by reason; and the compaction."""
    notes = []
    for layer in context.get("layers", ()):
        reasons = Counter(d["reason"] for d in layer.get("dropped", ()))
        hidden = layer.get("dropped_count", 0) - len(layer.get("dropped", ()))
        for reason, count in reasons.items():
            sources = [d["source"] for d in layer["dropped"] if d["reason"] == reason]
            shown = ", ".join(sources[:3]) + (f" and {len(sources) - 3} more" if count > 3 else "")
            notes.append(f"{layer['name']}: {count} dropped ({shown}): {reason}")
        if hidden > 0:
            notes.append(f"{layer['name']}: {hidden} more dropped (the prompt preview lists all)")
        for source in layer.get("truncated", ()):
            notes.append(f"{layer['name']}: {source} cut to fit the budget")
    conversation = context.get("conversation") or {}
    if conversation.get("tier", 1) > 1:
        notes.append(
            f"conversation: tier {conversation['tier']}, {conversation['tokens_before']} → "
            f"{conversation['tokens']} tokens ({conversation['summarized_turns']} turns "
            f"summarized, {conversation['dropped_turns']} dropped)"
        )
    return notes


def turns_figure(table: TurnTable) -> str | None:
    """A stacked bar per turn, one colour per layer, with each bar's tokens and budget on
    hover; None when no turn has its context recorded."""
    rows = [row for row in table.rows if row.cells]
    if not rows:
        return None
    turns = [f"turn {row.turn}" for row in rows]
    traces = []
    for index, name in enumerate(table.columns):
        cells: Sequence[Cell | None] = [row.cells.get(name) for row in rows]
        budgets = [
            "no budget of its own" if c is None or c.budget is None else f"budget {c.budget:,}"
            for c in cells
        ]
        traces.append(
            go.Bar(
                name=name,
                x=turns,
                y=[c.tokens if c else 0 for c in cells],
                customdata=budgets,
                hovertemplate=f"{name}: %{{y:,}} tokens, %{{customdata}}<extra></extra>",
                marker_color=_COLOURS[index % len(_COLOURS)],
            )
        )
    figure = go.Figure(traces)
    figure.update_layout(
        barmode="stack",
        height=320,
        margin={"t": 10, "b": 40, "l": 60, "r": 10},
        yaxis_title="tokens (estimated)",
        legend={"orientation": "h", "y": -0.2},
    )
    # plotly escapes "<", ">" and "/" in its JSON; with "&" too, no label can end the
    # <script type="application/json"> element it is put in.
    return figure.to_json().replace("&", "\\u0026")
