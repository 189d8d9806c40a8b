"""The hook handlers the console ships, by name: what an admin may bind to a phase.

Each entry is a spec: the JSON schema of its settings, the phases it may be bound to, a
description and an example; the model's choices and the admin's reference table read them.
:func:`settings_check` and :func:`phase_check` judge a binding by them, purely.

The specs hold no factory: building the ``webhook-notifier`` checks its URL and its handler
POSTs, which takes ``urllib``, and the core does no I/O. The factories and
:func:`policies.hook_handlers.handler_build`, the one way to get a handler, live outside the
core (that module says why there rather than a sender passed in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from jsonschema import Draft202012Validator

from . import hook_freeze, hook_redaction, hook_webhook
from .hooks import PHASES, HookSettingsError, Phase


@dataclass(frozen=True)
class HandlerSpec:
    """What the console says about a shipped handler, and how its settings are checked."""

    name: str
    schema: Mapping[str, Any]
    phases: tuple[Phase, ...]
    description: str
    example: Mapping[str, Any]


HANDLERS: Final[Mapping[str, HandlerSpec]] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            HandlerSpec(
                name="secret-redaction",
                schema=hook_redaction.SCHEMA,
                phases=("post_tool_use",),
                description=(
                    "Replaces secrets in a tool's output with [REDACTED:<kind>]: Anthropic, "
                    "AWS, GitHub and Slack keys, private keys, password=/token= values, and "
                    "your own patterns."
                ),
                example=hook_redaction.EXAMPLE,
            ),
            HandlerSpec(
                name="change-freeze",
                schema=hook_freeze.SCHEMA,
                phases=("pre_tool_use",),
                description=(
                    "Stops write tools during freeze windows (fixed dates, or weekdays and "
                    "hours in a time zone); read-only tools still run."
                ),
                example=hook_freeze.EXAMPLE,
            ),
            HandlerSpec(
                name="webhook-notifier",
                schema=hook_webhook.SCHEMA,
                phases=PHASES,
                description=(
                    "POSTs a short JSON summary (phase, run, agent, tool, decision, status; "
                    "never the output) to an http(s) URL."
                ),
                example=hook_webhook.EXAMPLE,
            ),
        )
    }
)


def settings_check(name: str, settings: Any) -> None:
    """Raise :class:`HookSettingsError` for settings that do not fit the handler's schema,
    naming the first wrong setting by its path (``patterns[1]``, ``timeout``)."""
    spec = handler_spec(name)
    errors = sorted(
        Draft202012Validator(spec.schema).iter_errors(settings),
        key=lambda e: (list(e.absolute_path), e.message),
    )
    if errors:
        error = errors[0]
        where = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
        ).lstrip(".")
        raise HookSettingsError(f"{where or 'settings'}: {_plain(error.validator, error.message)}")


def _plain(validator: Any, message: str) -> str:
    if validator == "additionalProperties":
        return message.replace("Additional properties are not allowed", "Unknown setting")
    if validator == "oneOf":
        return "give a regular expression, or an object with kind and pattern."
    return message


def handler_spec(name: str) -> HandlerSpec:
    try:
        return HANDLERS[name]
    except KeyError:
        raise HookSettingsError(
            f"No hook handler named {name!r}; handlers are {', '.join(HANDLERS)}."
        ) from None


def phase_check(name: str, phase: str) -> None:
    spec = handler_spec(name)
    if phase not in spec.phases:
        raise HookSettingsError(f"{name} runs at {', '.join(spec.phases)} only, not at {phase}.")
