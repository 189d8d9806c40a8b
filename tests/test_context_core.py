"""ADR 0006's worked cases, the hook registry, retrieval provenance (SPEC C2, C5, C7, C9)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from policies.core.assembler import (
    REASON_ALL_OR_NOTHING,
    REASON_NO_ROOM,
    REASON_ZERO_BUDGET,
    TRUNCATION_MARKER,
    Layer,
    Rejected,
    Unit,
    assemble,
)
from policies.core.hooks import PHASES, Completed, Halt, Halted, HookRegistry
from policies.core.instructions import (
    DATABASE_SOURCE,
    MAX_INSTRUCTION_BYTES,
    InstructionFile,
    instruction_units,
)
from policies.core.layers import DEFAULT_LAYERS, effective_layers
from policies.core.retrieval import RetrievalPolicy, Segment, retrieved_units
from policies.core.tokenizer import ByteEstimate

T = ByteEstimate()
NOW = datetime(2026, 11, 30, tzinfo=UTC)


def test_the_estimate_is_ceil_of_bytes_over_four_and_says_it_is_an_estimate():
    assert [T.count(s) for s in ("", "a", "abcd", "abcde", "é", "€€")] == [0, 1, 1, 2, 1, 2]
    assert T.estimated is True


def test_the_default_order_is_the_adr_order_then_the_partitions():
    assert [spec.name for spec in DEFAULT_LAYERS[:5]] == [
        "identity",
        "instruction_files",
        "project_context",
        "business_rules",
        "task_state",
    ]
    assert {"retrieved_context", "working_state", "tool_results", "memory", "output_schema"} <= {
        spec.name for spec in DEFAULT_LAYERS
    }


def test_an_override_moves_a_layer_and_ties_keep_the_default_order():
    order = [s.name for s in effective_layers({"task_state": (1, "truncate_tail", 10)})]
    assert order[:2] == ["identity", "task_state"]  # tie at 1: identity comes first by default


FILES = [
    InstructionFile("docs/api/AGENTS.md", b"deepest"),
    InstructionFile("AGENTS.md", b"root"),
    InstructionFile("docs/AGENTS.md", b"docs"),
    InstructionFile("a/AGENTS.md", b"a"),
]


def test_priority_is_root_then_deeper_folders_then_the_database():
    units, rejected = instruction_units(FILES, "from the database")
    assert [u.source_id for u in units] == [
        "file:AGENTS.md",
        "file:a/AGENTS.md",
        "file:docs/AGENTS.md",
        "file:docs/api/AGENTS.md",
        DATABASE_SOURCE,
    ]
    assert rejected == ()


def test_truncation_drops_the_root_first_and_the_database_last():
    units, _ = instruction_units(FILES, "from the database")
    budget = sum(T.count(u.text) for u in units[-2:]) + 1
    layer = assemble([Layer("instruction_files", "drop_whole_units", budget, units)], T).layers[0]
    assert [k.source_id for k in layer.kept] == ["file:docs/api/AGENTS.md", DATABASE_SOURCE]
    assert [d.source_id for d in layer.dropped] == [
        "file:AGENTS.md",
        "file:a/AGENTS.md",
        "file:docs/AGENTS.md",
    ]


@pytest.mark.parametrize(
    ("file", "reason"),
    [
        (InstructionFile("AGENTS.md", b"\xff\xfe bad"), "not valid UTF-8 (byte 0)"),
        (InstructionFile("AGENTS.md", b"  \n\t "), "empty"),
        (InstructionFile("AGENTS.md", b""), "empty"),
        (InstructionFile("AGENTS.md", b"x" * (MAX_INSTRUCTION_BYTES + 1)), "too large"),
        (InstructionFile("AGENTS.md", size=10**9), "too large: 1000000000 bytes"),
        (
            InstructionFile("AGENTS.md", problem="a link pointing outside the workspace"),
            "a link pointing outside",
        ),
    ],
)
def test_a_broken_instruction_file_is_reported_never_raised(file, reason):
    units, rejected = instruction_units([file, InstructionFile("x/AGENTS.md", b"fine")])
    assert [u.source_id for u in units] == ["file:x/AGENTS.md"]
    assert len(rejected) == 1 and reason in rejected[0].reason
    layer = assemble(
        [Layer("instruction_files", "drop_whole_units", 100, units, rejected)], T
    ).layers[0]
    assert layer.dropped[0].source_id == "file:AGENTS.md" and reason in layer.dropped[0].reason


def test_a_byte_order_mark_is_not_part_of_the_text():
    units, _ = instruction_units([InstructionFile("AGENTS.md", "\ufeffhello".encode())])
    assert units[0].text.endswith("\nhello")


def test_empty_layers_count_zero_tokens_and_add_nothing_to_the_prompt():
    assembly = assemble(
        [
            Layer("identity", "keep_or_drop", 10, (Unit("i", "me"),)),
            Layer("business_rules", "drop_whole_units", 10),
            Layer("task_state", "truncate_tail", 10),
        ],
        T,
    )
    assert [(r.name, r.tokens) for r in assembly.layers] == [
        ("identity", 1),
        ("business_rules", 0),
        ("task_state", 0),
    ]
    assert assembly.prompt == "me"


def test_keep_or_drop_keeps_all_or_nothing():
    units = (Unit("a", "x" * 8), Unit("b", "y" * 8))  # 2 + 2 tokens, 5 with the separator
    assert [
        k.source_id for k in assemble([Layer("id", "keep_or_drop", 5, units)], T).layers[0].kept
    ] == ["a", "b"]
    dropped = assemble([Layer("id", "keep_or_drop", 4, units)], T).layers[0]
    assert dropped.kept == () and {d.reason for d in dropped.dropped} == {REASON_ALL_OR_NOTHING}


def test_truncate_tail_keeps_a_prefix_with_a_visible_marker():
    text = "é" * 100  # 200 bytes, 50 tokens
    layer = assemble([Layer("ctx", "truncate_tail", 20, (Unit("readme", text),))], T).layers[0]
    assert layer.truncated and layer.text.endswith(TRUNCATION_MARKER)
    assert layer.text.removesuffix(TRUNCATION_MARKER) == "é" * 30  # 60 + 20 marker bytes = 80
    assert layer.tokens == 20 and layer.kept[0].truncated


def test_truncate_tail_reports_units_after_the_cut_as_dropped():
    units = (Unit("a", "a" * 40), Unit("b", "b" * 40), Unit("c", "c" * 40))
    layer = assemble([Layer("ctx", "truncate_tail", 20, units)], T).layers[0]
    assert [(k.source_id, k.truncated) for k in layer.kept] == [("a", False), ("b", True)]
    assert [d.source_id for d in layer.dropped] == ["c"]


def test_a_budget_too_small_for_the_marker_drops_the_blob():
    layer = assemble([Layer("ctx", "truncate_tail", 2, (Unit("a", "a" * 40),))], T).layers[0]
    assert layer.text == "" and layer.dropped[0].reason == REASON_NO_ROOM


def test_a_zero_budget_leaves_the_layer_out_and_says_why():
    layer = assemble([Layer("rules", "drop_whole_units", 0, (Unit("r", "rule"),))], T).layers[0]
    assert layer.text == "" and layer.dropped[0].reason == REASON_ZERO_BUDGET


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "truncate_head"}, "unknown strategy"),
        ({"budget": -1}, "≥ 0"),
        ({"budget": 1.5}, "≥ 0"),
        ({"budget": True}, "≥ 0"),
    ],
)
def test_a_malformed_layer_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Layer(**{"name": "x", "strategy": "keep_or_drop", "budget": 1, **kwargs})


def test_a_duplicate_layer_is_refused():
    with pytest.raises(ValueError, match="Duplicate layer 'x'"):
        assemble([Layer("x", "keep_or_drop", 1), Layer("x", "keep_or_drop", 1)], T)


def test_rejected_units_pass_through_to_the_report():
    layer = assemble(
        [Layer("x", "drop_whole_units", 5, (), (Rejected("s", "bad", "p"),))], T
    ).layers[0]
    assert [(d.source_id, d.reason, d.path) for d in layer.dropped] == [("s", "bad", "p")]


# --- hooks (C7) -------------------------------------------------------------------------


def test_hooks_run_in_registration_order_and_halt_stops_the_chain():
    calls: list[str] = []

    def first(event):
        calls.append("first")

    def guard(event):
        calls.append("guard")
        return Halt("deleting is not allowed") if event["tool"] == "deleteFile" else None

    def last(event):
        calls.append("last")

    registry = (
        HookRegistry()
        .register("pre_tool_use", first)
        .register("pre_tool_use", guard)
        .register("pre_tool_use", last)
    )
    assert registry.run("pre_tool_use", {"tool": "readSource"}) == Completed(ran=3)
    assert calls == ["first", "guard", "last"]
    calls.clear()
    outcome = registry.run("pre_tool_use", {"tool": "deleteFile"})
    assert isinstance(outcome, Halted) and outcome.reason == "deleting is not allowed"
    assert outcome.ran == 2 and calls == ["first", "guard"]


def test_a_registry_is_a_value_registering_returns_a_new_one():
    empty = HookRegistry()
    one = empty.register("session_start", lambda event: None)
    assert empty.run("session_start", {}) == Completed(ran=0)
    assert one.run("session_start", {}) == Completed(ran=1)
    assert set(empty.handlers) == set(PHASES)


def test_unknown_phases_and_bad_handlers_are_refused():
    with pytest.raises(ValueError, match="Unknown hook phase"):
        HookRegistry().register("before_everything", lambda e: None)
    with pytest.raises(TypeError):
        HookRegistry().register("session_end", "not callable")
    with pytest.raises(TypeError, match="return None or Halt"):
        HookRegistry().register("session_end", lambda e: "yes").run("session_end", {})


# --- retrieval (C9) ---------------------------------------------------------------------


def seg(source_id, *, trust="internal", relevance=0.5, text="Body.", location="", age_days=0):
    return Segment(
        source_id,
        f"Title {source_id}",
        location or f"docs/{source_id}.md",
        text,
        trust,
        relevance,
        NOW - timedelta(days=age_days),
    )


def test_retrieved_material_is_ranked_by_trust_then_relevance_in_drop_order():
    units, _, _ = retrieved_units(
        [
            seg("a", trust="verified", relevance=0.1),
            seg("b", trust="external", relevance=0.9),
            seg("c", trust="verified", relevance=0.9),
            seg("d", trust="untrusted", relevance=1.0),
        ],
        now=NOW,
    )
    assert [u.source_id for u in units] == ["d", "b", "a", "c"]  # head is dropped first


def test_every_segment_keeps_its_provenance():
    units, _, _ = retrieved_units([seg("a", trust="verified")], now=NOW)
    unit = units[0]
    assert (unit.title, unit.path, unit.trust_level) == ("Title a", "docs/a.md", "verified")
    assert unit.timestamp == NOW.isoformat()
    assert unit.text.startswith("[source a · Title a · docs/a.md · 2026-11-30T00:00:00+00:00")


def test_stale_material_is_labelled_with_its_age():
    units, _, _ = retrieved_units([seg("old", age_days=45), seg("new", age_days=3)], now=NOW)
    texts = {u.source_id: u.text for u in units}
    assert "[stale: 45 days old]" in texts["old"] and "stale" not in texts["new"]


def test_conflicting_segments_are_reported_and_kept_apart_never_merged():
    units, _, conflicts = retrieved_units(
        [
            seg("v1", text="Port is 8080.", location="docs/config.md"),
            seg("v2", text="Port is 9090.", location="docs/config.md"),
            seg("same", text="Port is 8080.", location="docs/other.md"),
        ],
        now=NOW,
    )
    assert [(c.location, c.source_ids) for c in conflicts] == [("docs/config.md", ("v1", "v2"))]
    texts = {u.source_id: u.text for u in units}
    assert "Port is 8080." in texts["v1"] and "Port is 9090." in texts["v2"]
    assert "[conflict:" in texts["v1"] and "[conflict:" not in texts["same"]


def test_large_material_is_summarised_before_it_enters_the_prompt():
    body = "# Guide\n\n" + "\n\n".join(
        f"Point {i} matters. Detail {i} follows." for i in range(400)
    )
    units, _, _ = retrieved_units(
        [seg("big", text=body)],
        now=NOW,
        policy=RetrievalPolicy(summarize_over_bytes=1000, summary_bytes=200),
    )
    text = units[0].text
    assert "[summary of a" in text and "# Guide" in text and "Point 0 matters." in text
    assert "Detail 0 follows" not in text and len(text.encode()) < 600


def test_segments_with_an_unknown_trust_level_or_no_text_are_rejected():
    _, rejected, _ = retrieved_units([seg("x", trust="trust-me"), seg("y", text="  ")], now=NOW)
    assert [(r.source_id, r.reason) for r in rejected] == [
        ("x", "unknown trust level 'trust-me'"),
        ("y", "empty"),
    ]
