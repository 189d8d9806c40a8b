"""Retrieved material with provenance (SPEC C9), made ready for its layer.

Every segment keeps its source id, title, path or URL, timestamp and trust level. Segments
are ranked by trust, then relevance; the list is in drop order, so the least trusted and
least relevant go first when the layer is over budget. Large material is summarised before
it enters the prompt, stale material is labelled with its age, and segments that disagree
about the same document are reported as a conflict and kept side by side, never merged.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from .assembler import Rejected, Unit
from .tokenizer import utf8_length

# Ascending: an untrusted segment is dropped before a verified one.
TRUST_LEVELS: Final = ("untrusted", "external", "internal", "verified", "system")
TRUST_RANK: Final = {level: rank for rank, level in enumerate(TRUST_LEVELS)}


@dataclass(frozen=True)
class Segment:
    source_id: str
    title: str
    location: str  # a workspace path or a URL
    text: str
    trust_level: str
    relevance: float = 0.0
    timestamp: datetime | None = None


@dataclass(frozen=True)
class Conflict:
    location: str
    source_ids: tuple[str, ...]


@dataclass(frozen=True)
class RetrievalPolicy:
    stale_after: timedelta = timedelta(days=30)
    summarize_over_bytes: int = 8_000
    summary_bytes: int = 1_500


def _summary(text: str, limit: int) -> str:
    """Extractive and deterministic: headings and each paragraph's first sentence, in order."""
    picked: list[str] = []
    used = 0
    for block in re.split(r"\n\s*\n", text.strip()):
        block = block.strip()
        line = block if block.startswith("#") else re.split(r"(?<=[.!?])\s", block, maxsplit=1)[0]
        line = line.splitlines()[0] if line.startswith("#") else " ".join(line.split())
        cost = utf8_length(line) + 1
        if used + cost > limit:
            break
        picked.append(line)
        used += cost
    return "\n".join(picked)


def _age_label(timestamp: datetime | None, now: datetime, stale_after: timedelta) -> str:
    if timestamp is None or now - timestamp <= stale_after:
        return ""
    return f"[stale: {(now - timestamp).days} days old]"


def retrieved_units(
    segments: Iterable[Segment], *, now: datetime, policy: RetrievalPolicy = RetrievalPolicy()
) -> tuple[tuple[Unit, ...], tuple[Rejected, ...], tuple[Conflict, ...]]:
    """Rank, label and (when large) summarise segments; find conflicts; reject bad ones."""
    valid: list[Segment] = []
    rejected: list[Rejected] = []
    for segment in segments:
        if segment.trust_level not in TRUST_RANK:
            rejected.append(
                Rejected(
                    segment.source_id,
                    f"unknown trust level {segment.trust_level!r}",
                    segment.location,
                )
            )
        elif not segment.text.strip():
            rejected.append(Rejected(segment.source_id, "empty", segment.location))
        else:
            valid.append(segment)
    by_location: dict[str, list[Segment]] = defaultdict(list)
    for segment in valid:
        if segment.location:
            by_location[segment.location].append(segment)
    conflicts = tuple(
        Conflict(location, tuple(sorted(s.source_id for s in group)))
        for location, group in sorted(by_location.items())
        if len({s.text.strip() for s in group}) > 1
    )
    conflicted = {source for c in conflicts for source in c.source_ids}
    ranked = sorted(valid, key=lambda s: (TRUST_RANK[s.trust_level], s.relevance, s.source_id))
    units = tuple(_unit(s, now, policy, s.source_id in conflicted) for s in ranked)
    return units, tuple(rejected), conflicts


def _unit(segment: Segment, now: datetime, policy: RetrievalPolicy, conflicted: bool) -> Unit:
    stamp = segment.timestamp.isoformat() if segment.timestamp else "undated"
    labels = [
        f"[source {segment.source_id} · {segment.title} · {segment.location} · {stamp}"
        f" · trust {segment.trust_level}]"
    ]
    age = _age_label(segment.timestamp, now, policy.stale_after)
    if age:
        labels.append(age)
    if conflicted:
        labels.append(f"[conflict: other sources disagree about {segment.location}]")
    body = segment.text.strip()
    size = utf8_length(body)
    if size > policy.summarize_over_bytes:
        labels.append(
            f"[summary of a {size}-byte document; the full text is at {segment.location}]"
        )
        body = _summary(body, policy.summary_bytes)
    return Unit(
        segment.source_id,
        "\n".join([*labels, body]),
        title=segment.title,
        path=segment.location,
        timestamp=stamp,
        trust_level=segment.trust_level,
    )
