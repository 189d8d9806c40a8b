"""The prompt assembler of SPEC C1–C3 (ADR 0006): a pure function of layers and a tokenizer.

No I/O, no database, no clock: the same layers give the same prompt, byte for byte. The
context builder gathers the data; this module only decides what fits.

Strategies, applied when a layer's text exceeds its budget:

- ``drop_whole_units`` (list layers). Units are given in drop order (business rules oldest
  first, instruction files lowest priority first). First, a unit that alone is larger than
  the whole budget is dropped whole; then units are dropped from the head until the rest fits.
  A unit is never cut; the layer may end empty.
- ``truncate_tail`` (blob layers). The units form one text; a prefix of it that fits the
  budget *together with* the marker ``[... truncated ...]`` is kept. The cut falls between
  characters, so it never splits a UTF-8 sequence; units wholly after the cut are reported
  dropped, the one that was cut is reported truncated.
- ``keep_or_drop`` (identity and the like). All or nothing: half an identity is useless.

A layer's ``tokens`` is the tokenizer's count of exactly the text it contributes to the
prompt; layers join with a blank line, which belongs to no layer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate, repeat
from operator import add, attrgetter
from typing import Any, Final, Literal, NamedTuple, get_args

from .tokenizer import Tokenizer

Strategy = Literal["drop_whole_units", "truncate_tail", "keep_or_drop"]
STRATEGIES: Final[tuple[Strategy, ...]] = get_args(Strategy)
UNIT_SEPARATOR: Final = "\n\n"
LAYER_SEPARATOR: Final = "\n\n"
TRUNCATION_MARKER: Final = "\n[... truncated ...]"  # ASCII: keeps ASCII text ASCII

REASON_OVER_BUDGET: Final = "over budget: dropped from the head of the list until the rest fits"
REASON_UNIT_TOO_LARGE: Final = "larger than the whole layer budget (a unit is never split)"
REASON_ALL_OR_NOTHING: Final = (
    "keep_or_drop: the layer does not fit its budget, so none of it is kept"
)
REASON_AFTER_CUT: Final = "truncate_tail: after the truncation point"
REASON_NO_ROOM: Final = "truncate_tail: the budget cannot hold even the truncation marker"
REASON_ZERO_BUDGET: Final = "the layer's budget is 0"


@dataclass(frozen=True)
class Unit:
    """One indivisible piece of a layer, with where it came from (SPEC C9)."""

    source_id: str
    text: str
    title: str = ""
    path: str = ""
    timestamp: str = ""
    trust_level: str = ""


@dataclass(frozen=True)
class Rejected:
    """A unit its loader refused before assembly (a broken file, say), reported with it."""

    source_id: str
    reason: str
    path: str = ""


@dataclass(frozen=True)
class Layer:
    name: str
    strategy: Strategy
    budget: int
    units: tuple[Unit, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    # What the head of the list is, in the layer's own words ("the least specific files"):
    # the reason given for a unit dropped over budget then names the rule that dropped it.
    drop_order: str = ""
    # The units' texts as a column of their own, for a caller that holds them so (a loader
    # that keeps what it read as a list of texts beside the records): fitting then reads
    # this list and never the records. Left out, it is read off the units.
    texts: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.texts is not None and len(self.texts) != len(self.units):
            raise ValueError(f"Layer {self.name!r}: one text per unit, in the units' order.")
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"Layer {self.name!r}: unknown strategy {self.strategy!r}; "
                f"use one of {', '.join(STRATEGIES)}."
            )
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 0:
            raise ValueError(f"Layer {self.name!r}: the budget must be a whole number ≥ 0.")


@dataclass(frozen=True)
class Kept:
    source_id: str
    tokens: int
    truncated: bool = False


@dataclass(frozen=True)
class Dropped:
    source_id: str
    tokens: int
    reason: str
    path: str = ""


class _Plan(NamedTuple):
    """What a strategy decided, by unit index; records are built only when someone looks.

    A named tuple, not a frozen dataclass: as immutable, and built in a third of the time,
    which counts at the assembly floor (issue 20) where one is built per layer."""

    text: str
    kept: Sequence[int] = ()
    dropped: tuple[tuple[Sequence[int], str], ...] = ()
    cut_index: int | None = None  # the kept unit truncate_tail cut
    cut_text: str = ""
    truncated: bool = False
    # The first dropped group holds units too large for the budget among those dropped over
    # it: which are which is decided only when the records are built.
    by_size: int | None = None  # the budget in size units that a unit may not exceed


@dataclass(frozen=True, eq=False)
class LayerResult:
    name: str
    position: int
    strategy: Strategy
    budget: int
    tokens: int
    estimated: bool
    truncated: bool
    text: str = field(repr=False)
    _units: tuple[Unit, ...] = field(repr=False, default=())
    _texts: Sequence[str] = field(repr=False, default=())  # what was fitted, unit by unit
    _rejected: tuple[Rejected, ...] = field(repr=False, default=())
    _plan: _Plan = field(repr=False, default=_Plan(""))
    _tokenizer: Tokenizer | None = field(repr=False, default=None)

    @cached_property
    def kept(self) -> tuple[Kept, ...]:
        plan, count = self._plan, self._count
        return tuple(
            Kept(self._units[i].source_id, count(plan.cut_text), truncated=True)
            if i == plan.cut_index
            else Kept(self._units[i].source_id, count(self._texts[i]))
            for i in plan.kept
        )

    @cached_property
    def dropped(self) -> tuple[Dropped, ...]:
        rejected = tuple(Dropped(r.source_id, 0, r.reason, r.path) for r in self._rejected)
        groups = list(self._plan.dropped)
        if self._plan.by_size is not None and groups:
            (indices, over), room = groups[0], self._plan.by_size
            large = [i for i in indices if len(self._texts[i]) > room]
            taken = set(large)
            groups[0:1] = [
                (large, REASON_UNIT_TOO_LARGE),
                ([i for i in indices if i not in taken], over),
            ]
        return rejected + tuple(
            Dropped(
                self._units[i].source_id,
                self._count(self._texts[i]),
                reason,
                self._units[i].path,
            )
            for indices, reason in groups
            for i in indices
        )

    def _count(self, text: str) -> int:
        return self._tokenizer.count(text) if self._tokenizer else 0

    def _key(self) -> tuple:
        return (
            self.name,
            self.position,
            self.strategy,
            self.budget,
            self.tokens,
            self.estimated,
            self.truncated,
            self.text,
            self.kept,
            self.dropped,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LayerResult) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.name, self.position, self.text))


def _built[T](cls: type[T], **fields: Any) -> T:
    """The instance ``cls(**fields)`` gives, every field named, filled in one step: a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, which
    for a result's thirteen fields is most of an assembly's cost over the join floor at
    1,000 units (issue 20). For classes without ``__post_init__``; the assembler's tests
    check the two agree."""
    result = object.__new__(cls)
    result.__dict__.update(fields)
    return result


@dataclass(frozen=True)
class Assembly:
    layers: tuple[LayerResult, ...]
    prompt: str
    tokens: int
    estimated: bool

    def layer(self, name: str) -> LayerResult:
        return next(layer for layer in self.layers if layer.name == name)


def assemble(layers: Sequence[Layer], tokenizer: Tokenizer) -> Assembly:
    """Fit each layer into its budget and join the survivors into the prompt."""
    names = [layer.name for layer in layers]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"Duplicate layer {', '.join(map(repr, duplicates))}.")
    results = tuple([_fit(layer, position, tokenizer) for position, layer in enumerate(layers, 1)])
    prompt = LAYER_SEPARATOR.join([result.text for result in results if result.text])
    return _built(
        Assembly,
        layers=results,
        prompt=prompt,
        tokens=tokenizer.count(prompt),
        estimated=tokenizer.estimated,
    )


def _fit(layer: Layer, position: int, tokenizer: Tokenizer) -> LayerResult:
    texts = layer.texts if layer.texts is not None else tuple(map(_TEXT, layer.units))
    if layer.budget == 0 and texts:
        plan = _Plan("", (), ((range(len(texts)), REASON_ZERO_BUDGET),))
    elif layer.strategy == "drop_whole_units":
        over = over_budget_reason(layer.drop_order)
        plan = _drop_whole_units(texts, layer.budget, tokenizer, over)
    elif layer.strategy == "truncate_tail":
        plan = _truncate_tail(texts, layer.budget, tokenizer)
    else:
        plan = _keep_or_drop(texts, layer.budget, tokenizer)
    return _built(
        LayerResult,
        name=layer.name,
        position=position,
        strategy=layer.strategy,
        budget=layer.budget,
        tokens=tokenizer.count(plan.text) if plan.text else 0,
        estimated=tokenizer.estimated,
        truncated=plan.truncated,
        text=plan.text,
        _units=layer.units,
        _texts=texts,
        _rejected=layer.rejected,
        _plan=plan,
        _tokenizer=tokenizer,
    )


_TEXT = attrgetter("text")


def _sizes(texts: Sequence[str], joined: str, tokenizer: Tokenizer) -> tuple[list[int], bool]:
    """Additive sizes of each text, and whether they are also character counts.

    When the tokenizer's size is the UTF-8 length and the joined text is ASCII (an O(1)
    check in CPython, true exactly when every unit is ASCII), ``len`` is the size.
    """
    if getattr(tokenizer, "size_is_utf8_length", False) and joined.isascii():
        return list(map(len, texts)), True
    return list(map(tokenizer.size, texts)), False


def over_budget_reason(drop_order: str = "") -> str:
    """The reason of a unit dropped over budget: which of the layer's units go first."""
    if not drop_order:
        return REASON_OVER_BUDGET
    return f"over budget: {drop_order} are dropped first, until the rest fits"


