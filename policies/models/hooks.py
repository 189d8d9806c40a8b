"""Hook bindings: a shipped handler bound to a phase, for one agent or all (SPEC C7)."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from ..core.hook_handlers import HANDLERS, phase_check
from ..core.hooks import PHASES, HookSettingsError
from ..hook_handlers import handler_build
from .agents import Agent
from .eval_traffic import EvalAware


class HookBinding(EvalAware):
    """A shipped hook handler bound to a phase (SPEC C7), for one agent or for all of them.
    Bindings of a phase run in ``order``; a failing handler halts the chain unless
    ``fail_open``. Settings are checked against the handler's schema, and by building it."""

    EVAL_FLAG = "agent__for_evals"

    phase = models.CharField(max_length=32, choices=[(p, p) for p in PHASES])
    handler = models.CharField(max_length=63, choices=[(n, n) for n in HANDLERS])
    settings = models.JSONField(
        default=dict, blank=True, help_text="The handler's settings, a JSON object."
    )
    order = models.PositiveIntegerField(
        default=10, help_text="Bindings of a phase run in this order, lowest first."
    )
    enabled = models.BooleanField(default=True)
    fail_open = models.BooleanField(
        default=False,
        help_text="If the handler crashes or overruns, skip it and go on. Off: the chain "
        "halts (and, before a tool, the tool call).",
    )
    time_limit_seconds = models.FloatField(
        default=2.0,
        validators=[
            MinValueValidator(0.1, "At least 0.1 seconds."),
            MaxValueValidator(30, "At most 30 seconds: every tool call waits for its hooks."),
        ],
    )
    agent = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="hook_bindings",
        help_text="Empty: every agent.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["phase", "order", "id"]

    def __str__(self) -> str:
        scope = self.agent.slug if self.agent is not None else "all agents"
        return f"{self.phase} #{self.order}: {self.handler} ({scope})"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if self.handler not in HANDLERS:
            return  # the choices already say so
        errors = {}
        if self.phase in PHASES:
            try:
                phase_check(self.handler, self.phase)
            except HookSettingsError as error:
                errors["phase"] = str(error)
        try:
            handler_build(self.handler, self.settings)
        except HookSettingsError as error:
            errors["settings"] = f"{self.handler} settings: {error}"
        if errors:
            raise ValidationError(errors)
