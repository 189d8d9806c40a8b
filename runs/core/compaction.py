"""Three-tier message compaction (SPEC R10), pure: the worker hands it the whole conversation
before each model request and sends what comes back, so a long run keeps fitting the model's
context without the loop ever losing track of what the conversation is.

- Tier 1: while the conversation is at most ``whole_tokens``, every message goes whole.
- Tier 2: above it, the oldest turns (an assistant message and the user message holding its
  tool results) are replaced, oldest first, by short extractive summaries, until the total is
  at most ``whole_tokens`` or only the newest ``keep_recent_turns`` turns remain.
- Tier 3: if it is still above ``summary_tokens``, the oldest summaries are dropped too, and the
  summary says how many turns went.

The result is always a conversation the Messages API accepts (``validity.check_valid``): the
task stays first and whole, roles alternate, and a tool call is never separated from its
result: a turn is summarized or dropped as a whole. The summaries go in one user message after
the task; one short assistant message labelled as the harness's sits between the two, because
the task must stay byte-identical (it is the prompt's stable, cached prefix) and two user
messages in a row would break the alternation.

A tier is applied only if it makes the prompt smaller, and a summary is never larger than the
turn it replaces; so compaction never grows a prompt, and tightening the thresholds never lowers
the tier. Tokens are the project's estimate (``ByteEstimate``: ``ceil(utf8 bytes / 4)``) of each
message's JSON, the same for every model, so a compaction is reproducible from the records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import Any, Final, Literal

from policies.core.tokenizer import ByteEstimate, utf8_length

from .validity import Checked, block_count, check_valid

SUMMARY_HEADER: Final = "[Earlier turns, summarized by the harness]"
BRIDGE_TEXT: Final = "[Harness] The earlier turns were compacted; their summary follows."
MAX_SUMMARY_CHARS: Final = 600  # per turn: a summary is a reminder, not a transcript
MAX_FACT_CHARS: Final = 160
MAX_ARGUMENT_CHARS: Final = 80
MAX_PATHS: Final = 8
MAX_DECISIONS: Final = 2
MIN_TRUNCATED_FACT: Final = 16  # a shorter stump of a fact says nothing; it is left out
# The arguments that say what a tool call was about (the built-in tools' names for them).
KEY_ARGUMENTS: Final = ("path", "source", "target", "pattern", "glob", "query", "command")

_TOKENIZER: Final = ByteEstimate()
_DECISION = re.compile(
    r"\b(?:approv\w*|reject\w*|refus\w*|denied|deny|decision|decided|declin\w*)", re.IGNORECASE
)
_URL = re.compile(r"\b\w+://\S+")
# A path with a slash (src/app/models.py, ./x, /etc/hosts), or a file name with an extension
# (README.md); names of one letter before the dot ("e.g.") and numbers ("3.12") are not paths.
_PATH = re.compile(
    r"(?<![\w./~-])(?:\.{1,2}/|~/|/)?(?:[\w.-]+/)+[\w.-]*\w"
    r"|(?<![\w./-])[\w-]{2,}(?:\.[\w-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}\b"
)
_SENTENCE = re.compile(r"(.+?[.!?])(?=\s|$)")


# --- thresholds and results ---------------------------------------------------------------
@dataclass(frozen=True)
class Thresholds:
    """When each tier starts. ``whole_tokens`` is where compaction begins; ``summary_tokens`` is
    the ceiling above which facts are lost (summaries dropped) rather than overrun the model."""

    whole_tokens: int = 24_000  # at most this total, every message stays whole (tier 1)
    summary_tokens: int = 48_000  # above this after summarizing, oldest summaries go (tier 3)
    keep_recent_turns: int = 4  # the newest turns always stay whole

    def __post_init__(self) -> None:
        for name in ("whole_tokens", "summary_tokens", "keep_recent_turns"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, not {value!r}.")
        if self.whole_tokens < 1 or self.summary_tokens < 1:
            raise ValueError(
                f"Token thresholds must be positive (whole_tokens={self.whole_tokens}, "
                f"summary_tokens={self.summary_tokens})."
            )
        if self.whole_tokens >= self.summary_tokens:
            raise ValueError(
                f"whole_tokens ({self.whole_tokens}) must be below summary_tokens "
                f"({self.summary_tokens}): summaries start before they are dropped."
            )
        if self.keep_recent_turns < 1:
            raise ValueError(
                f"keep_recent_turns must be at least 1 ({self.keep_recent_turns}): the model "
                "needs its latest turn whole to continue it."
            )


@dataclass(frozen=True)
class TurnSummary:
    """One turn, as the facts kept of it. ``text`` is ``"; ".join(facts)``."""

    first_index: int  # the turn's messages in the original conversation, inclusive
    last_index: int
    text: str
    tokens: int  # estimated tokens of ``text``
    facts: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "first_index": self.first_index,
            "last_index": self.last_index,
            "text": self.text,
            "tokens": self.tokens,
            "facts": list(self.facts),
        }


@dataclass(frozen=True)
class Compacted:
    """What to send, and what was done to get it (shown on the run page, kept in the record).

    The kept messages are the input's own dicts, not copies: treat them as read-only."""

    messages: list[dict[str, Any]]
    tier: Literal[1, 2, 3]  # the highest tier applied
    summarized: tuple[TurnSummary, ...]  # turns replaced by summaries still in the prompt
    dropped: tuple[tuple[int, int], ...]  # (first, last) message indices of each dropped turn
    tokens_before: int
    tokens_after: int
    # The input's check (not the output's): what the next turn's compaction starts from.
    checked: Checked | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "message_count": len(self.messages),
            "summarized": [summary.to_json() for summary in self.summarized],
            "dropped": [list(span) for span in self.dropped],
        }

    def brief(self) -> dict[str, Any]:
        """What the run keeps of its latest compaction: the tier, the tokens and how many
        turns went into summaries or were dropped, without the summaries themselves (a
        long run has hundreds, rewritten with the run at every turn)."""
        return {
            "tier": self.tier,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "message_count": len(self.messages),
            "summarized_turns": len(self.summarized),
            "dropped_turns": len(self.dropped),
        }

    def since(self, before: Mapping[str, Any] | None) -> dict[str, Any]:
        """The record of this compaction after ``before`` (an earlier one of the same
        conversation, as :meth:`brief` or :meth:`to_json` made it): the brief, with the
        summaries and the dropped turns that are new since. The compacted turns are the
        oldest, so what was compacted then is the first of them: each turn's summary is
        recorded once in the run's history, not again at every turn after it."""
        summarized = _count(before, "summarized_turns", "summarized")
        dropped = _count(before, "dropped_turns", "dropped")
        compacted_end = 1 + 2 * (summarized + dropped)  # the first message not compacted then
        return {
            **self.brief(),
            "summarized": [s.to_json() for s in self.summarized if s.first_index >= compacted_end],
            "dropped": [list(span) for span in self.dropped if span[0] >= 1 + 2 * dropped],
        }


