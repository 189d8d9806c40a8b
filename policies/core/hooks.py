"""The hook registry of SPEC C7 as a value: phase → handlers in registration order.

No global state: each run builds its registry and runs it. A handler returns ``None`` to let
the chain go on, or :class:`Halt` to stop it (for ``pre_tool_use``: and the tool call).
Admin-configured bindings, with time limits, fail-open and :class:`Replace`, run through
:mod:`policies.core.hook_runner` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

Phase = Literal["pre_tool_use", "post_tool_use", "session_start", "session_end"]
PHASES: Final[tuple[Phase, ...]] = get_args(Phase)


@dataclass(frozen=True)
class Halt:
    reason: str


@dataclass(frozen=True)
class Replace:
    """Go on, with these keys of the event changed for the handlers after this one and for
    the caller (``{"output": redacted}`` after a tool ran). ``details`` is what the handler
    wants recorded about what it did (``{"redacted": 2}``); it never reaches the event."""

    changes: Mapping[str, Any]
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


Handler = Callable[[Mapping[str, Any]], Halt | None]


@dataclass(frozen=True)
class Completed:
    """Every handler ran and none halted."""

    ran: int


@dataclass(frozen=True)
class Halted:
    """A handler halted the chain; the ones after it did not run."""

    reason: str
    handler: str
    ran: int


HookOutcome = Completed | Halted


def _empty() -> Mapping[Phase, tuple[Handler, ...]]:
    return MappingProxyType({phase: () for phase in PHASES})


@dataclass(frozen=True)
class HookRegistry:
    handlers: Mapping[Phase, tuple[Handler, ...]] = field(default_factory=_empty)

    def register(self, phase: Phase, handler: Handler) -> HookRegistry:
        """A new registry with ``handler`` after the phase's existing handlers."""
        if phase not in PHASES:
            raise ValueError(f"Unknown hook phase {phase!r}; phases are {', '.join(PHASES)}.")
        if not callable(handler):
            raise TypeError("A hook handler must be callable.")
        updated = dict(self.handlers)
        updated[phase] = (*self.handlers.get(phase, ()), handler)
        return HookRegistry(MappingProxyType(updated))

    def run(self, phase: Phase, event: Mapping[str, Any]) -> HookOutcome:
        if phase not in PHASES:
            raise ValueError(f"Unknown hook phase {phase!r}; phases are {', '.join(PHASES)}.")
        ran = 0
        for handler in self.handlers.get(phase, ()):
            result = handler(event)
            ran += 1
            if isinstance(result, Halt):
                name = getattr(handler, "__qualname__", repr(handler))
                return Halted(reason=result.reason, handler=name, ran=ran)
            if result is not None:
                raise TypeError(f"Hook {handler!r} returned {result!r}; return None or Halt.")
        return Completed(ran=ran)


class HookSettingsError(ValueError):
    """A hook binding's settings that cannot build its handler; the message says which
    setting and why, in words an admin can act on."""