def _drop_whole_units(
    texts: Sequence[str], budget: int, tokenizer: Tokenizer, over: str = REASON_OVER_BUDGET
) -> _Plan:
    """Linear, and mostly in C: one join to see if all fits, one pass for sizes, a chunked
    walk for the head to drop, one join of what is left."""
    joined = UNIT_SEPARATOR.join(texts)
    if tokenizer.count(joined) <= budget:
        return _Plan(joined, range(len(texts)))
    room = _bytes_within(budget, tokenizer)
    if room is not None and joined.isascii():
        plan = _drop_head_by_estimate(texts, joined, room, over) or _drop_head_by_length(
            texts, joined, room, over
        )
        if plan is not None:
            return plan
    sizes, sizes_are_chars = _sizes(texts, joined, tokenizer)
    fits = tokenizer.tokens_for_size
    too_large: list[int] = []
    fitting: Sequence[int] = range(len(texts))
    if fits(max(sizes)) > budget:  # rare: take the slow path and set them aside
        too_large = [i for i, size in enumerate(sizes) if fits(size) > budget]
        excluded = set(too_large)
        fitting = [i for i in range(len(texts)) if i not in excluded]
        sizes = [sizes[i] for i in fitting]
    separator = tokenizer.size(UNIT_SEPARATOR)
    total = sum(sizes) + separator * max(0, len(sizes) - 1)
    room = _largest_size_within(budget, tokenizer, total)
    head = _first_start_at_or_after(sizes, separator, total - room)
    if sizes_are_chars and isinstance(fitting, range):  # what is left is a tail of ``joined``
        text = joined[sum(sizes[:head]) + separator * head :] if head < len(sizes) else ""
    else:
        text = _join_from(texts, fitting, head)
    # An exact tokenizer is only nearly additive: keep dropping while the true count is over.
    while head < len(fitting) and tokenizer.count(text) > budget:
        head += 1
        text = _join_from(texts, fitting, head)
    return _Plan(
        text,
        fitting[head:],
        ((too_large, REASON_UNIT_TOO_LARGE), (fitting[:head], over)),
    )


