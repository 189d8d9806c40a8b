"""An agent's context configuration: layer overrides, instruction versions, business rules
(SPEC C1, C5)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from ..core.assembler import STRATEGIES
from ..core.layers import LAYER_NAMES, MAX_BUDGET
from .agents import Agent
from .eval_traffic import EvalAware


class LayerConfig(models.Model):
    """An agent's override of one layer's position, strategy and budget (SPEC C1)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="layer_configs")
    name = models.CharField(max_length=32, choices=[(n, n) for n in LAYER_NAMES])
    position = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Order in the prompt: 1 comes first; empty keeps the default.",
    )
    strategy = models.CharField(max_length=32, blank=True, choices=[(s, s) for s in STRATEGIES])
    budget = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[
            MinValueValidator(0, "A budget cannot be negative."),
            MaxValueValidator(
                MAX_BUDGET, f"A budget over {MAX_BUDGET:,} tokens is larger than any model reads."
            ),
        ],
        help_text="Tokens; 0 leaves the layer out.",
    )

    class Meta:
        ordering = ["agent", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "name"],
                name="layer_config_unique_name",
                violation_error_message="This agent already configures that layer.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug}: {self.name}"


class InstructionVersion(EvalAware):
    """One version of an agent's instructions; the newest is in force. Never rewritten."""

    EVAL_FLAG = "agent__for_evals"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="instruction_versions")
    version = models.PositiveIntegerField()
    text = models.TextField(blank=True)
    note = models.CharField(max_length=200, blank=True, help_text="What changed and why.")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    restored_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="restorations"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "-version"]
        get_latest_by = "version"
        constraints = [
            models.UniqueConstraint(fields=["agent", "version"], name="instruction_unique_version")
        ]

    def __str__(self) -> str:
        return f"{self.agent.slug} instructions v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ValueError("Instruction versions are never rewritten; save a new version.")
        super().save(*args, **kwargs)


class BusinessRule(models.Model):
    """A rule the agent must follow; the layer lists them oldest first (its drop order)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="business_rules")
    text = models.TextField()
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "created_at", "id"]

    def __str__(self) -> str:
        return self.text[:60]

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if not self.text.strip():
            raise ValidationError({"text": "A rule needs some text."})
