"""The run's timeline (issue 19, point 2): every event, of every type the console writes, is
one line of one shape (its time, its type, then its values, and its number) in which no
value is a Python repr, whether the page renders it or the WebSocket sends it, replayed or
live. Its geometry in Chromium: `test_timeline_browser.py`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.urls import reverse

from runs.events import run_event_append
from runs.templatetags.events import event_value
from tests.conftest import EVERYWHERE
from tests.test_run_websocket import _receive_all, communicator, cookie
from tests.timeline_events import every_event, written_event_types

pytestmark = EVERYWHERE

SHAPE = [("time", ""), ("span", "etype"), ("span", "payload"), ("a", "seq")]
# What a Python value printed as itself looks like; none belongs in a person's timeline.
REPR = re.compile(r"[\[{(]\s*['\"{\[(]|\b(?:True|False|None)\b|\[\]|\{\}|': |\": ")
EVENT = re.compile(r'<li class="event [^>]*>.*?</li>', re.S)
NUMBERING = re.compile(
    r'(id="run-event-|data-seq="|href="#run-event-|event )\d+|#\d+|'
    r"<time [^>]*>[^<]*</time>"
)


@dataclass
class Node:
    tag: str
    cls: str
    content: list[Node | str] = field(default_factory=list)  # in document order

    @property
    def children(self) -> list[Node]:
        return [c for c in self.content if isinstance(c, Node)]

    def all_text(self) -> str:
        return "".join(c if isinstance(c, str) else c.all_text() for c in self.content)


class Events(HTMLParser):
    """The page's ``li.event`` elements as small trees."""

    VOID = {"br", "img", "input", "meta", "link", "hr", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.events: list[Node] = []
        self.stack: list[Node] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs).get("class") or "")
        if self.stack:
            self.stack[-1].content.append(node)
        elif tag == "li" and node.cls.startswith("event "):
            self.events.append(node)
        else:
            return
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1].tag == tag:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack:
            self.stack[-1].content.append(data)


def events_of(html: str) -> list[Node]:
    parser = Events()
    parser.feed(html)
    return parser.events


def append_every_event(run) -> list[str]:
    types = []
    for type, payload in every_event():
        run_event_append(run_id=run.pk, type=type, payload=payload)
        types.append(type)
    return types


def test_the_examples_hold_every_event_type_the_console_writes():
    examples = {type for type, _payload in every_event()}
    assert written_event_types() - examples == set()
    assert {"model.turn", "tool.call", "approval.invalidated", "compaction"} <= examples


def test_a_long_value_is_cut_in_its_line_with_its_whole_text_in_the_title():
    assert event_value(["a.md changed", "b.md deleted"]) == "a.md changed; b.md deleted"
    assert event_value("two\n  lines") == "two lines"
    cut = event_value("word\n" * 100, 20)
    assert cut.startswith(f'<span class="cut" title="{("word\n" * 100).strip()}" tabindex="0"')
    assert cut.endswith(">word word word word…</span>")
    assert event_value("<b>", 2).endswith(
        'title="&lt;b&gt;" tabindex="0" role="button" aria-expanded="false">&lt;…</span>'
    )


def test_every_event_type_renders_as_one_line_of_one_shape_without_reprs(client, personas, run):
    types = ["run.created", *append_every_event(run)]  # run_create wrote the first
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    events = events_of(page)
    assert [e.cls.split()[1] for e in events] == [f"event-{t.replace('.', '')}" for t in types]
    for type, event in zip(types, events, strict=True):
        assert [(c.tag, c.cls) for c in event.children] == SHAPE, type
        time, _etype, payload, _seq = event.children
        assert re.fullmatch(r"\d\d:\d\d:\d\d", time.all_text()), type
        values = " ".join(payload.all_text().split())
        assert values and not REPR.search(values), (type, values)
        blocks = [n.tag for n in walk(payload) if n.tag in {"div", "p", "br", "pre", "ul", "ol"}]
        assert blocks == [], (type, blocks)  # nothing inside a line starts a line of its own
    turn = events[types.index("model.turn")]
    assert 'title="I read docs/guide.md' in page and "Plan:\n1. Fix the links" in page
    assert len(turn.children[2].all_text()) < 600  # the model's text, cut in the line
    generic = " ".join(events[types.index("something.new")].children[2].all_text().split())
    assert "changes one; two" in generic and "nested a: 1; …" in generic
    assert "flags yes; no" in generic and "empty —" in generic and "rows x: 1; y: 2" in generic


def test_a_compaction_line_reads_its_records_from_before_and_after_briefs(client, personas, run):
    """A compaction event holds the counts and what is new since the one before; those
    written before held every summary and dropped turn: either reads as how many turns
    were summarized and dropped."""
    base = {"tier": 3, "tokens_before": 9000, "tokens_after": 4000, "message_count": 9}
    summary = {"first_index": 5, "last_index": 6, "text": "read a.md", "tokens": 3, "facts": []}
    now = {"summarized_turns": 3, "dropped_turns": 2, "summarized": [summary], "dropped": [[3, 4]]}
    run_event_append(run_id=run.pk, type="compaction", payload={**base, **now})
    before = {"summarized": [summary] * 3, "dropped": [[1, 2], [3, 4]]}
    run_event_append(run_id=run.pk, type="compaction", payload={**base, **before})
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    lines = [
        " ".join(e.children[2].all_text().split())
        for e in events_of(page)
        if "event-compaction" in e.cls
    ]
    line = "tier 3 · 9000 → 4000 tokens · 9 messages sent · 3 turns summarized"
    assert lines == [f"{line} (1 new) · 2 dropped (1 new)", f"{line} · 2 dropped"]


def walk(node: Node):
    for child in node.children:
        yield child
        yield from walk(child)


def test_events_over_the_websocket_are_the_page_s_markup(client, personas, run):
    """The consumer renders with the page's template: an event replayed to a socket that
    connects, or sent live to one that is open, is the page's line for it, number apart."""
    append_every_event(run)
    client.force_login(personas.operator)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    shown = EVENT.findall(page)
    session = cookie(client, personas.operator)

    async def socket() -> tuple[list[str], list[str]]:
        ws = communicator(f"/ws/runs/{run.pk}/?after=0", cookie=session)
        assert (await ws.connect(timeout=10))[0]
        replayed = await _receive_all(ws)
        await database_sync_to_async(append_every_event)(run)
        live = await _receive_all(ws)
        await ws.disconnect()
        return replayed, live

    replayed, live = async_to_sync(socket)()
    assert EVENT.findall("".join(replayed)) == shown
    sent_live = EVENT.findall("".join(live))
    assert len(sent_live) == len(shown) - 1  # all but run.created, once more

    def unnumbered(li: str) -> str:
        return NUMBERING.sub("", li)

    assert [unnumbered(li) for li in sent_live] == [unnumbered(li) for li in shown[1:]]