def _bytes_within(budget: int, tokenizer: Tokenizer) -> int | None:
    """The most UTF-8 bytes within ``budget`` for a tokenizer that counts bytes (None for
    any other): then an ASCII text's length is its size, and no count needs calling."""
    per_token = getattr(tokenizer, "bytes_per_token", None)
    if getattr(tokenizer, "size_is_utf8_length", False) and isinstance(per_token, int):
        return per_token * budget
    return None


def _drop_head_by_estimate(texts: Sequence[str], joined: str, room: int, over: str) -> _Plan | None:
    """The tail that fits ``room`` characters, guessed from the mean unit length and then
    walked a unit at a time to the exact boundary: one measure of the guessed tail, in C,
    and a few ``len`` calls, when units are of even length. None when the guess is more
    than a few units off (uneven units: the strides of :func:`_drop_head_by_length` find
    it) or the unit the boundary stops at is larger than the room."""
    separator, count = len(UNIT_SEPARATOR), len(texts)
    guess = first = max(0, min(count, count - int(room * count / (len(joined) + separator))))
    # The guessed tail is built and measured in one pass: when the guess is right (units of
    # even length) it is the text, and nothing else is measured or copied.
    text = UNIT_SEPARATOR.join(texts[first:])
    used = len(text) if first < count else -separator
    for _ in range(_WALK):
        if used > room and first < count:  # one too many: drop the head of the tail
            used, first = used - len(texts[first]) - separator, first + 1
        elif first > 0 and used + len(texts[first - 1]) + separator <= room:
            used, first = used + len(texts[first - 1]) + separator, first - 1
        else:
            break
    else:
        return None
    if first > 0 and len(texts[first - 1]) > room:
        return None
    if first != guess:
        text = joined[len(joined) - used :] if first < count else ""
    return _Plan(text, range(first, count), ((range(first), over),), by_size=room)