def _count(record: Mapping[str, Any] | None, counted: str, listed: str) -> int:
    """How many turns an earlier record says went: its count, or (a record from before
    counts were kept) the length of its list; none when it says neither."""
    if not isinstance(record, Mapping):
        return 0
    value = record.get(counted)
    if type(value) is int and value >= 0:
        return value
    items = record.get(listed)
    return len(items) if isinstance(items, list) else 0


# A turn's summary and its entry's bytes in the summary message, by the turn's place and
# its two messages' block counts: kept by the caller across the turns of one conversation,
# which only grows at its end, so that an old turn is summarized once, not at every turn.
Summaries = MutableMapping[tuple[int, int, int, int], tuple[TurnSummary, int]]


# --- sizes ------------------------------------------------------------------------------------
def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json_bytes(message: Mapping[str, Any]) -> int:
    return utf8_length(_json(message))


def _encoded_length(text: str) -> int:
    """Bytes ``text`` adds inside a JSON string; additive over concatenation, which lets the
    compactor price summaries without rendering the whole summary message again."""
    return utf8_length(json.dumps(text, ensure_ascii=False)) - 2


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """``ceil(utf-8 bytes of the message's compact JSON / 4)``: ``ByteEstimate`` on what is sent."""
    return _TOKENIZER.tokens_for_size(_json_bytes(message))


