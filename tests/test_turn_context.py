"""What each model turn cost, per layer (B12): recorded with the turn, in the API's run
detail, and on the run page as a table and a Plotly chart (the chart in Chromium)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from runs.models import ModelCall
from runs.observability.turns import CONVERSATION, TOOLS, turn_table, turns_figure
from runs.services import run_create
from tests.conftest import EVERYWHERE
from tests.fake_anthropic import message
from tests.helpers import drive, login
from tests.plotly_bundle import assert_drawable

CACHE = {
    "input_tokens": 40,
    "output_tokens": 7,
    "cache_creation_input_tokens": 1200,
    "cache_read_input_tokens": 0,
}
CACHED = {**CACHE, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1200}


def read(path: str, n: int):
    return message(
        [{"type": "tool_use", "id": f"toolu_{n}", "name": "readSource", "input": {"path": path}}],
        stop_reason="tool_use",
        usage=CACHE if n == 1 else CACHED,
    )


def a_run_of_turns(api, personas, agent, workspace, reads: int):
    """A question about docs/notes.md answered after ``reads`` reads of it; the workspace
    has an AGENTS.md at its root, one in docs/ and one in app/ (not on the task's path)."""
    root = workspace.root_path
    for folder, words in (("", "Root rules."), ("docs", "Docs rules."), ("app", "App rules.")):
        (root / folder).mkdir(exist_ok=True)
        (root / folder / "AGENTS.md").write_text(words)
    (root / "docs" / "notes.md").write_text("# Notes\n" + "A line of notes.\n" * 200)
    api.answers += [read("docs/notes.md", n) for n in range(1, reads + 1)]
    api.answers.append(message([{"type": "text", "text": "Notes."}], usage=CACHED))
    run = run_create(
        agent=agent,
        workspace=workspace,
        requester=personas.operator,
        request="What does docs/notes.md say?",
        dispatch=False,
    )
    run = drive(run)
    assert run.status == "completed", run.failure_reason
    return run


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_each_turn_records_its_layers_tools_conversation_and_cache(
    personas, agent, workspace, api, client
):
    run = a_run_of_turns(api, personas, agent, workspace, reads=1)
    first, last = run.model_calls.order_by("turn")
    layers = {layer["name"]: layer for layer in first.context["layers"]}
    assert "task_state" not in layers  # the task is the conversation's first message
    files = layers["instruction_files"]
    assert files["budget"] == 24_000 and 0 < files["tokens"] < files["budget"]
    assert [(d["source"], d["reason"]) for d in files["dropped"]] == [
        ("file:app/AGENTS.md", "not on the task's path (docs/notes.md)")
    ]
    sent = "\n".join(block["text"] for block in api.requests[0]["body"]["system"])
    assert "Docs rules." in sent and "App rules." not in sent
    assert first.context["tools"]["count"] == len(api.requests[0]["body"]["tools"])
    conversation = [c.context["conversation"] for c in (first, last)]
    assert [c["messages"] for c in conversation] == [1, 3]  # the task; then a tool turn
    assert conversation[1]["tokens"] > conversation[0]["tokens"]  # the file's text came in
    assert {c["tier"] for c in conversation} == {1}
    assert (first.cache_creation_input_tokens, last.cache_read_input_tokens) == (1200, 1200)

    client.force_login(personas.operator)
    detail = client.get(f"/api/runs/{run.pk}/").json()
    assert [c["context"] for c in detail["model_calls"]] == [first.context, last.context]
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="run-turns"' in page and 'id="turns-figure"' in page
    assert '<tr data-turn="1">' in page and '<tr data-turn="2">' in page
    assert (
        "instruction_files: 1 dropped (file:app/AGENTS.md): not on the task&#x27;s path "
        "(docs/notes.md)"
    ) in page


@EVERYWHERE
@pytest.mark.usefixtures("seeded")
def test_a_turn_says_when_compaction_summarized_the_conversation(personas, agent, workspace, api):
    agent.compaction_whole_tokens, agent.compaction_summary_tokens = 600, 100_000
    agent.compaction_keep_turns = 1
    agent.save()
    run = a_run_of_turns(api, personas, agent, workspace, reads=3)
    tiers = [c.context["conversation"]["tier"] for c in run.model_calls.order_by("turn")]
    assert tiers[0] == 1 and tiers[-1] == 2
    last = run.model_calls.order_by("turn").last().context["conversation"]
    assert last["whole_tokens"] == 600 and last["summarized_turns"] >= 1
    assert last["tokens"] < last["tokens_before"]
    notes = turn_table(run.model_calls.order_by("turn")).rows[-1].notes
    assert any(note.startswith("conversation: tier 2, ") for note in notes)


def context_of(tokens: int, dropped: int = 0, tier: int = 1) -> dict:
    return {
        "layers": [
            {
                "name": "identity",
                "tokens": 50,
                "budget": 2000,
                "truncated": [],
                "dropped": [],
                "dropped_count": 0,
            },
            {
                "name": "instruction_files",
                "tokens": tokens,
                "budget": 1000,
                "truncated": ["file:AGENTS.md"] if tokens > 900 else [],
                "dropped": [
                    {"source": f"file:d{n}/AGENTS.md", "tokens": 10, "reason": "over budget"}
                    for n in range(min(dropped, 20))
                ],
                "dropped_count": dropped,
            },
            {
                "name": "memory",
                "tokens": 0,
                "budget": 2000,
                "truncated": [],
                "dropped": [],
                "dropped_count": 0,
            },
        ],
        "tools": {"count": 3, "tokens": 400},
        "conversation": {
            "tokens": 900,
            "tokens_before": 1500 if tier > 1 else 900,
            "messages": 5,
            "tier": tier,
            "summarized_turns": 2 if tier > 1 else 0,
            "dropped_turns": 0,
            "whole_tokens": 800,
            "summary_tokens": 2000,
        },
    }


def test_the_table_groups_what_was_dropped_and_keeps_old_turns_apart():
    calls = [
        ModelCall(turn=1, context={}),  # recorded before the context was kept
        ModelCall(turn=2, context=context_of(950, dropped=25, tier=2)),
    ]
    table = turn_table(calls)
    assert table.unrecorded == 1
    assert table.columns == ["identity", "instruction_files", TOOLS, CONVERSATION]  # no memory
    old, new = table.rows
    assert old.aligned == [None, None, None, None]
    files, conversation = new.aligned[1], new.aligned[3]
    assert (files.tokens, files.budget, files.over) == (950, 1000, False)
    assert (conversation.tokens, conversation.budget, conversation.over) == (900, 800, True)
    assert new.notes == [
        "instruction_files: 20 dropped (file:d0/AGENTS.md, file:d1/AGENTS.md, "
        "file:d2/AGENTS.md and 17 more): over budget",
        "instruction_files: 5 more dropped (the prompt preview lists all)",
        "instruction_files: file:AGENTS.md cut to fit the budget",
        "conversation: tier 2, 1500 → 900 tokens (2 turns summarized, 0 dropped)",
    ]
    assert turns_figure(turn_table([ModelCall(turn=1, context={})])) is None
    assert_drawable(json.loads(turns_figure(table)))


@EVERYWHERE
@pytest.mark.browser
def test_the_run_page_draws_a_stacked_bar_of_each_turn_s_layers(
    live_stack, page: Page, client, personas, run
):
    for turn, tokens in ((1, 300), (2, 600), (3, 950)):
        ModelCall.objects.create(
            run=run,
            turn=turn,
            label="anthropic",
            model="claude-test",
            stop_reason="tool_use",
            context=context_of(tokens, tier=2 if turn == 3 else 1),
        )
    login(page, live_stack, client, personas.operator)
    page.goto(f"{live_stack.url}/runs/{run.pk}/")
    chart = page.locator("#turns-plot")
    expect(chart.locator(".main-svg").first).to_be_visible()
    # One trace per column (identity, instruction_files, tools, conversation), one bar per turn.
    expect(chart.locator("g.trace.bars")).to_have_count(4)
    expect(chart.locator("g.trace.bars").nth(1).locator("path")).to_have_count(3)
    expect(chart.locator(".legend")).to_contain_text("instruction_files")
    expect(page.locator('#turns-table tr[data-turn="3"]')).to_contain_text("tier 2")


def test_a_layer_that_cut_and_dropped_nothing_is_kept_short():
    """Kept with every turn of every run: a layer says what it cut or dropped only when it
    did, and the table reads both shapes alike."""
    from types import SimpleNamespace

    from policies.core.assembler import Dropped, Kept
    from runs.core.turn_figures import layer_figures

    def layer(name, tokens, budget, kept, dropped=()):
        return SimpleNamespace(name=name, tokens=tokens, budget=budget, kept=kept, dropped=dropped)

    quiet = layer("identity", 40, 2000, (Kept("a", 40, False),))
    busy = layer(
        "instruction_files",
        900,
        1000,
        (Kept("file:AGENTS.md", 900, True),),
        (Dropped("file:d/AGENTS.md", 10, "over budget"),),
    )
    assert layer_figures([quiet, busy]) == [
        {"name": "identity", "tokens": 40, "budget": 2000},
        {
            "name": "instruction_files",
            "tokens": 900,
            "budget": 1000,
            "truncated": ["file:AGENTS.md"],
            "dropped": [{"source": "file:d/AGENTS.md", "tokens": 10, "reason": "over budget"}],
            "dropped_count": 1,
        },
    ]