_WALK = 8


def _drop_head_by_length(texts: Sequence[str], joined: str, room: int, over: str) -> _Plan | None:
    """The longest tail of the units that fits ``room`` characters, found from the end in
    strides measured in C: only the kept part is measured, and the text is a slice of the
    join. A unit of a tail that fits is no larger than the room, so none needs checking but
    the one the walk stops at: if that one is larger than the room, it must be set aside
    and units before it kept instead, which the general path does (None)."""
    separator = len(UNIT_SEPARATOR)
    end, used = len(texts), -separator  # the size of the kept tail, joined
    # Each stride covers nine tenths of the room still left, at the mean unit length, so a
    # few strides reach the boundary whatever the number of units; one that overshoots
    # (units of uneven length) is halved; the last few units are walked one by one.
    mean = (len(joined) + separator) / len(texts)
    measure = _span_measure(len(joined), len(texts))
    longest = len(texts)
    while end > 0:
        step = min(longest, max(int(0.9 * (room - used) / mean), _TAIL_CHUNK))
        chunk = texts[max(0, end - step) : end]
        span = measure(chunk) + separator * len(chunk)
        if used + span <= room:
            used, end = used + span, end - len(chunk)
            continue
        if len(chunk) > _TAIL_CHUNK:
            longest = len(chunk) // 2
            continue
        for text in reversed(chunk):
            if used + len(text) + separator > room:
                if len(text) > room:
                    return None
                break
            used, end = used + len(text) + separator, end - 1
        break
    text = joined[len(joined) - used :] if end < len(texts) else ""
    return _Plan(text, range(end, len(texts)), ((range(end), over),), by_size=room)


_TAIL_CHUNK = 16
# Below this mean length, joining a run of short texts (one C pass and a copy) measures
# them faster than a ``len`` call per text; above it, the copy costs more than the calls.
_JOIN_MEASURES_BELOW = 512


def _joined_length(texts: Sequence[str]) -> int:
    return len("".join(texts))


def _summed_lengths(texts: Sequence[str]) -> int:
    return sum(map(len, texts))


def _span_measure(total: int, count: int) -> Callable[[Sequence[str]], int]:
    """How to measure the total length of a run of the layer's texts, by their mean."""
    return _joined_length if total < _JOIN_MEASURES_BELOW * max(1, count) else _summed_lengths


def _join_from(texts: Sequence[str], fitting: Sequence[int], head: int) -> str:
    if isinstance(fitting, range):
        return UNIT_SEPARATOR.join(texts[head:])
    return UNIT_SEPARATOR.join([texts[i] for i in fitting[head:]])


