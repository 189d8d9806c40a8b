"""A weekly window of time in a named time zone, with dates left out: the one shape behind
a policy rule's change window, an MCP server's change window and the change-freeze hook's
weekly freeze, so the three never disagree about when "Friday 18:00 to 08:00" ends.

A window belongs to the day it starts: ``Fri 18:00–08:00`` holds on Saturday at 07:00 and
not on Friday at 07:00. ``start == until`` is whole days. An excluded date (a holiday) is a
local date on which no window starts: a night window that starts on it holds none of its
hours, those after midnight included, and one that starts the day before still ends as
usual.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import cache
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

DAYS: Final = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
EVERY_DAY: Final = frozenset(range(7))
MIDNIGHT: Final = time(0, 0)


class WindowError(ValueError):
    """A window that cannot be read; the message names the field and an example."""


@dataclass(frozen=True)
class Weekly:
    days: frozenset[int]  # 0 = Monday
    start: time
    until: time  # at or before start: the window ends the next day
    zone: ZoneInfo
    excluded: frozenset[date] = frozenset()

    def holds(self, now: datetime) -> bool:
        """Whether an aware ``now`` falls inside the window."""
        local = now.astimezone(self.zone)
        at, day = local.time().replace(tzinfo=None), local.weekday()
        if self.start < self.until:
            started = local if day in self.days and self.start <= at < self.until else None
        elif day in self.days and at >= self.start:
            started = local
        else:  # the small hours of a window that began the day before
            yesterday = local - timedelta(days=1)
            started = yesterday if yesterday.weekday() in self.days and at < self.until else None
        return started is not None and started.date() not in self.excluded

    @property
    def name(self) -> str:
        """``Mon–Fri 09:00–17:00 Europe/Paris, not 2026-12-25``: what a reason shows."""
        hours = f"{self.start:%H:%M}–{self.until:%H:%M}" if self.start != self.until else ""
        text = " ".join(part for part in (days_text(self.days), hours, self.zone.key) if part)
        if self.excluded:
            text += ", not " + ", ".join(f"{d:%Y-%m-%d}" for d in sorted(self.excluded))
        return text


def days_text(days: Iterable[int]) -> str:
    """``every day``, ``Mon–Fri``, ``Sat, Sun``, ``Mon, Wed–Fri``."""
    chosen = sorted(set(days))
    if len(chosen) == 7:
        return "every day"
    runs: list[list[int]] = []
    for day in chosen:
        if runs and day == runs[-1][-1] + 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    names = [DAYS[d].capitalize() for d in range(7)]
    return ", ".join(
        names[r[0]] if len(r) == 1 else f"{names[r[0]]}{'–' if len(r) > 2 else ', '}{names[r[-1]]}"
        for r in runs
    )


def zone_of(name: str) -> ZoneInfo:
    """A named IANA zone; never ``localtime`` or ``Factory``, which mean whatever the host
    says (workers on two hosts would disagree on when a window holds)."""
    problem = f"timezone: {name!r} is not a time zone; use a name such as 'Europe/Paris' or 'UTC'."
    if name not in _zone_names() or name in _HOST_DEPENDENT:
        raise WindowError(problem)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise WindowError(problem) from error


_HOST_DEPENDENT: Final = frozenset({"localtime", "Factory", "posixrules"})


@cache
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}


def days_of(text: str) -> frozenset[int]:
    """``mon-fri``, ``mon,wed,fri``, ``sat sun``, ``fri-mon`` (wrapping): the days named, or
    every day for an empty text."""
    words = text.lower().replace(",", " ").split()
    if not words:
        return EVERY_DAY
    days: set[int] = set()
    for word in words:
        first, dash, last = word.partition("-")
        try:
            a = DAYS.index(first[:3]) if len(first) >= 3 else -1
            b = DAYS.index(last[:3]) if dash and len(last) >= 3 else a
        except ValueError:
            a = b = -1
        if a < 0 or b < 0 or (dash and not last):
            raise WindowError(
                f"days: {word!r} is not a day or a range of days; write e.g. 'mon-fri' or "
                "'sat, sun'."
            )
        span = (b - a) % 7
        days.update((a + step) % 7 for step in range(span + 1))
    return frozenset(days)


def dates_of(text: str) -> frozenset[date]:
    """ISO dates, one per line or separated by commas, and ranges ``2026-12-24..2026-12-26``."""
    found: set[date] = set()
    for word in text.replace(",", " ").split():
        first, dots, last = word.partition("..")
        try:
            start = date.fromisoformat(first)
            end = date.fromisoformat(last) if dots else start
        except ValueError:
            raise WindowError(
                f"excluded dates: {word!r} is not a date (2026-12-25) or a range of dates "
                "(2026-12-24..2026-12-26)."
            ) from None
        if end < start or (end - start).days > 366:
            raise WindowError(f"excluded dates: {word!r} must run forwards, at most a year.")
        found.update(start + timedelta(days=n) for n in range((end - start).days + 1))
    return frozenset(found)


def weekly(
    days: Iterable[int] = EVERY_DAY,
    start: time | None = None,
    until: time | None = None,
    zone: str = "UTC",
    excluded: Iterable[date] = (),
) -> Weekly:
    """A window from parts, with the checks every caller wants: both times or neither."""
    if (start is None) != (until is None):
        raise WindowError("Give both the start and the end of the window's hours, or neither.")
    if start is not None and start == until:
        raise WindowError(
            "The window starts and ends at the same time; leave both out for whole days."
        )
    chosen = frozenset(days) or EVERY_DAY
    if not chosen <= EVERY_DAY:
        raise WindowError("days: give days from 0 (Monday) to 6 (Sunday).")
    return Weekly(
        chosen,
        start or MIDNIGHT,
        until or MIDNIGHT,
        zone_of(zone),
        frozenset(excluded),
    )
