"""The ``change-freeze`` hook: no write tool runs during a freeze (a release, a holiday, a
weekend), whatever the policy allows. Read-only tools (``side_effect == "none"``) always run.

A freeze is any of: fixed windows (``start`` to ``end``, ISO datetimes; naive ones are read in
the settings' ``timezone``), and one weekly window (``weekdays`` with ``from``/``until``
times, read in ``timezone``; ``until`` before ``from`` runs past midnight into the next day).
The time comes from the event's ``now``, so the hook is a pure function of its input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, time
from fnmatch import fnmatchcase
from typing import Any, Final
from zoneinfo import ZoneInfo

from .hooks import Halt, HookSettingsError
from .windows import DAYS, Weekly, WindowError, zone_of

SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "windows": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["start", "end"],
                "properties": {
                    "name": {"type": "string", "maxLength": 100},
                    "start": {"type": "string"},
                    "end": {"type": "string"},
                },
            },
        },
        "weekdays": {"type": "array", "items": {"enum": list(DAYS)}, "uniqueItems": True},
        "from": {"type": "string"},
        "until": {"type": "string"},
        "timezone": {"type": "string", "minLength": 1},
        "tools": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "reason": {"type": "string", "maxLength": 300},
    },
}
EXAMPLE: Final = {
    "weekdays": ["fri"],
    "from": "16:00",
    "until": "23:59",
    "timezone": "Europe/Paris",
    "reason": "No changes before the weekend.",
}


@dataclass(frozen=True)
class Window:
    name: str
    start: datetime
    end: datetime

    def holds(self, now: datetime) -> bool:
        return self.start <= now < self.end


def _zone(name: str) -> ZoneInfo:
    try:
        return zone_of(name)
    except WindowError as error:
        raise HookSettingsError(str(error)) from error


def _moment(field: str, text: str, zone: ZoneInfo) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as error:
        raise HookSettingsError(
            f"{field}: {text!r} is not an ISO date and time, e.g. 2025-12-24T18:00:00+01:00."
        ) from error
    return moment if moment.tzinfo else moment.replace(tzinfo=zone)


def _clock(field: str, text: str) -> time:
    try:
        return time.fromisoformat(text)
    except ValueError as error:
        raise HookSettingsError(f"{field}: {text!r} is not a time of day, e.g. 18:00.") from error


def _windows(items: Sequence[Mapping[str, str]], zone: ZoneInfo) -> list[Window]:
    windows = []
    for index, item in enumerate(items):
        start = _moment(f"windows[{index}].start", item["start"], zone)
        end = _moment(f"windows[{index}].end", item["end"], zone)
        if end <= start:
            raise HookSettingsError(f"windows[{index}]: the end must come after the start.")
        name = item.get("name") or f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M %Z}".strip()
        windows.append(Window(name, start, end))
    return windows


def _weekly(settings: Mapping[str, Any], zone: ZoneInfo) -> Weekly | None:
    has_days = "weekdays" in settings
    if not has_days and "from" not in settings and "until" not in settings:
        return None
    if ("from" in settings) != ("until" in settings):
        raise HookSettingsError("from, until: give both times of the weekly window, or neither.")
    if has_days and not settings["weekdays"]:
        raise HookSettingsError("weekdays: name at least one day, or leave the key out.")
    start = _clock("from", settings.get("from", "00:00"))
    until = _clock("until", settings.get("until", "00:00"))
    if "from" in settings and start == until:
        raise HookSettingsError("from, until: the same time; leave both out to freeze whole days.")
    days = frozenset(DAYS.index(d) for d in settings.get("weekdays", DAYS))
    return Weekly(days, start, until, zone)


def change_freeze(settings: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], Halt | None]:
    """Reads the event's ``now`` (an aware datetime), ``tool`` and ``side_effect`` (a missing
    one counts as a write). Halts a write tool inside a window, naming the window."""
    zone = _zone(settings.get("timezone", "UTC"))
    windows: list[Window | Weekly] = [*_windows(settings.get("windows", ()), zone)]
    weekly = _weekly(settings, zone)
    if weekly is not None:
        windows.append(weekly)
    if not windows:
        raise HookSettingsError(
            "Give the freeze some time: windows with start and end, or weekdays and/or from/until."
        )
    tools = tuple(settings.get("tools", ()))
    reason = settings.get("reason") or "changes are frozen"

    def handler(event: Mapping[str, Any]) -> Halt | None:
        now = event.get("now")
        if not isinstance(now, datetime) or now.tzinfo is None:
            raise ValueError("the event has no timezone-aware 'now' to compare with the freeze")
        tool, side_effect = str(event.get("tool", "")), event.get("side_effect")
        if side_effect == "none":
            return None
        if tools and not any(fnmatchcase(tool, pattern) for pattern in tools):
            return None
        for window in windows:
            if window.holds(now):
                return Halt(
                    f"Change freeze ({window.name}): {reason}. {tool} is a write tool "
                    f"({side_effect or 'side effect unknown'}); try again after the freeze."
                )
        return None

    return handler