def _largest_size_within(budget: int, tokenizer: Tokenizer, upper: int) -> int:
    """The largest size whose token count fits the budget (bisection: ~log2(upper) calls)."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        if tokenizer.tokens_for_size(middle) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


_CHUNK = 256


def _first_start_at_or_after(lengths: Sequence[int], separator: int, target: int) -> int:
    """The first unit index whose start offset is ≥ ``target`` (``len(lengths)`` if none).

    Unit ``k`` starts at ``sum(lengths[:k]) + separator * k``. Whole chunks are skipped with
    C-level sums, so only one chunk is walked unit by unit.
    """
    position, index, count = 0, 0, len(lengths)
    if target <= 0:
        return 0
    while index < count:
        chunk = lengths[index : index + _CHUNK]
        span = sum(chunk) + separator * len(chunk)
        if position + span >= target:
            break
        position, index = position + span, index + len(chunk)
    else:
        return count
    for length in lengths[index : index + _CHUNK]:
        if position >= target:
            return index
        position, index = position + length + separator, index + 1
    return index


def _keep_or_drop(texts: Sequence[str], budget: int, tokenizer: Tokenizer) -> _Plan:
    text = UNIT_SEPARATOR.join(texts)
    if tokenizer.count(text) <= budget:
        return _Plan(text, range(len(texts)))
    return _Plan("", (), ((range(len(texts)), REASON_ALL_OR_NOTHING),))


def _truncate_tail(texts: Sequence[str], budget: int, tokenizer: Tokenizer) -> _Plan:
    text = UNIT_SEPARATOR.join(texts)
    if tokenizer.count(text) <= budget:
        return _Plan(text, range(len(texts)))
    if tokenizer.count(TRUNCATION_MARKER) > budget:
        return _Plan("", (), ((range(len(texts)), REASON_NO_ROOM),))
    cut = _longest_prefix(text, budget, tokenizer)
    # The unit the cut falls in (or, if it falls in a separator, the unit before it).
    # ``kept`` starts as the prefix of the text that finding the unit built, if it did.
    index, start, kept = _unit_at(texts, cut, _span_measure(len(text), len(texts)), len(text))
    whole = cut >= start + len(texts[index])
    first_dropped = index + 1 if (whole or cut > start) else index  # nothing of it kept
    cut_index = None if whole or cut == start else index
    if len(kept) > cut:
        kept = text[:cut]
    kept += text[len(kept) : cut]  # in place, as the marker is: the prefix is copied once
    kept += TRUNCATION_MARKER
    return _Plan(
        kept,
        range(first_dropped),
        ((range(first_dropped, len(texts)), REASON_AFTER_CUT),),
        cut_index=cut_index,
        cut_text=text[start:cut] if cut_index is not None else "",
        truncated=True,
    )


def _unit_at(
    texts: Sequence[str],
    offset: int,
    measure: Callable[[Sequence[str]], int] = _summed_lengths,
    length: int = 0,
) -> tuple[int, int, str]:
    """The index and start of the last unit starting at or before ``offset`` of the joined
    text: guessed from the mean unit length and walked a unit at a time when units are of
    even length, else walked from the head in chunks summed in C; either way only the
    units before the offset are measured. ``length``: that of the joined text, if known.

    Third, a prefix of the joined text that measuring built (the units before the guess,
    joined, when ``measure`` joins), which a caller cutting the text there extends instead
    of copying the text again; "" when none was built."""
    separator, count = len(UNIT_SEPARATOR), len(texts)
    if length and count > _UNIT_CHUNK:
        mean = (length + separator) / count
        index = min(count - 1, int(offset / mean))
        if measure is _joined_length:
            head = UNIT_SEPARATOR.join(texts[:index])
            position = len(head) + separator if index else 0
        else:
            head, position = "", measure(texts[:index]) + separator * index
        for _ in range(_WALK):
            if position > offset and index > 0:
                index -= 1
                position -= len(texts[index]) + separator
            elif index + 1 < count and position + len(texts[index]) + separator <= offset:
                position += len(texts[index]) + separator
                index += 1
            else:
                return index, position, head
    index, position = 0, 0  # the start of unit ``index``
    while True:
        chunk = texts[index : index + _UNIT_CHUNK]
        span = measure(chunk) + separator * len(chunk)
        if position + span > offset or index + len(chunk) >= len(texts):
            break
        index, position = index + len(chunk), position + span
    # Starts of the chunk's units after its first: bisect for the last one ≤ offset.
    starts = list(accumulate(map(add, map(len, chunk), repeat(separator)), initial=position))
    within = bisect_right(starts, offset, hi=len(chunk)) - 1
    return index + within, starts[within], ""


_UNIT_CHUNK = 64


def _longest_prefix(text: str, budget: int, tokenizer: Tokenizer) -> int:
    """The largest character index whose prefix plus the marker fits the budget.

    Slicing a ``str`` cuts between code points, so the prefix is always valid UTF-8. With a
    UTF-8-length tokenizer the index is computed directly (bytes, then back to the start of
    a character); any other tokenizer is bisected.
    """
    per_token = getattr(tokenizer, "bytes_per_token", None)
    if getattr(tokenizer, "size_is_utf8_length", False) and isinstance(per_token, int):
        room = per_token * budget - tokenizer.size(TRUNCATION_MARKER)
        if text.isascii():
            return max(0, min(room, len(text)))
        encoded = text.encode("utf-8", "surrogatepass")
        cut = max(0, min(room, len(encoded)))
        while 0 < cut < len(encoded) and encoded[cut] & 0xC0 == 0x80:
            cut -= 1  # back to the first byte of the character the room ends in
        return len(encoded[:cut].decode("utf-8", "surrogatepass"))
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if tokenizer.count(text[:middle] + TRUNCATION_MARKER) <= budget:
            low = middle
        else:
            high = middle - 1
    return low
