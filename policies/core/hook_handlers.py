"""The hook handlers the console ships, by name: what an admin may bind to a phase.

Each entry holds a factory (settings → handler), the JSON schema of its settings, the phases
it may be bound to, a description and an example. :func:`handler_build` is the one way to get
a handler: the schema first, then the factory's own checks (a regex that does not compile, a
URL that is not http), each failure a :class:`HookSettingsError` that names the setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from jsonschema import Draft202012Validator

from . import hook_freeze, hook_redaction, hook_webhook
from .hook_runner import HookHandler
from .hooks import PHASES, HookSettingsError, Phase


@dataclass(frozen=True)
class HandlerSpec:
    name: str
    factory: Callable[[Mapping[str, Any]], HookHandler]
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
                factory=hook_redaction.secret_redaction,
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
                factory=hook_freeze.change_freeze,
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
                factory=hook_webhook.webhook_notifier,
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


def handler_build(name: str, settings: Any) -> HookHandler:
    """The handler ``name`` configured by ``settings``, or HookSettingsError saying why not."""
    settings_check(name, settings)
    return handler_spec(name).factory(settings)


def phase_check(name: str, phase: str) -> None:
    spec = handler_spec(name)
    if phase not in spec.phases:
        raise HookSettingsError(f"{name} runs at {', '.join(spec.phases)} only, not at {phase}.")
