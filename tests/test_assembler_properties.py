"""Property-based tests of the pure assembler (SPEC C2–C4)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.core.assembler import (
    LAYER_SEPARATOR,
    REASON_OVER_BUDGET,
    REASON_UNIT_TOO_LARGE,
    STRATEGIES,
    TRUNCATION_MARKER,
    UNIT_SEPARATOR,
    Layer,
    Unit,
    assemble,
)
from policies.core.tokenizer import ByteEstimate

TOKENIZER = ByteEstimate()
texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)


@st.composite
def layers(draw):
    count = draw(st.integers(min_value=0, max_value=5))
    result = []
    for index in range(count):
        units = draw(st.lists(texts, max_size=8))
        result.append(
            Layer(
                name=f"layer{index}",
                strategy=draw(st.sampled_from(STRATEGIES)),
                budget=draw(st.integers(min_value=0, max_value=80)),
                units=tuple(Unit(f"u{index}.{i}", text) for i, text in enumerate(units)),
            )
        )
    return result


@settings(max_examples=300)
@given(layers())
def test_no_layer_ever_exceeds_its_budget(given_layers):
    for layer in assemble(given_layers, TOKENIZER).layers:
        assert layer.tokens <= layer.budget
        assert layer.tokens == TOKENIZER.count(layer.text)


@settings(max_examples=300)
@given(layers())
def test_the_prompt_is_the_layers_texts_and_each_count_is_of_exactly_that_text(given_layers):
    assembly = assemble(given_layers, TOKENIZER)
    assert assembly.prompt == LAYER_SEPARATOR.join(r.text for r in assembly.layers if r.text)
    assert all(r.estimated for r in assembly.layers) and assembly.estimated


@settings(max_examples=300)
@given(layers())
def test_units_are_never_split_except_the_one_truncate_tail_cuts(given_layers):
    assembly = assemble(given_layers, TOKENIZER)
    for layer, result in zip(given_layers, assembly.layers, strict=True):
        texts_by_id = {u.source_id: u.text for u in layer.units}
        kept = [texts_by_id[k.source_id] for k in result.kept]
        if layer.strategy == "truncate_tail" and result.truncated:
            whole = UNIT_SEPARATOR.join(u.text for u in layer.units)
            assert result.text.endswith(TRUNCATION_MARKER)
            assert whole.startswith(result.text.removesuffix(TRUNCATION_MARKER))
            assert [k.truncated for k in result.kept].count(True) <= 1
        else:
            assert result.text == UNIT_SEPARATOR.join(kept)
        assert {k.source_id for k in result.kept}.isdisjoint({d.source_id for d in result.dropped})
        assert len(result.kept) + len(result.dropped) == len(layer.units)


@settings(max_examples=300)
@given(st.lists(texts, min_size=1, max_size=10), st.integers(min_value=1, max_value=40))
def test_a_unit_larger_than_the_budget_is_dropped_whole(unit_texts, budget):
    units = tuple(Unit(f"u{i}", t) for i, t in enumerate(unit_texts))
    result = assemble([Layer("rules", "drop_whole_units", budget, units)], TOKENIZER).layers[0]
    for unit in units:
        if TOKENIZER.count(unit.text) > budget:
            dropped = [d for d in result.dropped if d.source_id == unit.source_id]
            assert dropped and dropped[0].reason == REASON_UNIT_TOO_LARGE


@settings(max_examples=300)
@given(st.lists(texts, max_size=12), st.integers(min_value=0, max_value=60))
def test_units_are_dropped_from_the_head_in_the_documented_order(unit_texts, budget):
    units = tuple(Unit(f"u{i}", t) for i, t in enumerate(unit_texts))
    result = assemble([Layer("rules", "drop_whole_units", budget, units)], TOKENIZER).layers[0]
    fitting = [u.source_id for u in units if TOKENIZER.count(u.text) <= budget]
    over = [d.source_id for d in result.dropped if d.reason == REASON_OVER_BUDGET]
    kept = [k.source_id for k in result.kept]
    if budget > 0:
        assert over + kept == fitting  # a head of the list dropped, the tail kept, in order
        # ... and no more than needed: putting back the last dropped unit would not fit.
        if over:
            back = UNIT_SEPARATOR.join(u.text for u in units if u.source_id in {over[-1], *kept})
            assert TOKENIZER.count(back) > budget


@settings(max_examples=500)
@given(
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=400),
    st.integers(min_value=0, max_value=120),
)
def test_the_truncated_prefix_never_splits_a_utf8_character(text, budget):
    result = assemble(
        [Layer("ctx", "truncate_tail", budget, (Unit("c", text),))], TOKENIZER
    ).layers[0]
    encoded = result.text.encode("utf-8", "surrogatepass")
    assert encoded.decode("utf-8", "surrogatepass") == result.text
    assert TOKENIZER.count(result.text) <= budget
    prefix = result.text.removesuffix(TRUNCATION_MARKER)
    assert text.startswith(prefix)
    if result.truncated and budget > TOKENIZER.count(TRUNCATION_MARKER) + 1:
        # as long as the budget allows: one more character would not have fitted
        longer = text[: len(prefix) + 1] + TRUNCATION_MARKER
        assert TOKENIZER.count(longer) > budget


@settings(max_examples=200)
@given(layers())
def test_the_same_input_gives_the_same_bytes(given_layers):
    first = assemble(given_layers, TOKENIZER)
    second = assemble(list(given_layers), ByteEstimate())
    assert first.prompt.encode() == second.prompt.encode()
    assert first == second


@settings(max_examples=200)
@given(st.lists(texts, max_size=6), st.integers(min_value=0, max_value=80))
def test_keep_or_drop_is_all_or_nothing(unit_texts, budget):
    units = tuple(Unit(f"u{i}", t) for i, t in enumerate(unit_texts))
    result = assemble([Layer("identity", "keep_or_drop", budget, units)], TOKENIZER).layers[0]
    assert len(result.kept) in (0, len(units))
    if not result.kept:
        assert result.tokens == 0 and result.text == ""


@settings(max_examples=200)
@given(
    st.lists(st.integers(min_value=0, max_value=50), max_size=1500),
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=-5, max_value=40_000),
)
def test_the_chunked_walk_finds_the_same_unit_as_a_plain_scan(lengths, separator, target):
    from policies.core.assembler import _first_start_at_or_after

    starts = [sum(lengths[:k]) + separator * k for k in range(len(lengths))]
    expected = next((k for k, start in enumerate(starts) if start >= target), len(lengths))
    assert _first_start_at_or_after(lengths, separator, target) == expected


@settings(max_examples=100)
@given(
    st.lists(st.text(alphabet="ab\n", max_size=30), min_size=300, max_size=900),
    st.integers(min_value=1, max_value=2000),
    st.sampled_from(STRATEGIES),
)
def test_long_layers_keep_every_guarantee(unit_texts, budget, strategy):
    units = tuple(Unit(f"u{i}", t) for i, t in enumerate(unit_texts))
    result = assemble([Layer("long", strategy, budget, units)], TOKENIZER).layers[0]
    assert result.tokens <= budget
    kept = [k.source_id for k in result.kept]
    if strategy == "drop_whole_units":
        fitting = [u.source_id for u in units if TOKENIZER.count(u.text) <= budget]
        assert [d.source_id for d in result.dropped if d.reason == REASON_OVER_BUDGET] + kept == (
            fitting
        )
        assert result.text == UNIT_SEPARATOR.join(u.text for u in units if u.source_id in kept)
    if strategy == "truncate_tail" and result.truncated:
        whole = UNIT_SEPARATOR.join(unit_texts)
        assert whole.startswith(result.text.removesuffix(TRUNCATION_MARKER))
        assert len(kept) + len(result.dropped) == len(units)


@settings(max_examples=100)
@given(
    st.lists(st.text(alphabet="ab\n", max_size=30), min_size=1, max_size=400),
    st.integers(min_value=0, max_value=2000),
    st.sampled_from(STRATEGIES),
)
def test_texts_held_as_a_column_assemble_exactly_as_the_records(unit_texts, budget, strategy):
    """The column is only another way to hand over the same texts: every result is equal."""
    units = tuple(Unit(f"u{i}", t) for i, t in enumerate(unit_texts))
    records = assemble([Layer("l", strategy, budget, units)], TOKENIZER).layers[0]
    column = Layer("l", strategy, budget, units, texts=tuple(unit_texts))
    assert assemble([column], TOKENIZER).layers[0] == records


def test_a_column_of_another_length_than_the_units_is_refused():
    with pytest.raises(ValueError, match="one text per unit"):
        Layer("l", "drop_whole_units", 10, (Unit("a", "x"),), texts=("x", "y"))


def test_counts_and_reasons_come_from_the_texts_fitted():
    """The column is what is fitted, so what is reported of each unit is measured on it."""
    units = (Unit("a", "x" * 100), Unit("b", "y" * 8))
    result = assemble(
        [Layer("l", "drop_whole_units", 3, units, texts=("x" * 40, "y" * 8))], TOKENIZER
    ).layers[0]
    assert [(k.source_id, k.tokens) for k in result.kept] == [("b", 2)]
    assert [(d.source_id, d.tokens, d.reason) for d in result.dropped] == [
        ("a", 10, REASON_UNIT_TOO_LARGE)
    ]


@settings(max_examples=200)
@given(
    st.integers(min_value=1, max_value=120),
    st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=600),
    st.integers(min_value=1, max_value=20_000),
)
def test_the_guessed_boundary_is_the_walked_one(base, jitter, room):
    """Units of nearly even length (the guess from the mean holds) and of uneven length
    (it does not, and says so): whenever the guess answers, it is the strided walk's
    answer, text and kept units alike."""
    from policies.core.assembler import _drop_head_by_estimate, _drop_head_by_length

    texts = tuple("x" * (base + extra * (i % 3)) for i, extra in enumerate(jitter))
    joined = UNIT_SEPARATOR.join(texts)
    if len(joined) <= room:
        return  # all fits: neither is asked
    guessed = _drop_head_by_estimate(texts, joined, room, REASON_OVER_BUDGET)
    walked = _drop_head_by_length(texts, joined, room, REASON_OVER_BUDGET)
    if guessed is not None:
        assert walked is not None
        assert (guessed.text, list(guessed.kept)) == (walked.text, list(walked.kept))
        assert len(guessed.text) <= room


def test_the_guess_answers_for_units_of_even_length():
    from policies.core.assembler import _drop_head_by_estimate

    texts = tuple(f"Rule {i:07d}: keep pages short." for i in range(1_000))
    joined = UNIT_SEPARATOR.join(texts)
    plan = _drop_head_by_estimate(texts, joined, len(joined) // 2, REASON_OVER_BUDGET)
    assert plan is not None and plan.text == UNIT_SEPARATOR.join(texts[plan.kept[0] :])


@settings(max_examples=200)
@given(
    st.lists(st.text(alphabet="ab", min_size=0, max_size=40), min_size=1, max_size=400),
    st.data(),
)
def test_the_unit_an_offset_falls_in_is_found_alike_guessed_or_walked(unit_texts, data):
    """The offset's unit by the mean (given the joined length) is the plain scan's."""
    from policies.core.assembler import _joined_length, _unit_at

    joined = UNIT_SEPARATOR.join(unit_texts)
    offset = data.draw(st.integers(min_value=0, max_value=len(joined)))
    starts, position = [], 0
    for text in unit_texts:
        starts.append(position)
        position += len(text) + len(UNIT_SEPARATOR)
    expected = max(i for i, start in enumerate(starts) if start <= offset)
    for index, start, head in (
        _unit_at(unit_texts, offset),
        _unit_at(unit_texts, offset, _joined_length, len(joined)),
    ):
        assert (index, start) == (expected, starts[expected])
        assert joined.startswith(head)  # what it built is the text's own prefix


def test_a_layer_result_built_at_the_floor_is_the_one_its_constructor_gives():
    """``_built`` fills an instance in one step; it must leave exactly the state
    ``__init__`` does, field for field, or a field added later would go missing."""
    from dataclasses import fields

    from policies.core.assembler import Assembly, LayerResult, _built, _Plan

    values = {
        f.name: (f"value of {f.name}" if f.type == "str" else object()) for f in fields(LayerResult)
    }
    values["_plan"] = _Plan("text")
    assert vars(_built(LayerResult, **values)) == vars(LayerResult(**values))
    # and the assembler names every field when it builds one
    built = assemble([Layer("rules", "drop_whole_units", 1, (Unit("r", "x" * 9),))], ByteEstimate())
    assert {f.name for f in fields(LayerResult)} <= set(vars(built.layers[0]))
    assert {f.name for f in fields(Assembly)} == set(vars(built))