def _turns(count: int) -> list[tuple[int, int]]:
    """(first, last) message indices of each turn of a valid conversation of ``count`` messages;
    only the last turn can lack its user message."""
    return [(first, min(first + 1, count - 1)) for first in range(1, count, 2)]


# --- summaries ------------------------------------------------------------------------------
def _clean(text: str) -> str:
    return " ".join(text.split())


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _first_sentence(text: str) -> str:
    line = _clean(_first_line(text))
    match = _SENTENCE.match(line)
    return _cap(match.group(1) if match else line, MAX_FACT_CHARS)


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _result_text(block: Mapping[str, Any]) -> tuple[str, str]:
    """A tool result's readable text and its error message. The console's tools answer with a
    JSON object (``{"ok": false, "error": ...}``): its strings are read, not its syntax, so
    escapes such as ``\\n`` are not mistaken for part of a path."""
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(
            item["text"]
            for item in content
            if isinstance(item, Mapping) and isinstance(item.get("text"), str)
        )
    if not isinstance(content, str):
        return "", ""
    if content.lstrip().startswith("{"):
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            error = parsed.get("error")
            return "\n".join(_strings(parsed)), error if isinstance(error, str) else ""
    return content, ""


def _argument(value: Any) -> str:
    text = value if isinstance(value, str) else _json(value)
    return _cap(_clean(text), MAX_ARGUMENT_CHARS)


def _truncate(text: str, max_chars: int, max_bytes: int) -> str:
    """The longest prefix of ``text`` plus "…" within both limits, or "" if none fits."""
    low, high = 0, min(len(text), max_chars - 1)
    while low < high:
        middle = (low + high + 1) // 2
        if _encoded_length(text[:middle]) + 3 <= max_bytes:
            low = middle
        else:
            high = middle - 1
    return text[:low].rstrip() + "…" if low > 0 else ""


def _entry_label(first_index: int, last_index: int) -> str:
    return f"- messages {first_index}-{last_index}: "


def _entry(summary: TurnSummary) -> str:
    label = _entry_label(summary.first_index, summary.last_index)
    return label + summary.text if summary.text else label.rstrip(": ")


def _paths(texts: Iterable[str], known: str) -> list[str]:
    """Up to ``MAX_PATHS`` paths the texts mention that the calls' arguments do not show;
    stops early, since a tool's output can list thousands."""
    found: dict[str, None] = {}
    for text in texts:
        for match in _PATH.finditer(_URL.sub(" ", text)):
            if match.group(0) not in known:
                found.setdefault(match.group(0))
                if len(found) == MAX_PATHS:
                    return list(found)
    return list(found)


def _decisions(texts: Iterable[str], facts: Sequence[str]) -> list[str]:
    """Up to ``MAX_DECISIONS`` lines that mention an approval, decision or refusal, unless a
    fact already says it (a rejected call's error, say)."""
    decisions: list[str] = []
    for text in texts:
        for line in text.splitlines():
            if _DECISION.search(line):
                decision = _cap(_clean(line), MAX_FACT_CHARS)
                if decision not in decisions and not any(decision in fact for fact in facts):
                    decisions.append(decision)
                    if len(decisions) == MAX_DECISIONS:
                        return decisions
    return decisions


