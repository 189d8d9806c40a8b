"""The run's timeline in Chromium (issue 19, point 2): every event, of every type and with
long values, shown by the page or arrived live over the WebSocket, is one line of one
shape. Its first line starts with its time, then its type, then its values; when the
values wrap, each continuation line starts at the values' left edge, never under the
time; nothing in an event starts a block of its own (a model turn's text is cut in the
line, its whole text in the title)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from runs.events import run_event_append
from tests.conftest import EVERYWHERE
from tests.helpers import login
from tests.stack import off_loop
from tests.test_live_browser import open_run_page
from tests.test_live_browser import run as run  # a fixture: a run no worker takes
from tests.timeline_events import MODEL_TEXT, every_event

pytestmark = [EVERYWHERE, pytest.mark.browser]

# Each event's boxes: its parts, and its values' line boxes (the client rects of the
# values' contents, grouped into lines by their vertical centre).
GEOMETRY = """() => Array.from(document.querySelectorAll('#run-timeline li.event')).map((li) => {
  const box = (e) => e.getBoundingClientRect();
  const parts = Array.from(li.children);
  const [time, etype, payload, seq] = parts;
  const range = document.createRange();
  range.selectNodeContents(payload);
  const rects = Array.from(range.getClientRects()).filter((r) => r.width > 0 && r.height > 0)
    .sort((a, b) => (a.top + a.bottom) - (b.top + b.bottom));
  const lines = [];
  for (const r of rects) {
    const centre = (r.top + r.bottom) / 2, line = lines[lines.length - 1];
    if (line && centre < line.bottom) { line.left = Math.min(line.left, r.left); }
    else lines.push({top: r.top, bottom: r.bottom, left: r.left});
  }
  const style = getComputedStyle(li);
  return {
    seq: li.dataset.seq, type: li.dataset.type,
    parts: parts.map((e) => e.tagName.toLowerCase() + (e.className ? '.' + e.className : '')),
    li: {left: box(li).left + parseFloat(style.paddingLeft),
         bottom: box(li).bottom - parseFloat(style.paddingBottom)},
    time: box(time).toJSON(), etype: box(etype).toJSON(), payload: box(payload).toJSON(),
    seq_box: box(seq).toJSON(), lines,
    blocks: Array.from(payload.querySelectorAll('*'))
      .filter((e) => !getComputedStyle(e).display.startsWith('inline'))
      .map((e) => e.tagName),
  };
})"""
SHAPE = ["time", "span.etype", "span.payload", "a.seq"]
# Events whose values are long enough to wrap at either width.
WRAPPING = {"model.turn", "approval.requested", "approval.invalidated", "tool.call"}


def append_every_event(run) -> int:
    for type, payload in every_event():
        event = off_loop(run_event_append, run_id=run.pk, type=type, payload=payload)
    return event.seq


def assert_one_line_of_one_shape(event: dict) -> None:
    what = f"#{event['seq']} {event['type']}"
    assert event["parts"] == SHAPE, what
    # No block of its own: everything inside is inline, and nothing lies below the values.
    assert event["blocks"] == [], what
    assert event["li"]["bottom"] - event["payload"]["bottom"] < 2, what
    time, etype, payload, seq = event["time"], event["etype"], event["payload"], event["seq_box"]
    first, *continued = event["lines"]
    # The first line starts with the time, then the type, then the values, side by side.
    assert abs(time["left"] - event["li"]["left"]) < 1, what
    assert time["right"] < etype["left"] and etype["right"] < payload["left"], what
    for part in (etype, seq):
        assert part["top"] < time["bottom"] and part["bottom"] > time["top"], what
    assert time["top"] <= (first["top"] + first["bottom"]) / 2 <= time["bottom"], what
    # Every line of the values hangs at their left edge; nothing goes left of it.
    for line in [first, *continued]:
        assert abs(line["left"] - payload["left"]) < 1.5, (what, line, payload)


def timeline(page: Page) -> list[dict]:
    return page.evaluate(GEOMETRY)


def test_every_event_is_one_line_whose_wraps_hang_under_its_values(
    live_stack, page: Page, client, personas, run
):
    shown = append_every_event(run)  # rendered by the page
    page.set_viewport_size({"width": 1400, "height": 900})
    login(page, live_stack, client, personas.operator)
    open_run_page(page, live_stack, run)
    last = append_every_event(run)  # sent live, over the WebSocket
    expect(page.locator(f"#run-event-{last}")).to_be_visible(timeout=15_000)

    for width in (1400, 760):
        page.set_viewport_size({"width": width, "height": 900})
        events = timeline(page)
        assert len(events) == last
        for event in events:
            assert_one_line_of_one_shape(event)
        wrapped = {e["type"] for e in events if len(e["lines"]) > 1}
        assert wrapped >= WRAPPING, (width, WRAPPING - wrapped)  # the hang was seen

    # The live events are the page's lines for the same payloads.
    payloads = page.locator("#run-timeline li.event .payload").evaluate_all(
        "spans => spans.map((s) => s.innerHTML)"
    )
    assert payloads[1:shown] == payloads[shown:]  # all but run.created, once more
    # A model turn's text is cut in its line, its whole text in the title and, on a click,
    # in the line: the event keeps its shape.
    turn = page.locator("#run-timeline li.event-modelturn .payload q .cut").first
    assert turn.get_attribute("title") == MODEL_TEXT.strip()
    assert len(turn.inner_text()) == 200 and turn.inner_text().endswith("…")
    turn.click()
    expect(turn).to_have_attribute("aria-expanded", "true")
    assert turn.text_content() == MODEL_TEXT.strip()
    expanded = next(e for e in timeline(page) if e["type"] == "model.turn")
    assert_one_line_of_one_shape(expanded)
    assert len(expanded["lines"]) > 10
    turn.press("Enter")
    expect(turn).to_have_attribute("aria-expanded", "false")
    assert len(turn.inner_text()) == 200
