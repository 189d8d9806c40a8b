"""One phase's admin-configured hook bindings, run in order (SPEC C7), each under its time limit.

1. Each handler sees the event as changed by the handlers before it, plus ``"phase"``; it
   returns ``None`` (go on), :class:`Halt` (stop the chain, and for ``pre_tool_use`` the tool
   call) or :class:`Replace` (go on with some keys of the event changed).
2. The chain never calls a handler itself: it asks ``call`` to, with the binding's time limit,
   and ``call`` answers what happened as a value: :class:`Finished` (with what the handler
   returned), :class:`Crashed` (with what it raised) or :class:`Overran`. Enforcing a time
   limit takes a thread or a process, which the core may not start; so the caller supplies
   it (:func:`policies.hook_threads.call_in_thread` for the loop), and the rules below are
   tested with a scripted ``call``, with no threads and no waiting.
3. A handler that raises, returns anything else, or overruns has failed. A failure halts the
   chain (fail closed), unless its binding says ``fail_open``: then it is skipped, and the
   report says so. A deliberate :class:`Halt` halts whatever ``fail_open`` says.

The outcome is a value: :class:`HooksCompleted` or :class:`HooksHalted`, each with the event
as the last handler left it and one :class:`HandlerReport` per handler that was started.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

from .hooks import PHASES, Halt, Phase, Replace

HookResult = Halt | Replace | None
HookHandler = Callable[[Mapping[str, Any]], HookResult]
Verdict = Literal["went_on", "replaced", "halted", "crashed", "overran"]
FAILURES: Final[frozenset[Verdict]] = frozenset({"crashed", "overran"})
_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


@dataclass(frozen=True)
class Finished:
    """The handler returned within its time limit. ``result`` is whatever it returned: the
    chain, not ``call``, decides whether that is a valid :data:`HookResult`."""

    result: object


@dataclass(frozen=True)
class Crashed:
    """The handler raised within its time limit; ``error`` is what it raised."""

    error: BaseException


@dataclass(frozen=True)
class Overran:
    """The time limit passed before the handler returned; whatever it does later is ignored."""


CallOutcome = Finished | Crashed | Overran
HandlerCall = Callable[[HookHandler, Mapping[str, Any], float], CallOutcome]
"""``call(handler, event, time_limit)``: run ``handler(event)``, wait at most ``time_limit``
seconds for it, and say what happened. It must not raise for anything the handler does."""


@dataclass(frozen=True)
class Binding:
    """A handler bound to a phase: what the runner needs, with no trace of where it came from
    (``binding_id`` is the admin row's id, for the record, when there is one)."""

    name: str
    phase: Phase
    handler: HookHandler
    time_limit: float = 2.0
    fail_open: bool = False
    binding_id: int | None = None

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"Unknown hook phase {self.phase!r}; phases are {', '.join(PHASES)}.")
        if not callable(self.handler):
            raise TypeError(f"The handler of hook {self.name!r} must be callable.")
        if not self.time_limit > 0:
            raise ValueError(f"Hook {self.name!r} needs a time limit above 0 seconds.")


@dataclass(frozen=True)
class HandlerReport:
    """What one handler did. ``reason`` explains a halt or a failure; ``details`` is what a
    :class:`Replace` asked to record; ``skipped`` marks a failure that fail-open let pass."""

    handler: str
    verdict: Verdict
    reason: str = ""
    details: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    skipped: bool = False


@dataclass(frozen=True)
class _Outcome:
    phase: Phase
    event: Mapping[str, Any]
    reports: tuple[HandlerReport, ...]

    @property
    def ran(self) -> tuple[str, ...]:
        """Handlers that finished and let the chain go on."""
        return tuple(r.handler for r in self.reports if r.verdict in ("went_on", "replaced"))

    @property
    def skipped(self) -> tuple[HandlerReport, ...]:
        """Failures that fail-open let pass."""
        return tuple(r for r in self.reports if r.skipped)


@dataclass(frozen=True)
class HooksCompleted(_Outcome):
    """No handler halted; ``event`` is what the caller goes on with."""


@dataclass(frozen=True)
class HooksHalted(_Outcome):
    """``handler`` halted the chain, deliberately or by failing closed; later ones never ran.
    ``reason`` reads as a sentence: "webhook-notifier overran its 2 s limit"."""

    handler: str
    reason: str


HooksOutcome = HooksCompleted | HooksHalted


def hooks_run_chain(
    bindings: Sequence[Binding], *, phase: Phase, event: Mapping[str, Any], call: HandlerCall
) -> HooksOutcome:
    """Run the bindings of ``phase`` in the order given, each through ``call`` under its time
    limit; bindings of other phases are left out."""
    if phase not in PHASES:
        raise ValueError(f"Unknown hook phase {phase!r}; phases are {', '.join(PHASES)}.")
    current: dict[str, Any] = {**event, "phase": phase}
    reports: list[HandlerReport] = []
    for binding in (b for b in bindings if b.phase == phase):
        frozen = MappingProxyType(dict(current))
        report, changes = _judge(binding, call(binding.handler, frozen, binding.time_limit))
        reports.append(report)
        if report.verdict == "halted" or (report.verdict in FAILURES and not report.skipped):
            return HooksHalted(
                phase=phase,
                event=MappingProxyType(current),
                reports=tuple(reports),
                handler=binding.name,
                reason=report.reason,
            )
        current.update(changes)
    return HooksCompleted(phase=phase, event=MappingProxyType(current), reports=tuple(reports))


def _judge(binding: Binding, outcome: CallOutcome) -> tuple[HandlerReport, Mapping[str, Any]]:
    """What one call of the binding's handler comes to: its report, and the event changes
    the chain goes on with (none unless it finished with a :class:`Replace`)."""
    name = binding.name
    match outcome:
        case Overran():
            return _failure(
                binding, "overran", f"{name} overran its {binding.time_limit:g} s limit"
            )
        case Crashed(error=error):
            message = f" {error}" if str(error) else ""
            return _failure(binding, "crashed", f"{name} crashed: {type(error).__name__}{message}")
        case Finished(result=result):
            return _result(binding, result)
    raise TypeError(f"call answered {outcome!r}, not Finished, Crashed or Overran.")


def _result(binding: Binding, result: object) -> tuple[HandlerReport, Mapping[str, Any]]:
    name = binding.name
    if result is None:
        return HandlerReport(name, "went_on"), _EMPTY
    if isinstance(result, Halt):
        return HandlerReport(name, "halted", reason=result.reason), _EMPTY
    if isinstance(result, Replace) and isinstance(result.changes, Mapping):
        if "phase" in result.changes:
            return _failure(binding, "crashed", f"{name} crashed: it tried to change the phase")
        details = MappingProxyType(dict(result.details))
        return HandlerReport(name, "replaced", details=details), result.changes
    return _failure(
        binding, "crashed", f"{name} crashed: it returned {result!r}, not None, Halt or Replace"
    )


def _failure(
    binding: Binding, verdict: Verdict, reason: str
) -> tuple[HandlerReport, Mapping[str, Any]]:
    return HandlerReport(binding.name, verdict, reason=reason, skipped=binding.fail_open), _EMPTY