def _facts(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The turn's key facts, most telling first: what the assistant set out to do, each tool
    call with the arguments that say what it touched (and how it failed), any approval,
    decision or refusal, and the other file paths mentioned."""
    said = ""
    calls: dict[str, str] = {}
    errors: dict[str, str] = {}
    argument_values: list[str] = []
    scanned: list[str] = []  # every text, for the paths it mentions
    decisive: list[str] = []  # the texts a decision is told in: not tool output that succeeded
    for message in messages:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                if message.get("role") == "assistant" and not said and block["text"].strip():
                    said = _first_sentence(block["text"])
                scanned.append(block["text"])
                decisive.append(block["text"])
            elif kind == "tool_use":
                given = block.get("input")
                arguments: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
                shown = [
                    f"{key}={_argument(arguments[key])}"
                    for key in KEY_ARGUMENTS
                    if key in arguments
                ]
                argument_values += [
                    str(arguments[key]) for key in KEY_ARGUMENTS if key in arguments
                ]
                name = _cap(_clean(str(block.get("name", "?"))), MAX_ARGUMENT_CHARS)
                calls[str(block.get("id"))] = name + (f"({', '.join(shown)})" if shown else "")
            elif kind == "tool_result":
                text, error = _result_text(block)
                scanned.append(text)
                if block.get("is_error"):
                    decisive.append(text)
                    error = _cap(_clean(_first_line(error or text)), MAX_FACT_CHARS)
                    errors[str(block.get("tool_use_id"))] = error or "(no message)"
    facts = [f'said "{said}"'] if said else []
    facts += [
        call + (f" failed: {errors[id_]}" if id_ in errors else "") for id_, call in calls.items()
    ]
    facts += [f"a tool call failed: {error}" for id_, error in errors.items() if id_ not in calls]
    facts += [f"noted: {decision}" for decision in _decisions(decisive, facts)]
    paths = _paths(scanned, " ".join(argument_values))
    if paths:
        facts.append("paths: " + ", ".join(paths))
    return facts


def summarize_turn(messages: Sequence[Mapping[str, Any]], first_index: int = 0) -> TurnSummary:
    """A deterministic, extractive summary of one turn (no model call: it is cheap, cannot
    invent anything, and the same turn always reads the same, which keeps the prompt cacheable).

    ``first_index`` is the turn's position in the conversation. The text is at most
    ``MAX_SUMMARY_CHARS``, and its entry in the summary message is never larger than the turn's
    own JSON, so replacing a turn by its summary never grows the prompt."""
    last_index = first_index + max(len(messages), 1) - 1
    room = sum(_json_bytes(message) for message in messages)
    room -= len(_entry_label(first_index, last_index)) + _encoded_length("\n")
    kept: list[str] = []
    used_chars = used_bytes = 0
    for fact in _facts(messages):
        separator = "; " if kept else ""
        chars, size = len(separator + fact), _encoded_length(separator + fact)
        if used_chars + chars <= MAX_SUMMARY_CHARS and used_bytes + size <= room:
            kept.append(fact)
            used_chars, used_bytes = used_chars + chars, used_bytes + size
            continue
        stump = _truncate(
            fact,
            MAX_SUMMARY_CHARS - used_chars - len(separator),
            room - used_bytes - len(separator),
        )
        if len(stump) >= MIN_TRUNCATED_FACT:
            kept.append(stump)
        break
    text = "; ".join(kept)
    return TurnSummary(first_index, last_index, text, _TOKENIZER.count(text), tuple(kept))


# --- compaction -----------------------------------------------------------------------------
def _bridge() -> dict[str, Any]:
    return {"role": "assistant", "content": BRIDGE_TEXT}


def _header(dropped: int) -> str:
    if not dropped:
        return SUMMARY_HEADER
    turns = "1 older turn was" if dropped == 1 else f"{dropped} older turns were"
    return f"{SUMMARY_HEADER} {turns} dropped entirely to fit the context window."


def _summary_message(dropped: int, summaries: Sequence[TurnSummary]) -> dict[str, Any]:
    text = _header(dropped) + "".join("\n" + _entry(summary) for summary in summaries)
    return {"role": "user", "content": text}


@cache
def _bridge_tokens() -> int:
    return estimate_tokens(_bridge())


@lru_cache(maxsize=1024)
def _header_bytes(dropped: int) -> int:
    """The summary message's bytes without its entries (the header says how many went)."""
    return _json_bytes(_summary_message(dropped, ()))


def _tokens_with_block(whole_tokens: int, dropped: int, entry_bytes: int) -> int:
    """The prompt's tokens: the messages kept whole, the bridge, and the summary message whose
    entries take ``entry_bytes`` inside its JSON (priced without rendering it)."""
    summary_bytes = _header_bytes(dropped) + entry_bytes
    return whole_tokens + _bridge_tokens() + _TOKENIZER.tokens_for_size(summary_bytes)


def _summarized(
    messages: Sequence[Mapping[str, Any]], first: int, last: int, kept: Summaries
) -> tuple[TurnSummary, int]:
    """The turn's summary and its entry's bytes, from ``kept`` when it holds the same turn."""
    key = (first, last, block_count(messages[first]), block_count(messages[last]))
    found = kept.get(key)
    if found is None:
        summary = summarize_turn(messages[first : last + 1], first_index=first)
        found = kept[key] = (summary, _encoded_length("\n" + _entry(summary)))
    return found


def _build(
    messages: Sequence[dict[str, Any]],
    tier: Literal[2, 3],
    summaries: Sequence[TurnSummary],
    dropped: int,
    tokens_before: int,
    sizes: Sequence[int],
) -> Compacted:
    first_kept = summaries[-1].last_index + 1
    kept = summaries[dropped:]
    block = _summary_message(dropped, kept)
    result = [messages[0], _bridge(), block, *messages[first_kept:]]
    whole = sizes[0] + sum(sizes[first_kept:])  # the messages kept as they were, as priced
    return Compacted(
        messages=result,
        tier=tier,
        summarized=tuple(kept),
        dropped=tuple((s.first_index, s.last_index) for s in summaries[:dropped]),
        tokens_before=tokens_before,
        tokens_after=whole + _bridge_tokens() + estimate_tokens(block),
    )


def compact(
    messages: Sequence[dict[str, Any]],
    thresholds: Thresholds,
    sizes: Sequence[int] | None = None,
    checked: Checked | None = None,
    summaries: Summaries | None = None,
) -> Compacted:
    """The conversation to send now, compacted as far as the thresholds ask (see the module's
    docstring). The input is never changed; an invalid conversation raises ``ValueError``,
    since no compaction of it could be valid. ``sizes``: each message's
    :func:`estimate_tokens`, when the caller kept them from an earlier turn; ``checked``:
    the input's check one turn ago (``Compacted.checked``), when the caller kept it;
    ``summaries``: the turns summarized so far, which this call reads and adds to (once a
    long conversation is above ``whole_tokens``, every turn's compaction summarizes all of
    its old turns: without them, a step cost more the longer its run)."""
    try:
        valid = check_valid(messages, checked)
    except ValueError as error:
        raise ValueError(f"Cannot compact an invalid conversation: {error}") from error
    if sizes is None or len(sizes) != len(messages):
        sizes = [estimate_tokens(message) for message in messages]
    before = sum(sizes)
    best = Compacted(list(messages), 1, (), (), before, before, valid)
    if before <= thresholds.whole_tokens:
        return best
    turns = _turns(len(messages))
    old = turns[: max(len(turns) - thresholds.keep_recent_turns, 0)]
    if not old:
        return best

    # Tier 2: summarize the oldest turns, one at a time, until the prompt fits.
    kept = {} if summaries is None else summaries
    made: list[TurnSummary] = []
    entry_sizes: list[int] = []
    whole, total, entry_bytes = before, before, 0
    for first, last in old:
        if total <= thresholds.whole_tokens:
            break
        summary, size = _summarized(messages, first, last, kept)
        made.append(summary)
        entry_sizes.append(size)
        entry_bytes += size
        whole -= sum(sizes[first : last + 1])
        total = _tokens_with_block(whole, 0, entry_bytes)
    if total < before:
        best = _build(messages, 2, made, 0, before, sizes)

    # Tier 3: still too large once every old turn is a summary; drop the oldest summaries.
    if total > thresholds.summary_tokens:
        dropped, remaining = 0, entry_bytes
        while total > thresholds.summary_tokens and dropped < len(made):
            remaining -= entry_sizes[dropped]
            dropped += 1
            total = _tokens_with_block(whole, dropped, remaining)
        if total < best.tokens_after:
            best = _build(messages, 3, made, dropped, before, sizes)
    return best if best.checked is valid else replace(best, checked=valid)
